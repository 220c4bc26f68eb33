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


@pytest.mark.parametrize("bucketing", ["longer", "each"])
def test_the_tokens_of_a_pass_are_what_its_batches_hold_as_batch_size_counts(tmp_path,
                                                                           bucketing):
    """One pass in batches (no example dropped for an incomplete batch): rows x the longer
    side's padded length, summed, is batch_tokens_of_pass of the example lengths the manifest
    records; examples over max_length are not counted."""
    lengths = [n % 30 + 1 for n in range(300)]
    paths = records.shard_paths(str(tmp_path), "toy-train", 2)
    manifest = records.manifest_path(str(tmp_path), "toy-train")
    rng = np.random.default_rng(0)
    records.write_shards(({"inputs": rng.integers(2, 9, size=n).tolist(),
                           "targets": rng.integers(2, 9, size=max(1, n - 3)).tolist()}
                          for n in lengths), paths, manifest=manifest)
    hparams = HParams(batch_size=64, max_length=24, length_bucketing=bucketing)
    held = 0
    for batch in pipeline.batched_dataset(str(tmp_path / "toy-train-*"), hparams,
                                          training=False):
        rows, source_length = batch["inputs"].shape
        held += rows * max(source_length, batch["targets"].shape[1])
    assert pipeline.batch_tokens_of_pass(records.manifest_example_lengths(manifest),
                                         hparams) == held
    assert held > sum(n for n in lengths if n <= 24)  # padded, as batch_size counts


def test_padding_fraction_counts_zeros():
    batch = {"inputs": tf.constant([[3, 4, 0, 0]]), "targets": tf.constant([[5, 0, 0, 0]])}
    dataset = tf.data.Dataset.from_tensors(batch)
    assert pipeline.padding_fraction(dataset, 1) == pytest.approx(5 / 8)


def write_pairs(tmp_path, pairs):
    """Examples with the given (source length, target length) pairs, ids 2-8."""
    rng = np.random.default_rng(1)
    examples = [{"inputs": rng.integers(2, 9, size=s).tolist(),
                 "targets": rng.integers(2, 9, size=t).tolist()} for s, t in pairs]
    paths = records.shard_paths(str(tmp_path), "toy-train", 2)
    records.write_shards(iter(examples), paths)
    return str(tmp_path / "toy-train-*")


def independent_lengths(count):
    rng = np.random.default_rng(2)
    sources = rng.integers(9, 23, size=count)
    return [(int(s), int(max(1, s + d))) for s, d in zip(sources, rng.integers(-4, 5, count))]


def test_each_length_bucketing_pads_each_feature_to_its_own_boundary(tmp_path):
    pattern = write_pairs(tmp_path, independent_lengths(800))
    hparams = HParams(batch_size=64, max_length=24, length_bucketing="each")
    boundaries = pipeline.bucket_boundaries(24) + [24]
    shapes = set()
    for batch in pipeline.batched_dataset(pattern, hparams, training=True, seed=3).take(80):
        rows = batch["inputs"].shape[0]
        widths = {}
        for name in ("inputs", "targets"):
            width = batch[name].shape[1]
            assert width in boundaries
            lengths = tf.math.count_nonzero(batch[name], axis=1).numpy()
            below = max([b for b in boundaries if b < width], default=0)
            assert all(below < n <= width for n in lengths), (name, width, lengths)
            widths[name] = width
        assert rows == max(1, 64 // max(widths.values()))  # the longer side's batch size
        shapes.add((rows, widths["inputs"], widths["targets"]))
    assert any(i != t for _, i, t in shapes)  # sources and targets padded apart


def test_each_length_bucketing_keeps_every_example_and_pads_less(tmp_path):
    pairs = independent_lengths(400) + [(30, 3), (3, 30)]  # the last two are over max_length
    pattern = write_pairs(tmp_path, pairs)
    seen = {}
    for bucketing in ("longer", "each"):
        hparams = HParams(batch_size=64, max_length=24, length_bucketing=bucketing)
        dataset = pipeline.batched_dataset(pattern, hparams, training=False)
        seen[bucketing] = sorted(
            (int(s), int(t)) for batch in dataset for s, t in zip(
                tf.math.count_nonzero(batch["inputs"], axis=1).numpy(),
                tf.math.count_nonzero(batch["targets"], axis=1).numpy()))
        seen[bucketing + " padding"] = pipeline.padding_fraction(dataset, 1000)
    assert seen["each"] == seen["longer"] == sorted(p for p in pairs if max(p) <= 24)
    assert seen["each padding"] < seen["longer padding"] / 3
