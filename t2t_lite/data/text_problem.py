"""Text2TextProblem: translation with a joint SentencePiece vocabulary trained once on the training
split (or taken with --vocab_from), tokenized in the graph by tensorflow_text, as t2t's
Text2TextProblem with a SUBWORD vocabulary."""
import itertools
import os

import tensorflow as tf
from absl import logging

from t2t_lite.data import vocabulary_source
from t2t_lite.data.problem import TRAIN, Problem, has_empty_side
from t2t_lite.data.vocab import EOS_ID, SentencePieceVocabulary
from t2t_lite.errors import DataError

ENCODE_CHUNK = 2048  # sentences per call of the in-graph tokenizer


class Text2TextProblem(Problem):
    """Subclasses set the languages and implement generate_samples."""

    source_language = None
    target_language = None
    approx_vocab_size = 8192
    vocab_type = "bpe"           # or "unigram"
    max_vocab_training_sentences = 1_000_000

    def vocab_filename(self) -> str:
        return f"vocab.{self.name}.{self.approx_vocab_size}.{self.vocab_type}.model"

    def vocab_path(self, data_dir: str) -> str:
        return os.path.join(data_dir, self.vocab_filename())

    def prepare_vocabulary(self, data_dir: str, tmp_dir: str, vocab_from: str = None):
        """Trains the joint vocabulary on the training split unless data_dir has it, on the
        pairs that datagen can keep (`vocabulary_pairs`). With `vocab_from` (datagen's
        --vocab_from: a data folder, a trained model's folder or a .model file), copies that
        vocabulary into data_dir under this problem's vocab_filename instead, with the record
        of where it came from (data.vocabulary_source); a vocabulary already in data_dir is
        kept when it is the same, and refused when it is another."""
        path = self.vocab_path(data_dir)
        if vocab_from is not None:
            source = self.check_vocabulary_source(data_dir, vocab_from)
            if tf.io.gfile.exists(path):  # the same one: check_replaces refuses another
                logging.info("vocabulary %s already there, the same as %s, kept", path,
                             source.path)
            else:
                logging.info("vocabulary %s copied from %s (sha256 %s)", path, source.path,
                             source.sha256)
                vocabulary_source.copy(source, path)
            return
        if tf.io.gfile.exists(path):
            logging.info("vocabulary %s already there, kept", path)
            return
        vocabulary_source.forget_origin(path)  # a record of an earlier copy that failed
        samples = self.vocabulary_pairs(self.vocabulary_samples(data_dir, tmp_dir))
        sentences = (text for sample in samples for text in (sample["inputs"], sample["targets"]))
        first = next(sentences, None)
        if first is None:  # SentencePiece's trainer would stop with "[!sentences_.empty()]"
            raise DataError(f"the {TRAIN} split of {self.name} has no sentence pair to train the "
                            f"vocabulary on: every pair has an empty side or a side "
                            f"of more than max_length={self.max_length} tokens")
        sentences = itertools.chain([first], sentences)
        logging.info("training a %s vocabulary of about %d pieces", self.vocab_type,
                     self.approx_vocab_size)
        SentencePieceVocabulary.train(
            itertools.islice(sentences, self.max_vocab_training_sentences), path,
            self.approx_vocab_size, self.vocab_type)

    def check_vocabulary_source(self, data_dir: str, vocab_from: str = None):
        """The vocabulary that --vocab_from names (vocabulary_source.find), read and checked,
        and refused when data_dir already holds another (vocabulary_source.check_replaces);
        None without vocab_from."""
        if vocab_from is None:
            return None
        source = vocabulary_source.find(vocab_from)
        vocabulary_source.check_replaces(self.vocab_path(data_dir), source, data_dir)
        return source

    def vocabulary_origin(self, data_dir: str) -> dict:
        """{"from": "trained" or --vocab_from's path, "sha256", ...} of data_dir's vocabulary
        (vocabulary_source.origin)."""
        return vocabulary_source.origin(self.vocab_path(data_dir))

    def vocabulary_samples(self, data_dir: str, tmp_dir: str):
        """The samples the vocabulary trains on, before `vocabulary_pairs` filters them: the
        training split's, in order."""
        return self.generate_samples(data_dir, tmp_dir, TRAIN)

    def vocabulary_pairs(self, samples):
        """The training pairs that the vocabulary trains on: those that datagen can keep, known
        before the vocabulary is. A pair is left out when a side is empty (datagen skips it,
        `has_empty_side`), or when a side has so many spaces that it is longer than max_length
        tokens with EOS whatever the vocabulary (`SentencePieceVocabulary.min_pieces`: at least
        one piece per space, plus one). A pair that is over max_length only with the trained
        vocabulary's pieces cannot be told before it is trained, and trains it (datagen skips
        it after)."""
        for sample in samples:
            if has_empty_side(sample) or any(
                    SentencePieceVocabulary.min_pieces(sample[feature]) + 1 > self.max_length
                    for feature in ("inputs", "targets")):
                continue
            yield sample

    def feature_encoders(self, data_dir: str) -> dict:
        path = self.vocab_path(data_dir)
        if not tf.io.gfile.exists(path):
            raise DataError(f"no vocabulary {path}: run t2t_lite-datagen --problem={self.name} "
                            f"--data_dir={data_dir} first")
        vocabulary = SentencePieceVocabulary(path)
        return {"inputs": vocabulary, "targets": vocabulary}

    def encode_samples(self, samples, encoders: dict, stats):
        """Encodes chunks of sentences with the in-graph tokenizer, EOS appended."""
        vocabulary = encoders["targets"]
        while True:
            chunk = list(itertools.islice(samples, ENCODE_CHUNK))
            if not chunk:
                return
            ids = {feature: vocabulary.encode_in_graph(
                       tf.constant([sample[feature] for sample in chunk])).to_list()
                   for feature in ("inputs", "targets")}
            for i, sample in enumerate(chunk):
                encoded = {feature: ids[feature][i] + [EOS_ID]
                           for feature in ("inputs", "targets")}
                if stats.keep(sample, encoded, self.max_length):
                    yield encoded
