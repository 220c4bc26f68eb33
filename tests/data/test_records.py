import os

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


def test_an_interrupted_write_leaves_no_finished_looking_shard(tmp_path):
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
    assert not any(os.path.exists(path) for path in paths)
    records.remove_incomplete(str(tmp_path), "p-train")
    assert os.listdir(tmp_path) == []


def test_alternating_kinds_of_lines_reach_every_shard():
    # Multi30k's even lines are short and odd lines long: plain round-robin over an even
    # number of shards would give some shards only short and others only long sentences.
    shards = [records.shard_of(i, 10) for i in range(1000)]
    for shard in range(10):
        indices = [i for i, s in enumerate(shards) if s == shard]
        assert len(indices) == 100
        assert sum(i % 2 for i in indices) == 50
