"""Translation from your own aligned files: line N of the source file translates line N of the
target file (plain UTF-8 or .gz), with a joint SentencePiece vocabulary trained on the training
pair.

The files, the languages and the vocabulary size come from datagen's flags:

  t2t_lite-datagen --problem=translate_text_files --data_dir=D --tmp_dir=T \
      --train_source=train.en --train_target=train.de --dev_source=dev.en --dev_target=dev.de \
      [--test_source=test.en --test_target=test.de] [--source_language=en --target_language=de] \
      [--approx_vocab_size=8192]

Datagen records them in `D/translate_text_files.json`. The trainer and the decoder create the
problem by name without them: the vocabulary has a fixed name in D, so they find it all the same.
Running datagen again into D with other files or settings is an error rather than a mix of old
and new data, once data was generated there; until then (a first run that failed on a file) the
record is replaced, so the corrected command runs.
"""
import dataclasses
import json
import os

import tensorflow as tf
from absl import logging

from t2t_lite.storage import atomic_files
from t2t_lite.data.problem import DEV, TEST, TRAIN
from t2t_lite.data.text_files import read_parallel
from t2t_lite.data.text_problem import Text2TextProblem
from t2t_lite.errors import DataError
from t2t_lite.registry import register_problem

FLAGS_HINT = ("pass your files to t2t_lite-datagen with --train_source, --train_target, "
              "--dev_source and --dev_target (and optionally --test_source, --test_target, "
              "--source_language, --target_language, --approx_vocab_size)")


@dataclasses.dataclass(frozen=True)
class FilesConfig:
    """Where each split's (source, target) files are, and the vocabulary to train on them."""
    train: tuple
    dev: tuple
    test: tuple = None
    source_language: str = None
    target_language: str = None
    approx_vocab_size: int = Text2TextProblem.approx_vocab_size

    def pairs(self) -> dict:
        """{split name: (source path, target path)} for the splits that have files."""
        return {name: pair for name, pair in ((TRAIN, self.train), (DEV, self.dev),
                                              (TEST, self.test)) if pair}


@register_problem
class TranslateTextFiles(Text2TextProblem):
    """Your parallel files; `configure` before generate_data (bin/datagen does it from flags)."""

    config = None

    def configure(self, train, dev, test=None, source_language=None, target_language=None,
                  vocab_size=None):
        """train, dev, test: (source path, target path) pairs; test is optional and is written
        as text for the decoder, as for every problem."""
        for name, pair in ((TRAIN, train), (DEV, dev), (TEST, test)):
            if pair is not None and (len(pair) != 2 or not all(pair)):
                raise DataError(f"the {name} split needs a source and a target file, got {pair}")
        if train is None or dev is None:
            missing = TRAIN if train is None else DEV
            raise DataError(f"translate_text_files has no {missing} files: {FLAGS_HINT}")
        if vocab_size is not None and vocab_size < 1:
            raise DataError(f"the vocabulary size must be positive, got {vocab_size}")
        self.config = FilesConfig(
            _absolute(train), _absolute(dev), _absolute(test), source_language, target_language,
            vocab_size or Text2TextProblem.approx_vocab_size)
        self.source_language, self.target_language = source_language, target_language
        self.approx_vocab_size = self.config.approx_vocab_size
        return self

    def _configured(self) -> FilesConfig:
        if self.config is None:
            raise DataError(f"translate_text_files reads your own files: {FLAGS_HINT}")
        return self.config

    # The vocabulary's name leaves out the size, which only datagen knows.
    def vocab_filename(self) -> str:
        return f"vocab.{self.name}.{self.vocab_type}.model"

    def config_path(self, data_dir: str) -> str:
        return os.path.join(data_dir, f"{self.name}.json")

    def dataset_splits(self) -> list:
        splits = super().dataset_splits()
        if self.config is not None and self.config.test is None:
            splits = [split for split in splits if split.name != TEST]
        return splits

    def check_raw_data(self, tmp_dir: str):
        """The files are read once before datagen writes anything (`check_files`)."""
        self.check_files(self._configured())

    def prepare_vocabulary(self, data_dir: str, tmp_dir: str):
        """A vocabulary in data_dir is kept only if it was trained on the same files: the
        settings are checked against (or written to) the record first (`_record_config`)."""
        self._record_config(data_dir, self._configured())
        super().prepare_vocabulary(data_dir, tmp_dir)

    def check_files(self, config: FilesConfig):
        """Reads every pair once before any work, so that a missing file, different line counts
        or invalid UTF-8 in dev or test end datagen before the long training split rather than
        after it (and in train, as a DataError: raised inside SentencePiece's trainer it would
        come out as a RuntimeError). Train and dev need a pair with text on both sides: an
        empty training file would stop SentencePiece with "[!sentences_.empty()]"."""
        for name, pair in config.pairs().items():
            usable = sum(1 for sample in read_parallel(*pair)
                         if sample["inputs"].strip() and sample["targets"].strip())
            if not usable and name in (TRAIN, DEV):
                raise DataError(f"{pair[0]} and {pair[1]} hold no sentence pair (every line is "
                                f"empty on one side or both): the {name} split needs at least "
                                f"one; pass other files with --{name}_source and "
                                f"--{name}_target")

    def _record_config(self, data_dir: str, config: FilesConfig):
        """Records the settings, or checks them against the record when data_dir already
        holds data generated with it. A record without data (the first run failed before the
        vocabulary) is replaced."""
        path = self.config_path(data_dir)
        settings = json.loads(json.dumps(dataclasses.asdict(config)))  # tuples as lists
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path, "r") as handle:
                recorded = json.load(handle)
            changed = sorted(key for key in settings if recorded.get(key) != settings[key])
            if not changed:
                return
            generated = self.generated_files(data_dir)
            if generated:
                raise DataError(f"{data_dir} holds {self.name} data generated with other "
                                f"{', '.join(changed)} (see {path}; {generated[0]} is from "
                                f"them): use another --data_dir, or empty this one to start "
                                f"again")
            logging.info("%s: no data was generated with the recorded settings, replaced "
                         "(other %s)", path, ", ".join(changed))
        tf.io.gfile.makedirs(data_dir)
        with atomic_files.atomic_write(path) as handle:
            handle.write(json.dumps(settings, indent=2))

    def generated_files(self, data_dir: str) -> list:
        """What datagen made from the recorded files and is still in data_dir: the
        vocabulary, shards, manifests and text splits (not the leftovers of interrupted
        writes, which the next run removes)."""
        vocabulary = self.vocab_path(data_dir)
        made = (tf.io.gfile.listdir(data_dir) if tf.io.gfile.isdir(data_dir) else [])
        return ([vocabulary] if tf.io.gfile.exists(vocabulary) else []) + sorted(
            os.path.join(data_dir, name) for name in made if name.startswith(f"{self.name}-")
            and not name.endswith(atomic_files.INCOMPLETE_SUFFIX))

    def datagen_command(self, data_dir: str) -> str:
        """With the file flags datagen recorded in data_dir, when it did."""
        command = super().datagen_command(data_dir)
        try:
            with tf.io.gfile.GFile(self.config_path(data_dir), "r") as handle:
                recorded = json.load(handle)
        except (OSError, ValueError, tf.errors.OpError):
            return command + " --train_source=... (the flags of your first run)"
        for name in (TRAIN, DEV, TEST):
            if recorded.get(name):
                source, target = recorded[name]
                command += f" --{name}_source={source} --{name}_target={target}"
        for flag in ("source_language", "target_language", "approx_vocab_size"):
            if recorded.get(flag) is not None:
                command += f" --{flag}={recorded[flag]}"
        return command

    def generate_samples(self, data_dir: str, tmp_dir: str, split: str):
        pairs = self._configured().pairs()
        if split not in pairs:
            raise DataError(f"translate_text_files has no {split} files: {FLAGS_HINT}")
        return read_parallel(*pairs[split])


def _absolute(pair):
    """Absolute paths, so that the record in data_dir does not depend on the working folder
    (a URL such as gs://b/f or ram://f is kept as it is)."""
    return tuple(path if "://" in path else os.path.abspath(path)
                 for path in pair) if pair else None
