"""Decoding text files with a trained model, and scoring the output (exact match, sacreBLEU).

Lines are sorted by length into batches (less padding), decoded, and written back in input
order, one output line per input line, as t2t's `decode_from_file` did.
"""
import dataclasses
import json
import os
import sys

import keras
import sacrebleu
import tensorflow as tf
from absl import logging

from t2t_lite import registry
from t2t_lite.data import text_files
from t2t_lite.data.vocab import EOS_ID
from t2t_lite.decoding.search import greedy_search
from t2t_lite.hparams_lib import HParams
from t2t_lite.training import checkpoints, trainer
from t2t_lite.training.checkpoints import CheckpointError
from t2t_lite.progress import progress_bar


def saved_run(output_dir: str) -> dict:
    """The problem, model and hparams the trainer recorded in output_dir (or {})."""
    path = os.path.join(output_dir, trainer.HPARAMS_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        description = json.load(handle)
    description["hparams"] = HParams.from_dict(description["hparams"])
    return description


def load_model(model_name: str, hparams, vocab_size: int, output_dir: str,
               checkpoint_path: str = None):
    """Builds the model and restores `checkpoint_path` (default: the latest in output_dir)."""
    checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(output_dir)
    if not checkpoint_path:
        raise CheckpointError(f"no checkpoint in {output_dir}: train first "
                              f"(t2t_lite-trainer --output_dir={output_dir})")
    model = trainer.build_model(model_name, hparams, vocab_size)
    checkpoints.restore(checkpoint_path, model)
    logging.info("restored %s", checkpoint_path)
    return model


class Translator:
    """Text in, text out: encode, batch, search, decode."""

    def __init__(self, model, encoders: dict, batch_size: int = 32, extra_length: int = 50):
        self.model = model
        self.encoders = encoders
        self.batch_size = batch_size
        self.extra_length = extra_length
        self._search = tf.function(greedy_search, reduce_retracing=True)

    def translate(self, lines: list, show_progress: bool = True) -> list:
        encoded = [self.encoders["inputs"].encode(line) + [EOS_ID] for line in lines]
        order = sorted(range(len(lines)), key=lambda i: len(encoded[i]))
        outputs = [None] * len(lines)
        with progress_bar("decoding", total=len(lines), unit="sentences",
                          disable=not show_progress) as bar:
            for start in range(0, len(order), self.batch_size):
                indices = order[start:start + self.batch_size]
                batch = keras.utils.pad_sequences(
                    [encoded[i] for i in indices], padding="post", value=0)
                ids = self._search(self.model, tf.constant(batch, tf.int32),
                                   self.extra_length).numpy()
                for index, row in zip(indices, ids):
                    outputs[index] = self.encoders["targets"].decode(row.tolist())
                bar.update(len(indices))
        return outputs


def exact_match(hypotheses: list, references: list) -> float:
    return sum(h == r for h, r in zip(hypotheses, references)) / max(len(references), 1)


def score(hypotheses: list, references: list) -> dict:
    """Exact-match accuracy and sacreBLEU (with its signature) of detokenized text."""
    bleu = sacrebleu.metrics.BLEU()
    result = bleu.corpus_score(hypotheses, [references])
    return {"exact_match": exact_match(hypotheses, references), "bleu": result.score,
            "bleu_signature": str(bleu.get_signature()), "bleu_text": str(result)}


@dataclasses.dataclass(frozen=True)
class DecodeHParams:
    """t2t's --decode_hparams: batch_size sentences per batch; extra_length tokens allowed past
    the input length (the paper's 50)."""
    batch_size: int = 32
    extra_length: int = 50


def read_lines(path: str) -> list:
    """The lines of a UTF-8 file (or stdin for None), without their line ends; invalid UTF-8 is
    an error naming the file and the line."""
    if path is None:
        return [line.rstrip("\r\n") for line in sys.stdin]
    return list(text_files.read_lines(path))


def write_lines(path: str, lines: list):
    """Writes atomically (or to stdout for None)."""
    if path is None:
        sys.stdout.write("".join(line + "\n" for line in lines))
        return
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in lines)
    os.replace(path + ".tmp", path)


def decode_from_file(problem_name: str, model_name: str, hparams, data_dir: str,
                     output_dir: str, decode_from: str = None, decode_to: str = None,
                     reference: str = None, decode_hparams: DecodeHParams = DecodeHParams(),
                     checkpoint_path: str = None):
    """Translates every line of `decode_from`; with `reference`, returns and logs the scores."""
    problem = registry.problem(problem_name)
    encoders = problem.feature_encoders(data_dir)
    model = load_model(model_name, hparams, problem.vocab_size(data_dir), output_dir,
                       checkpoint_path)
    lines = read_lines(decode_from)
    translator = Translator(model, encoders, decode_hparams.batch_size,
                            decode_hparams.extra_length)
    outputs = translator.translate(lines)
    write_lines(decode_to, outputs)
    if reference is None:
        return None
    references = read_lines(reference)
    if len(references) != len(lines):
        raise ValueError(f"{reference} has {len(references)} lines but {decode_from} has "
                         f"{len(lines)}")
    scores = score(outputs, references)
    logging.info("exact match %.2f%% (%d sentences); %s", 100 * scores["exact_match"],
                 len(lines), scores["bleu_text"])
    return scores
