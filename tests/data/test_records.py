import hashlib
import json
import os
import re

import pytest
import tensorflow as tf

from t2t_lite.data import pipeline, records


def read_all(pattern):
    return [{k: v.tolist() for k, v in example.items()}
            for example in pipeline.read_examples(pattern, shuffle_files=False).as_numpy_iterator()]


def test_round_robin_shards_hold_every_example_once(tmp_path):
    examples = [{"inputs": [i + 2], "targets": [i + 2, 1]} for i in range(101)]
    paths = records.shard_paths(str(tmp_path), "p-train", 4)
    assert os.path.basename(paths[0]) == "p-train-00000-of-00004"
    assert records.write_shards(iter(examples), paths) == 101
    counts = [sum(1 for _ in tf.data.TFRecordDataset(path)) for path in paths]
    assert sorted(counts) == [25, 25, 25, 26]
    got = read_all(str(tmp_path / "p-train-*"))
    assert sorted(e["inputs"][0] for e in got) == list(range(2, 103))
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".incomplete")]


def test_an_interrupted_write_leaves_no_shard_and_no_temporary_file(tmp_path):
    def examples_then_crash():
        for i in range(10):
            yield {"inputs": [i + 2], "targets": [1]}
        raise KeyboardInterrupt

    paths = records.shard_paths(str(tmp_path), "p-train", 2)
    try:
        records.write_shards(examples_then_crash(), paths)
    except KeyboardInterrupt:
        pass
    assert not records.all_exist(paths)
    assert os.listdir(tmp_path) == []  # the temporary files too


def test_alternating_kinds_of_lines_reach_every_shard():
    # Multi30k's even lines are short and odd lines long: plain round-robin over an even
    # number of shards would give some shards only short and others only long sentences.
    shards = [records.shard_of(i, 10) for i in range(1000)]
    for shard in range(10):
        indices = [i for i, s in enumerate(shards) if s == shard]
        assert len(indices) == 100
        assert sum(i % 2 for i in indices) == 50


def test_examples_serialize_with_sorted_feature_names():
    # protobuf writes a map in its hash order, which changes from one process to the next;
    # with ten names that order is almost never the sorted one.
    names = [f"feature{i}" for i in (3, 9, 0, 7, 1, 8, 2, 6, 4, 5)]
    serialized = records.to_example({name: [1] for name in names})
    positions = [serialized.index(f"feature{i}".encode()) for i in range(10)]
    assert positions == sorted(positions)


def write_with_manifest(tmp_path, count=40, shards=3):
    paths = records.shard_paths(str(tmp_path), "p-train", shards)
    manifest = records.manifest_path(str(tmp_path), "p-train")
    examples = ({"inputs": [i + 2] * (i % 7 + 1), "targets": [i + 2, 1]} for i in range(count))
    records.write_shards(examples, paths, manifest=manifest)
    return paths, manifest


def test_the_manifest_lists_each_shard_with_its_records_size_and_sha256(tmp_path):
    paths, manifest = write_with_manifest(tmp_path)
    assert os.path.basename(manifest) == "p-train.manifest.json"
    with open(manifest, encoding="utf-8") as handle:
        written = json.load(handle)
    assert written["records"] == 40
    assert [shard["name"] for shard in written["shards"]] == [os.path.basename(p) for p in paths]
    for shard, path in zip(written["shards"], paths):
        assert shard["records"] == sum(1 for _ in tf.data.TFRecordDataset(path))
        assert shard["bytes"] == os.path.getsize(path)
        assert shard["sha256"] == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert records.manifest_shards(manifest) == paths
    assert records.verify_manifest(manifest) is None
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".incomplete")]


def test_the_manifest_counts_the_examples_of_each_length(tmp_path):
    """The length of an example is its longest feature's, the length the pipeline buckets by;
    the trainer reads from these counts how many tokens one pass over the split holds."""
    _, manifest = write_with_manifest(tmp_path, count=40)
    lengths = [max(i % 7 + 1, 2) for i in range(40)]
    expected = {length: lengths.count(length) for length in set(lengths)}
    assert records.manifest_example_lengths(manifest) == expected
    with open(manifest, encoding="utf-8") as handle:
        assert list(json.load(handle)["example_lengths"]) == [str(n) for n in sorted(expected)]


@pytest.mark.parametrize("damage", [lambda written: written.pop("example_lengths"),
                                    lambda written: written.update(example_lengths={"two": 3})])
def test_a_manifest_without_lengths_or_with_bad_ones_is_damage(tmp_path, damage):
    _, manifest = write_with_manifest(tmp_path)
    with open(manifest, encoding="utf-8") as handle:
        written = json.load(handle)
    damage(written)
    with open(manifest, "w", encoding="utf-8") as handle:
        json.dump(written, handle)
    assert records.verify_manifest(manifest).startswith(f"the manifest {manifest} is damaged")


def test_verify_manifest_names_a_truncated_changed_or_missing_shard(tmp_path):
    paths, manifest = write_with_manifest(tmp_path)
    content = open(paths[1], "rb").read()
    with open(paths[1], "wb") as handle:
        handle.write(content[:-5])
    for checksums in (False, True):  # sizes alone catch a truncation
        fault = records.verify_manifest(manifest, checksums=checksums)
        assert fault == (f"the shard {paths[1]} has {len(content) - 5} bytes, not the "
                         f"{len(content)} that datagen wrote (truncated)")
    changed = bytearray(content)
    changed[len(content) // 2] ^= 0xFF
    with open(paths[1], "wb") as handle:
        handle.write(bytes(changed))
    assert records.verify_manifest(manifest, checksums=False) is None  # same size
    assert records.verify_manifest(manifest) == (
        f"the shard {paths[1]} changed since datagen wrote it (its sha256 differs from the one "
        f"in {manifest})")
    os.remove(paths[2])
    with open(paths[1], "wb") as handle:
        handle.write(content)
    assert records.verify_manifest(manifest) == f"the shard {paths[2]} is missing"
    with open(manifest, "r+", encoding="utf-8") as handle:
        handle.truncate(30)
    assert records.verify_manifest(manifest).startswith(f"the manifest {manifest} is damaged")


def test_find_corrupt_shard_names_the_first_shard_that_does_not_read(tmp_path):
    paths, _ = write_with_manifest(tmp_path)
    assert records.find_corrupt_shard(paths) is None
    damaged = bytearray(open(paths[1], "rb").read())
    damaged[len(damaged) // 2] ^= 0xFF
    with open(paths[1], "wb") as handle:
        handle.write(bytes(damaged))
    path, message = records.find_corrupt_shard(paths)
    assert path == paths[1]
    assert re.fullmatch(r"corrupted record at \d+", message), message


def test_remove_split_removes_shards_of_any_count_and_the_manifest(tmp_path):
    write_with_manifest(tmp_path, shards=3)
    (tmp_path / "p-train-00000-of-00007").write_bytes(b"stale")
    (tmp_path / "p-dev-00000-of-00001").write_bytes(b"another split")
    records.remove_split(str(tmp_path), "p-train")
    assert os.listdir(tmp_path) == ["p-dev-00000-of-00001"]
