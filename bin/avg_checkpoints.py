"""t2t_lite-avg-checkpoints: average the model variables of the last checkpoints (paper §6.1;
t2t's avg_checkpoints.py).

  t2t_lite-avg-checkpoints --output_dir=O --num_last=5 --out=O/averaged/model.ckpt
  t2t_lite-avg-checkpoints --output_dir=O --checkpoints=O/best,O/model.ckpt-900 --out=...
  t2t_lite-decoder --data_dir=D --output_dir=O --checkpoint_path=O/averaged/model.ckpt ...

The paper averaged the last 5 checkpoints of the base models and the last 20 of the big ones.
"""
from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags

# The rest of the library is imported in the functions below: it loads TensorFlow, which
# common.start loads first, quietly.


def define_flags():
    flags.DEFINE_string("output_dir", None, "The trainer's folder of checkpoints.")
    flags.DEFINE_integer("num_last", 5, "How many of the latest checkpoints to average.",
                         lower_bound=1)
    flags.DEFINE_list("checkpoints", None, "The checkpoints to average instead of the last "
                      "--num_last: comma-separated prefixes (O/model.ckpt-1000) or folders with "
                      "a `checkpoint` file (O/best: the checkpoint it names), of one run.")
    flags.DEFINE_string("out", None, "Where to keep the average, e.g. O/averaged/model.ckpt: a "
                        "folder that holds it and a `checkpoint` file naming it (a new average "
                        "replaces the old one as a unit); --checkpoint_path takes this path.")
    flags.mark_flags_as_required(["output_dir", "out"])


def main(argv):
    import t2t_lite
    common.check_inputs_reachable("output_dir")
    prefix, paths = t2t_lite.average_checkpoints(
        FLAGS.output_dir, FLAGS.out, FLAGS.num_last if FLAGS["num_last"].present else None,
        FLAGS.checkpoints)
    print(f"averaged {len(paths)} checkpoint{'s' if len(paths) != 1 else ''}:")
    for path in paths:
        print(f"  {path}")
    print(f"into {FLAGS.out} ({prefix})")
    print(f"decode with: t2t_lite-decoder --output_dir={FLAGS.output_dir} "
          f"--checkpoint_path={FLAGS.out} ...")


def run():
    common.start(main, define_flags)


if __name__ == "__main__":
    run()
