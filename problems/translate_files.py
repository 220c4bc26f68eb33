"""translate_text_files: translation from your own aligned files (line N of the source translates
line N of the target; plain UTF-8 or .gz), one or several weighted training corpora, with a
joint SentencePiece vocabulary (docs/problems.md, "Your own files")."""
import dataclasses
import itertools
import json
import math
import os
import random

import tensorflow as tf
from absl import logging

from t2t_lite.storage import atomic_files, output_paths
from t2t_lite.data.problem import DEV, TEST, TRAIN, Split
from t2t_lite.data.text_files import read_parallel
from t2t_lite.data.text_problem import Text2TextProblem
from t2t_lite.errors import DataError
from t2t_lite.registry import register_problem

FLAGS_HINT = ("pass your files to t2t_lite-datagen with --train_source, --train_target, "
              "--dev_source and --dev_target (and optionally --test_source, --test_target, "
              "--source_language, --target_language, --approx_vocab_size)")


# The split name of the i-th of several training corpora: its shards P-train.c0-*-of-* are
# outside the train split's pattern P-train-*-of-*.
CORPUS_NAME = "train.c{}"


@dataclasses.dataclass(frozen=True)
class FilesConfig:
    """Where each split's (source, target) files are, and the vocabulary to train on them.
    `train`: one (source, target) pair per training corpus; `train_weights`: with several, each
    one's share of the training examples (None: in proportion to their sizes)."""
    train: tuple
    dev: tuple
    test: tuple = None
    source_language: str = None
    target_language: str = None
    approx_vocab_size: int = Text2TextProblem.approx_vocab_size
    train_weights: tuple = None

    def corpus_names(self) -> list:
        """The split name of each training corpus: "train" for one, CORPUS_NAME for several."""
        if len(self.train) == 1:
            return [TRAIN]
        return [CORPUS_NAME.format(index) for index in range(len(self.train))]

    def pairs(self) -> dict:
        """{split name: (source path, target path)} for the splits that have files, each
        training corpus under its own name (`corpus_names`)."""
        pairs = dict(zip(self.corpus_names(), self.train))
        pairs.update((name, pair) for name, pair in ((DEV, self.dev), (TEST, self.test)) if pair)
        return pairs

    def record(self) -> dict:
        """The settings as datagen records them in JSON: one training corpus as its pair
        ("train": [source, target]), several as a list of pairs."""
        settings = json.loads(json.dumps(dataclasses.asdict(self)))  # tuples as lists
        if len(self.train) == 1:
            settings["train"] = settings["train"][0]
        return settings


def recorded_train_pairs(recorded: dict) -> list:
    """The training corpora's [source, target] pairs of a record (`FilesConfig.record`)."""
    train = recorded.get("train") or []
    return [train] if train and isinstance(train[0], str) else list(train)


_END = object()  # what next() gives for a corpus read to its end
# The passes over one corpus after which a weighted sample stops, every corpus read whole or
# not: a corpus of weight 1e-6 would otherwise be read whole only after some 1e6 draws per
# pair, its partner read a million times over (weights above 1% are read whole first).
MAX_PASSES = 100


def sample_by_weight(corpora: list, weights: list, seed: int, max_passes: int = MAX_PASSES):
    """Yields the items of several corpora interleaved at random: each next one from corpus i
    with probability weights[i] / sum(weights) (random.Random(seed): the same seed, the same
    sample), a corpus that ends starting over, until every corpus has been read whole at least
    once, or one has been read whole `max_passes` times. `corpora`: functions that return a new
    iterator over a corpus each time."""
    rng, weights = random.Random(seed), list(weights)
    iterators = [corpus() for corpus in corpora]
    unread, passes = set(range(len(corpora))), [0] * len(corpora)
    while unread and any(weights):
        index = rng.choices(range(len(corpora)), weights)[0]
        item = next(iterators[index], _END)
        if item is _END:
            unread.discard(index)
            passes[index] += 1
            if passes[index] >= max_passes:
                return
            iterators[index] = corpora[index]()
            item = next(iterators[index], _END)
            if item is _END:  # an empty corpus: never drawn again
                weights[index] = 0
            if not unread or item is _END:
                continue
        yield item


@register_problem
class TranslateTextFiles(Text2TextProblem):
    """Your parallel files; `configure` before generate_data (bin/datagen does it from flags)."""

    config = None

    def configure(self, train, dev, test=None, source_language=None, target_language=None,
                  vocab_size=None, train_weights=None):
        """train: a (source path, target path) pair, or a list of them, one per training
        corpus; dev, test: a pair each; test is optional and is written as text for the
        decoder, as for every problem. train_weights: with several corpora, a positive number
        for each, its share of the training examples (None: in proportion to their sizes)."""
        corpora = _corpus_pairs(train)
        for name, pair in [(TRAIN, pair) for pair in corpora or ()] + [(DEV, dev), (TEST, test)]:
            if pair is not None and (len(pair) != 2 or not all(pair)):
                raise DataError(f"the {name} split needs a source and a target file, got {pair}")
        if corpora is None or dev is None:
            missing = TRAIN if corpora is None else DEV
            raise DataError(f"translate_text_files has no {missing} files: {FLAGS_HINT}")
        if vocab_size is not None and vocab_size < 1:
            raise DataError(f"the vocabulary size must be positive, got {vocab_size}")
        weights = _checked_weights(train_weights, len(corpora))
        self.config = FilesConfig(
            tuple(_absolute(pair) for pair in corpora), _absolute(dev), _absolute(test),
            source_language, target_language, vocab_size or Text2TextProblem.approx_vocab_size,
            weights if len(corpora) > 1 else None)  # one corpus: all its examples, weighted or not
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
        """t2t's splits, the train split as one split per training corpus (`corpus_names`),
        without a test split when there are no test files."""
        if self.config is None:
            return super().dataset_splits()
        splits = []
        for split in super().dataset_splits():
            if split.name == TRAIN:
                splits += [Split(name, split.shards) for name in self.config.corpus_names()]
            elif split.name != TEST or self.config.test is not None:
                splits.append(split)
        return splits

    def train_corpora(self, data_dir: str) -> list:
        """The training corpora recorded in data_dir, each with its recorded weight (None: by
        its size); the train split alone for one corpus or without a record."""
        recorded = self._recorded(data_dir)
        pairs = recorded_train_pairs(recorded) if recorded else []
        if len(pairs) < 2:
            return super().train_corpora(data_dir)
        weights = recorded.get("train_weights") or [None] * len(pairs)
        if len(weights) != len(pairs):
            raise DataError(f"{self.config_path(data_dir)} records {len(pairs)} training corpora "
                            f"and {len(weights)} train_weights: rerun "
                            f"{self.datagen_command(data_dir)} into an empty --data_dir")
        return [dataclasses.replace(self.corpus(data_dir, CORPUS_NAME.format(index), weight),
                                    files=tuple(pair))
                for index, (weight, pair) in enumerate(zip(weights, pairs))]

    vocabulary_sample_seed = 0  # of the sample of several corpora the vocabulary trains on

    def vocabulary_samples(self, data_dir: str, tmp_dir: str):
        """With several training corpora, a sample drawn from them by their weights (or by
        their line counts when none were given), seeded, until each was read whole once
        (`sample_by_weight`); the vocabulary trains on its first max_vocab_training_sentences
        sentences. One corpus: its pairs in order."""
        config = self._configured()
        if len(config.train) == 1:
            return super().vocabulary_samples(data_dir, tmp_dir)
        corpora = [lambda pair=pair: read_parallel(*pair) for pair in config.train]
        weights = config.train_weights or [sum(1 for _ in corpus()) for corpus in corpora]
        return sample_by_weight(corpora, weights, self.vocabulary_sample_seed)

    def check_raw_data(self, tmp_dir: str):
        """The files are read once before datagen writes anything (`check_files`)."""
        self.check_files(self._configured())

    def prepare_vocabulary(self, data_dir: str, tmp_dir: str, vocab_from: str = None):
        """A vocabulary in data_dir is kept only if it was trained on the same files: the
        settings are checked against (or written to) the record first (`_record_config`; not
        approx_vocab_size with vocab_from, whose vocabulary is taken as it is)."""
        self._record_config(data_dir, self._configured(), vocab_from is not None)
        super().prepare_vocabulary(data_dir, tmp_dir, vocab_from)

    def check_files(self, config: FilesConfig):
        """Reads every pair once before any work, so that a missing file, different line counts
        or invalid UTF-8 in dev or test end datagen before the long training split rather than
        after it (and in train, as a DataError: raised inside SentencePiece's trainer it would
        come out as a RuntimeError). Train and dev need a pair with text on both sides: an
        empty training file would stop SentencePiece with "[!sentences_.empty()]"."""
        for name, pair in config.pairs().items():
            usable = sum(1 for sample in read_parallel(*pair)
                         if sample["inputs"].strip() and sample["targets"].strip())
            split = name.split(".")[0]  # a training corpus's flags are the train split's
            if not usable and split in (TRAIN, DEV):
                what = "each training corpus" if name != split else f"the {name} split"
                raise DataError(f"{pair[0]} and {pair[1]} hold no sentence pair (every line is "
                                f"empty on one side or both): {what} needs at least one; pass "
                                f"other files with --{split}_source and --{split}_target")

    def _record_config(self, data_dir: str, config: FilesConfig, vocabulary_taken=False):
        """Records the settings, or checks them against the record when data_dir already
        holds data generated with it. A record without data (the first run failed before the
        vocabulary) is replaced."""
        path = self.config_path(data_dir)
        settings = config.record()
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path, "r") as handle:
                recorded = json.load(handle)
            changed = sorted(key for key in settings if recorded.get(key) != settings[key]
                             and not (vocabulary_taken and key == "approx_vocab_size"))
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

    def _recorded(self, data_dir: str):
        """The settings recorded in data_dir (`FilesConfig.record`), or None when there is no
        record that reads."""
        try:
            with tf.io.gfile.GFile(self.config_path(data_dir), "r") as handle:
                recorded = json.load(handle)
        except (OSError, ValueError, tf.errors.OpError):
            return None
        return recorded if isinstance(recorded, dict) else None

    def datagen_command(self, data_dir: str) -> str:
        """With the file flags datagen recorded in data_dir, when it did (several training
        corpora as comma-separated lists)."""
        command = super().datagen_command(data_dir)
        recorded = self._recorded(data_dir)
        if recorded is None:
            return command + " --train_source=... (the flags of your first run)"
        pairs = {TRAIN: recorded_train_pairs(recorded)}
        pairs.update((name, [recorded[name]]) for name in (DEV, TEST) if recorded.get(name))
        for name, split_pairs in pairs.items():
            for side, flag in enumerate(("source", "target")):
                command += f" --{name}_{flag}={','.join(pair[side] for pair in split_pairs)}"
            if name == TRAIN and recorded.get("train_weights"):
                weights = ",".join(f"{weight:g}" for weight in recorded["train_weights"])
                command += f" --train_weights={weights}"
        for flag in ("source_language", "target_language", "approx_vocab_size"):
            if recorded.get(flag) is not None:
                command += f" --{flag}={recorded[flag]}"
        return command

    def generate_samples(self, data_dir: str, tmp_dir: str, split: str):
        """The pairs of a split or of one training corpus ("train.c0"); "train" with several
        corpora: all of theirs, one corpus after the other."""
        config = self._configured()
        pairs = config.pairs()
        if split == TRAIN and split not in pairs:
            return itertools.chain.from_iterable(read_parallel(*pair) for pair in config.train)
        if split not in pairs:
            raise DataError(f"translate_text_files has no {split} files: {FLAGS_HINT}")
        return read_parallel(*pairs[split])


def _corpus_pairs(train):
    """The list of training pairs of configure's `train` (a pair, or a list of pairs)."""
    if train is None:
        return None
    train = list(train)
    if not train or train[0] is None or isinstance(train[0], str):
        return [tuple(train)]
    return [tuple(pair) for pair in train]


def _checked_weights(weights, corpora: int) -> tuple:
    """The training corpora's weights as floats, or None; a DataError naming --train_weights
    unless there is one positive number for each of the `corpora`."""
    if weights is None:
        return None
    weights = tuple(float(weight) for weight in weights)
    given = ",".join(f"{weight:g}" for weight in weights)
    if len(weights) != corpora:
        raise DataError(f"--train_weights={given} gives {len(weights)} weights for {corpora} "
                        f"training corpora (--train_source, --train_target): one weight per "
                        f"corpus")
    bad = [weight for weight in weights if not (math.isfinite(weight) and weight > 0)]
    if bad:
        raise DataError(f"--train_weights={given}: every weight must be a positive number, "
                        f"not {bad[0]:g}")
    return weights


def _absolute(pair):
    """Absolute paths, so that the record in data_dir does not depend on the working folder
    (a URL such as gs://b/f or ram://f is kept as it is)."""
    return tuple(output_paths.absolute(path) for path in pair) if pair else None
