"""The data a trainer checked at its start, checked again while it trains.

A data folder emptied and generated again while a trainer reads it (what datagen's own error
advises for a damaged split) would otherwise feed the trainer shards of another vocabulary,
and its checkpoints would hold weights trained on them. `DataWatch.check` compares, before each
checkpoint, each split's manifest and the vocabulary's files with what they were when training
began, and whether a datagen writes the folder; a difference is one DataChangedError, and the
checkpoint is not saved, so that the last checkpoint before the change stays the latest. A
shard that disappears while the pipeline reads it (tf.errors.NotFoundError) is the same error
(`shard_gone_error`).
"""
import hashlib

import tensorflow as tf

from t2t_lite import checkpoints
from t2t_lite.data.problem import datagen_output
from t2t_lite.errors import DataError


class DataChangedError(DataError):
    """The training data changed while the trainer read it."""


def _digest(path: str):
    """The sha256 of a file's bytes, or None when it is not there (or cannot be read)."""
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except tf.errors.OpError:
        return None


class DataWatch:
    """What a trainer reads in `data_dir` (the manifests of its splits' corpora and the
    problem's vocabulary files), as it was at construction; `output_dir`: where the checkpoints
    are, for the message."""

    def __init__(self, problem, data_dir: str, split_names, output_dir: str):
        self.data_dir = data_dir
        self.output_dir = output_dir
        self.files = [corpus.manifest for name in split_names
                      for corpus in problem.split_corpora(data_dir, name)]
        self.files += list(problem.vocabulary_files(data_dir))
        self.lock = datagen_output(data_dir).lock_path
        self.digests = {path: _digest(path) for path in self.files}

    def change(self):
        """What differs from the start (a sentence naming the file), or None."""
        if tf.io.gfile.exists(self.lock):
            return f"a datagen writes it ({self.lock})"
        for path, digest in self.digests.items():
            now = _digest(path)
            if now != digest:
                return f"{path} {'was removed' if now is None else 'changed'}"
        return None

    def check(self):
        """Raises DataChangedError when the data differs from what it was at the start."""
        change = self.change()
        if change:
            raise self.changed_error(change)

    def changed_error(self, change: str) -> DataChangedError:
        """The error for the change `change`, naming the latest checkpoint (trained on the data
        checked at the start)."""
        latest = checkpoints.latest(self.output_dir)
        kept = (f"the latest checkpoint, {latest}, was trained on the data as it was checked"
                if latest else "no checkpoint was saved")
        return DataChangedError(
            f"--data_dir={self.data_dir} changed while training read it: {change}; stopped "
            f"without a checkpoint of the updates since, which may have read other data "
            f"({kept}). Once the data is complete, the same command checks it again and "
            f"resumes")

    def shard_gone_error(self, error: tf.errors.NotFoundError):
        """The DataChangedError for a shard of data_dir that the pipeline could not open, or
        None when the error is not about data_dir."""
        message = str(getattr(error, "message", None) or error).strip().splitlines()
        if not message or self.data_dir.rstrip("/") not in message[0]:
            return None
        return self.changed_error(f"a shard is gone ({message[0]})")
