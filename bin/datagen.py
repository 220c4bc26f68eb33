"""t2t_lite-datagen: generate a problem's sharded TFRecords (t2t-datagen).

  t2t_lite-datagen --problem=algorithmic_copy --data_dir=D --tmp_dir=T
"""
from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

common.define_problem_flags()
flags.DEFINE_string("tmp_dir", None, "Folder for downloads and raw files.")
flags.mark_flags_as_required(["problem", "data_dir", "tmp_dir"])


def main(argv):
    registry.problem(FLAGS.problem).generate_data(FLAGS.data_dir, FLAGS.tmp_dir)


def run():
    common.run_main(main)


if __name__ == "__main__":
    run()
