"""t2t_lite-datagen: generate a problem's sharded TFRecords (t2t-datagen).

  t2t_lite-datagen --problem=algorithmic_copy --data_dir=D --tmp_dir=T
  t2t_lite-datagen --problem=translate_text_files --data_dir=D --tmp_dir=T \
      --train_source=train.en --train_target=train.de --dev_source=dev.en --dev_target=dev.de
  t2t_lite-datagen --problem=translate_text_files ... --train_source=a.en,b.en \
      --train_target=a.de,b.de --train_weights=0.8,0.2

With --vocab_from=DIR (a trained model's --output_dir, a data folder or a .model file), the
data encodes with that vocabulary instead of one trained on it: the model can train on it.
"""
from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

# Only for problems read from the user's own files (translate_text_files).
SPLITS_WITH_FILES = ("train", "dev", "test")
FILE_FLAGS = [f"{split}_{side}" for split in SPLITS_WITH_FILES for side in ("source", "target")]
FILE_PROBLEM_FLAGS = FILE_FLAGS + ["train_weights", "source_language", "target_language",
                                   "approx_vocab_size"]


def define_flags():
    common.define_problem_flags()
    flags.DEFINE_string("tmp_dir", None, "Folder for downloads and raw files.")
    for split in SPLITS_WITH_FILES:
        for side in ("source", "target"):
            flags.DEFINE_string(f"{split}_{side}", None,
                                f"translate_text_files: the {split} split's {side} file, one "
                                f"sentence a line (plain UTF-8 or .gz)" +
                                ("; several training corpora as a comma-separated list "
                                 "(see --train_weights)." if split == "train" else "."))
    flags.DEFINE_string("train_weights", None,
                        "translate_text_files: with several training corpora (comma-separated "
                        "--train_source and --train_target lists), each one's share of the "
                        "training examples, comma-separated (default: in proportion to their "
                        "sizes).")
    flags.DEFINE_string("source_language", None,
                        "translate_text_files: the source language code.")
    flags.DEFINE_string("target_language", None,
                        "translate_text_files: the target language code.")
    flags.DEFINE_integer("approx_vocab_size", None,
                         "translate_text_files: the joint vocabulary's size (default 8192).")
    flags.DEFINE_string("vocab_from", None,
                        "Encode with this vocabulary instead of training one: a trained "
                        "model's --output_dir (the vocabulary its hparams.json records, "
                        "checked by sha256), a data folder (its vocab.*.model) or a "
                        "SentencePiece .model file; copied into --data_dir under this "
                        "problem's vocabulary name. Not for problems whose vocabulary is made "
                        "in code (algorithmic_*).")
    flags.mark_flags_as_required(["problem", "data_dir", "tmp_dir"])


def file_pair(split):
    """(source, target) from --SPLIT_source and --SPLIT_target, None when both are absent."""
    source, target = FLAGS[f"{split}_source"].value, FLAGS[f"{split}_target"].value
    if (source is None) != (target is None):
        given, missing = ("source", "target") if target is None else ("target", "source")
        raise common.FlagError(f"--{split}_{given} needs --{split}_{missing} too")
    return (source, target) if source is not None else None


def train_corpora(sources: str, targets: str) -> list:
    """[(source, target), ...] of the comma-separated --train_source and --train_target
    values, one pair per training corpus; a FlagError for lists of different lengths or an
    empty file name."""
    lists = {"train_source": sources.split(","), "train_target": targets.split(",")}
    for name, paths in lists.items():
        if not all(paths):
            raise common.FlagError(f"--{name}={','.join(paths)} has an empty file name in "
                                   f"its comma-separated list")
    if len(lists["train_source"]) != len(lists["train_target"]):
        raise common.FlagError(f"--train_source lists {len(lists['train_source'])} files and "
                               f"--train_target {len(lists['train_target'])}: one target file "
                               f"for each source file")
    return list(zip(lists["train_source"], lists["train_target"]))


def train_weights(value: str) -> list:
    """The numbers of --train_weights (comma-separated), or None; a FlagError for one that is
    not a number (the problem refuses a count or a value it cannot take)."""
    if value is None:
        return None
    try:
        return [float(weight) for weight in value.split(",")]
    except ValueError:
        raise common.FlagError(f"--train_weights={value}: expected comma-separated numbers, "
                               f"one for each training corpus") from None


def main(argv):
    import t2t_lite
    # --data_dir: by its lock's check
    common.check_inputs_reachable("tmp_dir", "vocab_from", *FILE_FLAGS)
    if FLAGS.vocab_from is not None and FLAGS.approx_vocab_size is not None:
        raise common.FlagError("--approx_vocab_size sizes a vocabulary trained here, and "
                               "--vocab_from takes one as it is: pass one or the other")
    given = [name for name in FILE_PROBLEM_FLAGS if FLAGS[name].value is not None]
    files = {}
    if given:
        if not hasattr(registry.problem(FLAGS.problem), "configure"):
            raise common.FlagError(f"--{given[0]} is only for problems read from your own "
                                   f"files (translate_text_files), not for {FLAGS.problem}")
        train, dev, test = (file_pair(split) for split in SPLITS_WITH_FILES)
        files = dict(train=train and train_corpora(*train), dev=dev, test=test,
                     train_weights=train_weights(FLAGS.train_weights),
                     source_language=FLAGS.source_language,
                     target_language=FLAGS.target_language, vocab_size=FLAGS.approx_vocab_size)
    t2t_lite.generate_data(FLAGS.problem, FLAGS.data_dir, FLAGS.tmp_dir, FLAGS.vocab_from,
                           **files)


def run():
    common.start(main, define_flags)


if __name__ == "__main__":
    run()
