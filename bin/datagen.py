"""t2t_lite-datagen: generate a problem's sharded TFRecords (t2t-datagen).

  t2t_lite-datagen --problem=algorithmic_copy --data_dir=D --tmp_dir=T
  t2t_lite-datagen --problem=translate_text_files --data_dir=D --tmp_dir=T \
      --train_source=train.en --train_target=train.de --dev_source=dev.en --dev_target=dev.de
"""
from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

# Only for problems read from the user's own files (translate_text_files).
SPLITS_WITH_FILES = ("train", "dev", "test")
FILE_FLAGS = [f"{split}_{side}" for split in SPLITS_WITH_FILES for side in ("source", "target")]
FILE_PROBLEM_FLAGS = FILE_FLAGS + ["source_language", "target_language", "approx_vocab_size"]


def define_flags():
    common.define_problem_flags()
    flags.DEFINE_string("tmp_dir", None, "Folder for downloads and raw files.")
    for split in SPLITS_WITH_FILES:
        for side in ("source", "target"):
            flags.DEFINE_string(f"{split}_{side}", None,
                                f"translate_text_files: the {split} split's {side} file, one "
                                f"sentence a line (plain UTF-8 or .gz).")
    flags.DEFINE_string("source_language", None,
                        "translate_text_files: the source language code.")
    flags.DEFINE_string("target_language", None,
                        "translate_text_files: the target language code.")
    flags.DEFINE_integer("approx_vocab_size", None,
                         "translate_text_files: the joint vocabulary's size (default 8192).")
    flags.mark_flags_as_required(["problem", "data_dir", "tmp_dir"])


def file_pair(split):
    """(source, target) from --SPLIT_source and --SPLIT_target, None when both are absent."""
    source, target = FLAGS[f"{split}_source"].value, FLAGS[f"{split}_target"].value
    if (source is None) != (target is None):
        given, missing = ("source", "target") if target is None else ("target", "source")
        raise common.FlagError(f"--{split}_{given} needs --{split}_{missing} too")
    return (source, target) if source is not None else None


def main(argv):
    common.check_inputs_reachable("tmp_dir", *FILE_FLAGS)  # --data_dir: by its lock's check
    problem = registry.problem(FLAGS.problem)
    given = [name for name in FILE_PROBLEM_FLAGS if FLAGS[name].value is not None]
    if not hasattr(problem, "configure"):
        if given:
            raise common.FlagError(f"--{given[0]} is only for problems read from your own "
                                   f"files (translate_text_files), not for {FLAGS.problem}")
    elif given:
        problem.configure(*(file_pair(split) for split in SPLITS_WITH_FILES),
                          source_language=FLAGS.source_language,
                          target_language=FLAGS.target_language,
                          vocab_size=FLAGS.approx_vocab_size)
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)


def run():
    common.start(main, define_flags)


if __name__ == "__main__":
    run()
