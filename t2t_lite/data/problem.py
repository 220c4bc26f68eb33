"""The Problem: tensor2tensor's unit of data, from raw samples (`generate_samples`) and encoders
(`feature_encoders`) to sharded records with manifests (`generate_data`, under a lock), their
checks, and length-bucketed token batches (`dataset`)."""
import contextlib
import dataclasses
import itertools
import os

import tensorflow as tf
from absl import logging

from t2t_lite.storage import atomic_files, outputs
from t2t_lite.data import pipeline, records
from t2t_lite.progress import progress_bar
from t2t_lite.data.vocab import EOS_ID
from t2t_lite.errors import DataError, UserError
from t2t_lite.hparams_lib import HParams

TRAIN, DEV, TEST = "train", "dev", "test"
# Not the trainer's t2t_lite.lock: with --output_dir and --data_dir the same folder, a trainer and
# a datagen would each take the other's lock for their own. Outside every shard's pattern.
DATAGEN_LOCK_NAME = "t2t_lite-datagen.lock"


@dataclasses.dataclass(frozen=True)
class Split:
    """One split: its name and how many TFRecord shards it gets (0: written as text only)."""
    name: str
    shards: int


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Shards with a manifest of their own that training reads as one source of examples: a
    split, or one of the training split's corpora. `name`: what filepattern and manifest_path
    take (a split name, or "train.c0" for a problem's first training corpus); `weight`: its
    share of the training examples, None for a share in proportion to its examples; `files`:
    the raw files it was generated from, for messages, when the problem records them."""
    name: str
    filepattern: str
    manifest: str
    weight: float = None
    files: tuple = None


def datagen_output(data_dir: str, purpose: str = None) -> outputs.Output:
    """data_dir as datagen writes it, with the lock it holds there (`t2t_lite-datagen.lock`): a
    second datagen is refused at once, naming the first, and `check_data` refuses to read the
    folder meanwhile. `purpose` completes the refusal's "cannot ...". """
    return outputs.Output.folder(data_dir, "data_dir", lock_name=DATAGEN_LOCK_NAME,
                                 purpose=purpose or f"generate data in --data_dir={data_dir}")


class Problem:
    """Base class of every problem; subclasses are registered with @register_problem."""

    name = None  # set by @register_problem

    def dataset_splits(self) -> list:
        """t2t's default: 10 train shards, 1 dev shard, and a test split kept as text."""
        return [Split(TRAIN, 10), Split(DEV, 1), Split(TEST, 0)]

    def generate_samples(self, data_dir: str, tmp_dir: str, split: str):
        """Yields {"inputs": str, "targets": str} for `split`."""
        raise NotImplementedError

    def feature_encoders(self, data_dir: str) -> dict:
        """{"inputs": encoder, "targets": encoder}, each with encode(str) and decode(ids)."""
        raise NotImplementedError

    def vocab_size(self, data_dir: str) -> int:
        return self.feature_encoders(data_dir)["targets"].vocab_size

    def vocabulary_files(self, data_dir: str) -> list:
        """The files that feature_encoders reads in data_dir (a SentencePiece model's
        `model_path`), sorted; [] for a vocabulary made in code (the algorithmic problems')."""
        encoders = self.feature_encoders(data_dir).values()
        return sorted({encoder.model_path for encoder in encoders
                       if getattr(encoder, "model_path", None)})

    # --- Files -------------------------------------------------------------------------------

    def filepaths(self, data_dir: str, split: Split) -> list:
        return records.shard_paths(data_dir, f"{self.name}-{split.name}", split.shards)

    def filepattern(self, data_dir: str, split_name: str) -> str:
        return os.path.join(data_dir, f"{self.name}-{split_name}-*-of-*")

    def manifest_path(self, data_dir: str, split_name: str) -> str:
        """The split's manifest, written by datagen after its shards (P-train.manifest.json)."""
        return records.manifest_path(data_dir, f"{self.name}-{split_name}")

    def corpus(self, data_dir: str, name: str, weight: float = None) -> Corpus:
        """The Corpus of the shards written under `name` in data_dir."""
        return Corpus(name, self.filepattern(data_dir, name), self.manifest_path(data_dir, name),
                      weight)

    def train_corpora(self, data_dir: str) -> list:
        """The corpora the training split is drawn from, each with its weight: by default one,
        the train split itself. A problem of several (translate_text_files) lists them; the
        checks, the trainer's input and the data watch then take them all."""
        return [self.corpus(data_dir, TRAIN)]

    def split_corpora(self, data_dir: str, split_name: str) -> list:
        """The corpora of a split: train_corpora for the train split, else the split alone."""
        if split_name == TRAIN:
            return self.train_corpora(data_dir)
        return [self.corpus(data_dir, split_name)]

    def corpus_weights(self, corpora: list) -> list:
        """The sampling weights of `corpora`, summing to 1: their own, or when one has none,
        each corpus's share of all their examples (as if they were one corpus; OpenNMT-tf's
        default too). The records are counted from the manifests, or from the shards where
        there is none (unverified data)."""
        if all(corpus.weight is not None for corpus in corpora):
            weights = [corpus.weight for corpus in corpora]
        else:
            weights = [records.count_records(corpus.manifest, corpus.filepattern)
                       for corpus in corpora]
        total = float(sum(weights))
        return [weight / total if total else 1 / len(weights) for weight in weights]

    def datagen_command(self, data_dir: str) -> str:
        """The command that (re)generates data_dir, for error messages."""
        return f"t2t_lite-datagen --problem={self.name} --data_dir={data_dir} --tmp_dir=TMP_DIR"

    def text_paths(self, data_dir: str, split_name: str) -> dict:
        """The plain-text copy of a split: {"inputs": path, "targets": path}."""
        return {feature: os.path.join(data_dir, f"{self.name}-{split_name}.{feature}.txt")
                for feature in ("inputs", "targets")}

    # --- Datagen -----------------------------------------------------------------------------

    max_length = 256  # datagen skips examples with more tokens than this (t2t's max_length)

    def encode_samples(self, samples, encoders: dict, stats: "SplitStats"):
        """Yields {"inputs", "targets"} id lists with EOS appended (t2t's text2text encoding),
        skipping and counting empty and over-long pairs."""
        for sample in samples:
            encoded = {feature: encoders[feature].encode(sample[feature]) + [EOS_ID]
                       for feature in ("inputs", "targets")}
            if stats.keep(sample, encoded, self.max_length):
                yield encoded

    def check_raw_data(self, tmp_dir: str):
        """Reads the raw inputs once before anything is written, so that a fault in them ends
        datagen before the long work; nothing by default (the raw data is fetched later)."""

    def prepare_vocabulary(self, data_dir: str, tmp_dir: str, vocab_from: str = None):
        """Builds what feature_encoders needs (a trained vocabulary, say); nothing by default.
        Datagen calls it first, holding data_dir's lock. `vocab_from`: datagen's --vocab_from,
        a folder or file whose vocabulary to take instead of training one
        (`check_vocabulary_source`)."""
        self.check_vocabulary_source(data_dir, vocab_from)

    def check_vocabulary_source(self, data_dir: str, vocab_from: str = None):
        """Refuses, before anything is written, a --vocab_from this problem cannot take: by
        default every one, since the problem makes its own vocabulary (the algorithmic
        problems' is made in code, the same in every data folder). Text2TextProblem takes
        one."""
        if vocab_from is None:
            return
        try:
            made_in_code = not self.vocabulary_files(data_dir)
        except UserError:  # a vocabulary file that is not there yet
            made_in_code = False
        why = (f"its vocabulary is made in code ({self.vocab_size(data_dir)} ids, the same in "
               f"every data folder), not a file to take from another"
               if made_in_code else "it makes its own vocabulary")
        raise DataError(f"--vocab_from={vocab_from} is not for {self.name}: {why}. Generate "
                        f"its data without --vocab_from")

    def vocabulary_origin(self, data_dir: str):
        """Where the vocabulary in data_dir came from, for each split's manifest
        (records.write_manifest): {"from": "trained" or --vocab_from's path, "sha256", ...};
        None (nothing recorded) by default, as for a vocabulary made in code."""
        return None

    def generate_data(self, data_dir: str, tmp_dir: str, vocab_from: str = None) -> dict:
        """Writes every split to `data_dir` and logs a summary; splits already complete are
        kept, so running again after an interruption or a full disk finishes the work. Returns
        {split: stats} for the splits written now. `vocab_from` (datagen's --vocab_from):
        the vocabulary of another data folder or of a trained model, taken instead of training
        one (`prepare_vocabulary`); checked before anything is written
        (`check_vocabulary_source`). Each split's manifest records where the vocabulary came
        from (`vocabulary_origin`), and a split kept from an earlier run must have been
        encoded with the vocabulary there now.

        Holds data_dir's lock (`datagen_output`) while it writes; a datagen already writing there is
        refused at once, before the raw data is read. A full disk is one StorageError naming
        the folder: the split being written is removed with every temporary file (the
        vocabulary's too), and the splits already complete keep their manifests."""
        data, tmp = datagen_output(data_dir), outputs.Output.folder(tmp_dir, "tmp_dir",
                                                                    lock_name=None)
        tmp.check()
        data.check()  # at once, before the checks of the raw data
        self.check_vocabulary_source(data_dir, vocab_from)  # before anything is written
        self.check_raw_data(tmp_dir)
        tmp.prepare()  # no lock: raw files and downloads may be shared by several data folders
        with outputs.opened(data):
            self.prepare_vocabulary(data_dir, tmp_dir, vocab_from)
            encoders = self.feature_encoders(data_dir)
            written = {}
            for split in self.dataset_splits():
                if split.shards:
                    stats = self._write_records(data_dir, tmp_dir, split, encoders)
                else:
                    stats = self._write_text(data_dir, tmp_dir, split)
                if stats:
                    written[split.name] = stats
        self.log_summary(data_dir, written)
        return written

    def _write_records(self, data_dir, tmp_dir, split, encoders):
        """Keeps a split whose shards are the ones its manifest lists, whole and unchanged
        (`split_fault`); otherwise removes whatever an earlier run left of it and writes it
        again. t2t kept any split whose shard files existed, truncated or not."""
        paths = self.filepaths(data_dir, split)
        manifest = self.manifest_path(data_dir, split.name)
        vocabulary = self.vocabulary_origin(data_dir)
        if tf.io.gfile.exists(manifest):
            fault = self.split_fault(data_dir, split.name)
            if fault is None and records.manifest_shards(manifest) != paths:
                fault = f"{manifest} lists other shards than the {len(paths)} it needs now"
            if fault is None:
                fault = _other_vocabulary(manifest, vocabulary, data_dir)
            if fault is None:
                logging.info("%s: %d shards already complete (verified against %s), kept",
                             split.name, len(paths), manifest)
                return None
            logging.info("%s: written again: %s", split.name, fault)
        elif records.all_exist(paths):
            logging.info("%s: written again: its shards have no manifest %s to verify them",
                         split.name, manifest)
        prefix = f"{self.name}-{split.name}"
        records.remove_split(data_dir, prefix)
        stats = SplitStats()
        samples = self.generate_samples(data_dir, tmp_dir, split.name)
        try:
            with progress_bar(f"{self.name} {split.name}") as bar:
                records.write_shards(self.encode_samples(samples, encoders, stats), paths,
                                     on_example=lambda n: bar.update(1), manifest=manifest,
                                     vocabulary=vocabulary)
        except BaseException:  # a full disk, an interrupt: no shard without its manifest left
            records.remove_split(data_dir, prefix)
            raise
        return stats

    def _write_text(self, data_dir, tmp_dir, split):
        paths = self.text_paths(data_dir, split.name)
        if all(tf.io.gfile.exists(path) for path in paths.values()):
            return None
        stats = SplitStats()
        samples = self.generate_samples(data_dir, tmp_dir, split.name)
        first = next(samples, None)  # a missing raw file fails here, before any file is opened
        with contextlib.ExitStack() as stack:
            files = {feature: stack.enter_context(atomic_files.atomic_write(path))
                     for feature, path in paths.items()}
            for sample in itertools.chain([first] if first else [], samples):
                stats.records += 1
                for feature, handle in files.items():
                    handle.write(sample[feature] + "\n")
        logging.info("%s: wrote %s", split.name, ", ".join(paths.values()))
        return stats

    def log_summary(self, data_dir: str, written: dict):
        """Records, tokens and skips per split, the vocabulary size, and the padding share that
        bucketed batches of the default batch_size will have."""
        lines = [f"datagen summary for {self.name} in {data_dir}:",
                 f"  vocabulary size: {self.vocab_size(data_dir)}"]
        for name, stats in written.items():
            lines.append(f"  {name}: {stats.describe()}")
        corpora = self.train_corpora(data_dir)
        for corpus in corpora:
            stats = written.get(corpus.name)
            if len(corpora) > 1 and stats and not stats.records:
                logging.warning("the training corpus %s%s kept no pair (%s): the trainer "
                                "refuses a corpus without examples", corpus.name,
                                f" ({', '.join(corpus.files)})" if corpus.files else "",
                                stats.describe())
        if any(written.get(corpus.name) for corpus in corpora):
            hparams = HParams(max_length=self.max_length)  # transformer_base's batch_size
            # Not self.dataset: the shards were verified as they were written.
            train = self._batches(corpora, hparams, training=False, shuffle_files=False)
            fraction = pipeline.padding_fraction(train, num_batches=200)
            lines.append(f"  padding in bucketed batches of {hparams.batch_size} tokens: "
                         f"{100 * fraction:.1f}%")
        logging.info("\n".join(lines))

    # --- Checking ----------------------------------------------------------------------------

    def check_data(self, data_dir: str, split_names=(TRAIN, DEV), checksums: bool = True,
                   allow_unverified: bool = False):
        """Checks each split's shards against its manifest before any work (`split_fault`):
        the first fault is one DataError naming the file and the datagen command to rerun.
        Hashing streams every shard (a few hundred MB/s); checksums=False compares sizes only.

        Shards without a manifest are refused: nothing tells a whole split from what an
        interrupted datagen or a partial copy left (t2t trained on whatever files matched;
        a folder with 5 of 10 shards missing and one empty trained without a word). With
        `allow_unverified` (the trainer's --allow_unverified_data, for shards written by other
        tools) they are read with a warning. A datagen writing data_dir is refused too."""
        datagen_output(data_dir, f"read the data in {data_dir}").lock().refuse_if_held()
        for split_name in split_names:
            for corpus in self.split_corpora(data_dir, split_name):
                self._check_corpus(data_dir, split_name, corpus, checksums, allow_unverified)

    def _check_corpus(self, data_dir: str, split_name: str, corpus: Corpus, checksums: bool,
                      allow_unverified: bool):
        """check_data of one corpus of the split `split_name`."""
        if not tf.io.gfile.exists(corpus.manifest):
            if not tf.io.gfile.glob(corpus.filepattern):
                raise DataError(f"no {split_name} data matches {corpus.filepattern}: run "
                                f"{self.datagen_command(data_dir)} first")
            if not allow_unverified:
                raise DataError(
                    f"the {split_name} shards in {data_dir} have no manifest {corpus.manifest}, "
                    f"so nothing tells whether they are whole (an interrupted datagen, or "
                    f"shards written by another tool): rerun "
                    f"{self.datagen_command(data_dir)}, which writes the split again with "
                    f"its manifest, or pass --allow_unverified_data to train on them as "
                    f"they are")
            _warn_unverified(corpus.manifest, self.datagen_command(data_dir))
            return
        fault = self._corpus_fault(corpus, checksums)
        if fault:
            raise DataError(f"{fault}: the {split_name} data in {data_dir} is incomplete or "
                            f"damaged; rerun {self.datagen_command(data_dir)}, which "
                            f"writes this split again")

    def check_batch_size(self, data_dir: str, hparams, num_replicas: int = 1):
        """Refuses, before training, an update that asks for more tokens than one pass over the
        training split holds: batch_size (per replica, as in t2t) x num_replicas x
        optimizer_multistep_accumulate_steps, against the split's tokens (of all its corpora,
        `train_corpora`) counted as batch_size counts them (`pipeline.batch_tokens_of_pass`,
        from the example lengths their manifests record). Such a batch fills only after the
        data repeats, if ever: batch_size=50000000 on the copy task gathered examples to 2 GB
        without a step for 10 minutes, and a max_length under every example ended in a
        StopIteration traceback. Shards without a manifest (allowed unverified data) are not
        checked. A batch_size under the longest
        example's padded length only gets a warning: that example still trains, alone in its
        batch (t2t's max(1, batch_size // length)), in more tokens than batch_size."""
        corpora = self.train_corpora(data_dir)
        if not all(tf.io.gfile.exists(corpus.manifest) for corpus in corpora):
            return
        lengths = {}
        for corpus in corpora:
            corpus_lengths = records.manifest_example_lengths(corpus.manifest)
            if len(corpora) > 1:
                self._check_corpus_has_examples(data_dir, corpus, corpus_lengths, hparams)
            for length, count in corpus_lengths.items():
                lengths[length] = lengths.get(length, 0) + count
        accumulate = hparams.optimizer_multistep_accumulate_steps
        asked = hparams.batch_size * num_replicas * accumulate
        flag = f"--hparams=batch_size={hparams.batch_size}"
        kept = [length for length in lengths if length <= hparams.max_length]
        if not kept:
            shortest = f" (the shortest has {min(lengths)})" if lengths else ""
            raise DataError(f"no training example in {data_dir} has at most --hparams="
                            f"max_length={hparams.max_length} tokens{shortest}, so training "
                            f"has no batch: raise max_length, or generate data that has")
        held = pipeline.batch_tokens_of_pass(lengths, hparams)
        holds = (f"{held} tokens (its examples of at most max_length={hparams.max_length} "
                 f"tokens, each counted at the length its bucket pads it to, as batch_size "
                 f"counts)")
        self._warn_examples_over_batch_size(max(kept), hparams)
        if asked <= held:
            return
        if num_replicas == 1 and accumulate == 1:
            asks = f"{flag} asks for {asked} tokens a batch"
        else:
            asks = (f"{flag} asks for {asked} tokens an update ({hparams.batch_size} a replica x "
                    f"{num_replicas} replicas x optimizer_multistep_accumulate_steps="
                    f"{accumulate})")
        largest = held // (num_replicas * accumulate)
        remedy = (f"use a batch_size of at most {largest}" if largest else
                  "generate more training data")
        raise DataError(f"{asks}, but one pass over the training data in {data_dir} holds "
                        f"{holds}: {remedy}")

    def _check_corpus_has_examples(self, data_dir: str, corpus: Corpus, lengths: dict, hparams):
        """A DataError naming a training corpus of several that has no example of at most
        hparams.max_length tokens (`lengths`: its manifest's): training would draw from the
        other corpora alone, its weight ignored."""
        if any(length <= hparams.max_length for length in lengths):
            return
        weight = "" if corpus.weight is None else f", weight {corpus.weight:g}"
        files = f" ({', '.join(corpus.files)}{weight})" if corpus.files else ""
        leave_out = (f"or leave it out of --train_source, --train_target and --train_weights "
                     f"and generate the data again into a new --data_dir")
        if lengths:
            why = (f"none of its {sum(lengths.values())} examples has at most --hparams="
                   f"max_length={hparams.max_length} tokens (the shortest has {min(lengths)})")
            fix = f"raise max_length to {min(lengths)} or more, {leave_out}"
        else:
            why = (f"datagen kept none of its pairs (each has an empty side or more than "
                   f"datagen's max_length={self.max_length} tokens)")
            fix = f"shorten or split its lines, {leave_out}"
        raise DataError(f"the training corpus {corpus.name}{files} in {data_dir}: {why}, so "
                        f"training would draw from the other corpora alone: {fix}")

    @staticmethod
    def _warn_examples_over_batch_size(longest: int, hparams):
        """A warning when the bucket of the `longest` example holds more than batch_size."""
        boundaries = pipeline.bucket_boundaries(hparams.max_length, hparams.min_length_bucket,
                                                hparams.length_bucket_step)
        padded = pipeline.bucket_of(longest, boundaries + [hparams.max_length])
        if padded > hparams.batch_size:
            logging.warning("--hparams=batch_size=%d is less than the %d tokens the longest "
                            "training examples are padded to: each such example is a batch of "
                            "its own, of more tokens than batch_size", hparams.batch_size, padded)

    def split_fault(self, data_dir: str, split_name: str, checksums: bool = True) -> str:
        """None when each corpus of the split (split_corpora) has a manifest and its shards are
        the ones it lists, with their sizes and (with `checksums`) sha256; else what is wrong
        with the first that has not, naming the file: a missing, truncated or changed shard, a
        damaged manifest, or a shard it does not list."""
        for corpus in self.split_corpora(data_dir, split_name):
            if not tf.io.gfile.exists(corpus.manifest):
                return f"there is no manifest {corpus.manifest}"
            fault = self._corpus_fault(corpus, checksums)
            if fault:
                return fault
        return None

    @staticmethod
    def _corpus_fault(corpus: Corpus, checksums: bool) -> str:
        """split_fault of one corpus whose manifest exists."""
        fault = records.verify_manifest(corpus.manifest, checksums=checksums)
        if fault:
            return fault
        listed = set(records.manifest_shards(corpus.manifest))
        stray = sorted(set(tf.io.gfile.glob(corpus.filepattern)) - listed)
        if stray:
            return (f"{stray[0]} is not one of the shards that {corpus.manifest} lists (a "
                    f"leftover of another datagen)")
        return None

    def corrupt_data_error(self, data_dir: str, split_names=(TRAIN, DEV),
                           cause: Exception = None) -> "DataError":
        """The DataError to raise for a tf.errors.DataLossError met while reading (TensorFlow's
        "corrupted record at N" names no file): it names the first shard of `split_names` that
        cannot be read to its end, found by reading them all, and the datagen command."""
        for split_name in split_names:
            paths = sorted(path for corpus in self.split_corpora(data_dir, split_name)
                           for path in tf.io.gfile.glob(corpus.filepattern))
            found = records.find_corrupt_shard(paths)
            if found:
                path, message = found
                return DataError(f"the shard {path} is damaged ({message}): rerun "
                                 f"{self.datagen_command(data_dir)}, which writes the "
                                 f"{split_name} split again")
        reason = f" ({records.plain_message(cause)})" if cause is not None else ""
        return DataError(f"reading the data in {data_dir} failed{reason}, but every shard of "
                         f"{', '.join(split_names)} reads back whole now: if the folder is on a "
                         f"network file system, check it; else rerun "
                         f"{self.datagen_command(data_dir)}")

    # --- Reading -----------------------------------------------------------------------------

    def dataset(self, split_name: str, data_dir: str, hparams, training: bool,
                shuffle_files: bool = None, repeat: bool = None,
                num_replicas: int = 1, seed: int = None,
                allow_unverified: bool = False) -> tf.data.Dataset:
        """Length-bucketed token batches of {"inputs", "targets"} (int32, padded with 0), of
        about hparams.batch_size tokens for each of `num_replicas` replicas; a split of several
        corpora (split_corpora) draws its examples from them by their weights
        (`corpus_weights`), seeded by `seed`. The shards are checked against the manifest's
        sizes first (missing or truncated shards); `check_data` compares their checksums too.
        `allow_unverified` as in check_data."""
        self.check_data(data_dir, [split_name], checksums=False,
                        allow_unverified=allow_unverified)
        samplers = (self.subword_samplers(data_dir, hparams.sentencepiece_alpha)
                    if training and hparams.sentencepiece_alpha else None)
        return self._batches(self.split_corpora(data_dir, split_name), hparams, training,
                             training if shuffle_files is None else shuffle_files, repeat,
                             num_replicas, seed, samplers)

    def subword_samplers(self, data_dir: str, alpha: float) -> dict:
        """{feature: subword_sampling.SubwordSampler} of each feature's SentencePiece model
        (one for a joint vocabulary), or a UserError for a vocabulary of another kind."""
        from t2t_lite.data.subword_sampling import SubwordSampler
        samplers, of_model = {}, {}
        for feature, encoder in sorted(self.feature_encoders(data_dir).items()):
            if not hasattr(encoder, "model_proto"):
                raise UserError(f"sentencepiece_alpha={alpha}: the {feature} of {self.name} "
                                f"are not SentencePiece pieces ({type(encoder).__name__}); "
                                f"only a SentencePiece vocabulary's pieces are sampled")
            if encoder.model_proto not in of_model:
                of_model[encoder.model_proto] = SubwordSampler(encoder.model_proto, alpha,
                                                               encoder.model_path)
            samplers[feature] = of_model[encoder.model_proto]
        return samplers

    def _batches(self, corpora: list, hparams, training: bool, shuffle_files: bool,
                 repeat: bool = None, num_replicas: int = 1, seed: int = None,
                 samplers: dict = None):
        """pipeline.batched_dataset of one corpus, or of several by their weights."""
        if len(corpora) == 1:
            patterns, weights = corpora[0].filepattern, None
        else:
            patterns = [corpus.filepattern for corpus in corpora]
            weights = self.corpus_weights(corpora)
        return pipeline.batched_dataset(patterns, hparams, training=training,
                                        shuffle_files=shuffle_files, repeat=repeat,
                                        num_replicas=num_replicas, seed=seed, weights=weights,
                                        samplers=samplers)


_warned_unverified = set()


def _warn_unverified(manifest: str, command: str):
    """Once per manifest path: shards without a manifest, allowed by the caller, are read as
    they are."""
    if manifest not in _warned_unverified:
        _warned_unverified.add(manifest)
        logging.warning("no manifest %s: the shards cannot be verified, and are read as they "
                        "are because unverified data is allowed; rerun %s to write them with "
                        "one", manifest, command)


def _other_vocabulary(manifest: str, vocabulary: dict, data_dir: str):
    """Why a split whose shards verify is still written again: its manifest records that
    another vocabulary than data_dir's encoded it (the vocabulary file was replaced since);
    None when it is the same, or when either is not recorded (a manifest of an earlier
    datagen, a vocabulary made in code)."""
    recorded = records.manifest_vocabulary(manifest)
    if not recorded or not vocabulary or recorded["sha256"] == vocabulary["sha256"]:
        return None
    return (f"{manifest} records that another vocabulary encoded it (sha256 "
            f"{recorded['sha256'][:12]}), not the one in {data_dir} now (sha256 "
            f"{vocabulary['sha256'][:12]})")


def has_empty_side(sample: dict) -> bool:
    """Whether the source or the target of a pair is empty (or only whitespace): datagen skips
    the pair."""
    return not sample["inputs"].strip() or not sample["targets"].strip()


@dataclasses.dataclass
class SplitStats:
    """What datagen wrote for one split and what it skipped, and why."""
    records: int = 0
    input_tokens: int = 0
    target_tokens: int = 0
    skipped: dict = dataclasses.field(default_factory=dict)

    def keep(self, sample: dict, encoded: dict, max_length: int) -> bool:
        if has_empty_side(sample):
            reason = "empty line"
        elif max(len(encoded["inputs"]), len(encoded["targets"])) > max_length:
            reason = f"longer than max_length={max_length} tokens"
        else:
            self.records += 1
            self.input_tokens += len(encoded["inputs"])
            self.target_tokens += len(encoded["targets"])
            return True
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        return False

    def describe(self) -> str:
        text = f"{self.records} records"
        if self.input_tokens:
            text += f", {self.input_tokens} input and {self.target_tokens} target tokens"
        skips = ", ".join(f"{count} {reason}" for reason, count in sorted(self.skipped.items()))
        return text + (f"; skipped {skips}" if skips else "")
