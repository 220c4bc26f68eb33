"""Sharded TFRecord files of int64 id features, written atomically.

A shard is written under a temporary name and renamed only when complete, so an interrupted
datagen never leaves a file that looks finished (tensor2tensor wrote in place and users found
truncated shards after a crash). Examples go round-robin over the shards as they stream in, and
each shard is then shuffled before it is renamed, as t2t's `generate_files` + `shuffle_dataset`
did.
"""
import os
import random

import tensorflow as tf

INCOMPLETE_SUFFIX = ".incomplete"


def shard_paths(data_dir: str, prefix: str, num_shards: int) -> list:
    """t2t's names: {prefix}-00000-of-00010."""
    return [os.path.join(data_dir, f"{prefix}-{i:05d}-of-{num_shards:05d}")
            for i in range(num_shards)]


def to_example(features: dict) -> bytes:
    feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=ids))
               for name, ids in features.items()}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def shard_of(index: int, num_shards: int) -> int:
    """Round-robin whose start moves by one every round, so that a corpus with alternating
    kinds of lines (Multi30k's short even and long odd lines) still mixes into every shard."""
    return (index + index // num_shards) % num_shards


def write_shards(examples, paths: list, seed: int = 0, on_example=None) -> int:
    """Streams `examples` (dicts of id lists) round-robin into `paths`; returns how many.

    Only one shard is ever held in memory: the shuffle of a shard reads it back after the
    streaming pass, as t2t's `shuffle_dataset` did.
    """
    unshuffled = [path + ".unshuffled" + INCOMPLETE_SUFFIX for path in paths]
    writers = [tf.io.TFRecordWriter(path) for path in unshuffled]
    count = 0
    try:
        for count, example in enumerate(examples, start=1):
            writers[shard_of(count - 1, len(writers))].write(to_example(example))
            if on_example:
                on_example(count)
    finally:
        for writer in writers:
            writer.close()
    rng = random.Random(seed)
    for source, path in zip(unshuffled, paths):
        records = [record for batch in tf.data.TFRecordDataset(source).batch(4096)
                   .as_numpy_iterator() for record in batch]
        rng.shuffle(records)
        temporary = path + INCOMPLETE_SUFFIX
        with tf.io.TFRecordWriter(temporary) as writer:
            for record in records:
                writer.write(record)
        os.replace(temporary, path)
        os.remove(source)
    return count


def all_exist(paths: list) -> bool:
    return all(os.path.exists(path) for path in paths)


def remove_incomplete(data_dir: str, prefix: str):
    """Deletes leftovers of an interrupted write of the files starting with `prefix`."""
    for name in os.listdir(data_dir):
        if name.startswith(prefix) and name.endswith(INCOMPLETE_SUFFIX):
            os.remove(os.path.join(data_dir, name))
