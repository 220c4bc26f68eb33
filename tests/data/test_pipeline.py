import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.data import pipeline, records
from t2t_lite.hparams_lib import HParams


def test_bucket_boundaries_follow_t2t():
    boundaries = pipeline.bucket_boundaries(256)
    assert len(boundaries) == 41
    assert boundaries[:14] == [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22]
    assert boundaries[-1] == 236
    # each boundary is max(x + 1, int(1.1 x)) of the previous one
    for before, after in zip(boundaries, boundaries[1:]):
        assert after == max(before + 1, int(before * 1.1))


def test_bucket_batch_sizes_hold_batch_size_tokens():
    boundaries = pipeline.bucket_boundaries(256)
    sizes = pipeline.bucket_batch_sizes(boundaries, 4096, 256)
    assert len(sizes) == 42
    assert sizes[0] == 512 and sizes[-2] == 4096 // 236 and sizes[-1] == 16
    assert pipeline.bucket_batch_sizes([8], 4, 16) == [1, 1]  # never zero


def write_examples(tmp_path, lengths):
    rng = np.random.default_rng(0)
    examples = [{"inputs": rng.integers(2, 9, size=n).tolist(),
                 "targets": rng.integers(2, 9, size=max(1, n - 1)).tolist()} for n in lengths]
    paths = records.shard_paths(str(tmp_path), "toy-train", 2)
    records.write_shards(iter(examples), paths)
    return str(tmp_path / "toy-train-*"), examples


def test_batches_are_padded_to_their_bucket_boundary_and_hold_at_most_batch_size(tmp_path):
    pattern, _ = write_examples(tmp_path, [n % 30 + 1 for n in range(600)])
    hparams = HParams(batch_size=64, max_length=24)
    boundaries = pipeline.bucket_boundaries(24) + [24]
    dataset = pipeline.batched_dataset(pattern, hparams, training=True)
    shapes = set()
    for batch in dataset.take(60):
        batch_size, length = batch["inputs"].shape
        assert batch["targets"].shape == (batch_size, length)
        assert length in boundaries
        assert batch_size == max(1, 64 // length)  # full batches only in training
        real = tf.math.count_nonzero(batch["inputs"], axis=1)
        assert int(tf.reduce_max(real)) <= length
        shapes.add((batch_size, length))
    assert len(shapes) <= len(boundaries)


def test_training_drops_examples_over_max_length_and_eval_sees_each_once(tmp_path):
    lengths = [3, 5, 30, 40, 7, 12]
    pattern, examples = write_examples(tmp_path, lengths)
    hparams = HParams(batch_size=64, max_length=20)
    seen = []
    for batch in pipeline.batched_dataset(pattern, hparams, training=False):
        for row in batch["inputs"].numpy():
            seen.append(int(np.count_nonzero(row)))
    assert sorted(seen) == sorted(n for n in lengths if n <= 20)


def test_padding_fraction_counts_zeros():
    batch = {"inputs": tf.constant([[3, 4, 0, 0]]), "targets": tf.constant([[5, 0, 0, 0]])}
    dataset = tf.data.Dataset.from_tensors(batch)
    assert pipeline.padding_fraction(dataset, 1) == pytest.approx(5 / 8)
