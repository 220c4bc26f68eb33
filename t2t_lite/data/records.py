"""Sharded TFRecord files of int64 id features, written atomically, shuffled with a seed, the
same bytes in every run, and listed in a manifest (counts, sizes, sha256, example lengths, the
vocabulary's origin) that `verify_manifest` checks before training (docs/architecture.md,
"Data")."""
import contextlib
import hashlib
import json
import os
import random
import re

import tensorflow as tf

from t2t_lite.storage import atomic_files

INCOMPLETE_SUFFIX = atomic_files.INCOMPLETE_SUFFIX  # of the leftovers an interrupted write leaves
MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_FORMAT = 1
HASH_CHUNK_BYTES = 1 << 20
SHARD_FIELDS = ("name", "records", "bytes", "sha256")
VOCABULARY = "vocabulary"  # the manifest's key of the vocabulary's origin


def shard_paths(data_dir: str, prefix: str, num_shards: int) -> list:
    """t2t's names: {prefix}-00000-of-00010."""
    return [os.path.join(data_dir, f"{prefix}-{i:05d}-of-{num_shards:05d}")
            for i in range(num_shards)]


def to_example(features: dict) -> bytes:
    """A serialized tf.train.Example of int64 lists. `deterministic=True` writes the feature map
    in sorted key order; without it the order follows protobuf's hash seed, which differs
    between processes, so two datagen runs wrote different bytes for the same examples."""
    feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=ids))
               for name, ids in features.items()}
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


def shard_of(index: int, num_shards: int) -> int:
    """Round-robin whose start moves by one every round, so that a corpus with alternating
    kinds of lines (Multi30k's short even and long odd lines) still mixes into every shard."""
    return (index + index // num_shards) % num_shards


def write_shards(examples, paths: list, seed: int = 0, on_example=None,
                 manifest: str = None, vocabulary: dict = None) -> int:
    """Streams `examples` (dicts of id lists) round-robin into `paths`; returns how many.
    With `manifest` (a path), the manifest of the shards is written once they are all complete,
    with `vocabulary` (the origin of the vocabulary that encoded them, see write_manifest).

    Only one shard is ever held in memory: the shuffle of a shard reads it back after the
    streaming pass, as t2t's `shuffle_dataset` did. When anything fails (a full disk, an
    interrupt, a bad raw line) the temporary files are removed before the error goes on: a
    full disk then gets its space back, and no hidden leftover waits for the next run.
    """
    unshuffled = [atomic_files.temporary_path(path + ".unshuffled") for path in paths]
    lengths = {}
    try:
        count = _write_round_robin(examples, unshuffled, on_example, lengths)
        rng = random.Random(seed)
        shard_records = [_write_shuffled(source, path, rng)
                         for source, path in zip(unshuffled, paths)]
    except BaseException:
        for path in unshuffled:
            atomic_files.remove_if_exists(path)
        raise
    if manifest:
        write_manifest(manifest, paths, shard_records, lengths, vocabulary)
    return count


def example_length(example: dict) -> int:
    """The length of its longest feature (pipeline.example_length, outside the graph)."""
    return max(len(ids) for ids in example.values())


def _write_round_robin(examples, paths: list, on_example, lengths: dict) -> int:
    """The streaming pass of write_shards; counts the examples of each length into `lengths`.
    Every writer is closed, even after one fails: TensorFlow reports a full disk when a writer
    flushes on close, and a writer left open would keep its file (and its space) until the
    process ends."""
    count = 0
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(tf.io.TFRecordWriter(path)) for path in paths]
        for count, example in enumerate(examples, start=1):
            length = example_length(example)
            lengths[length] = lengths.get(length, 0) + 1
            writers[shard_of(count - 1, len(writers))].write(to_example(example))
            if on_example:
                on_example(count)
    return count


def _write_shuffled(source: str, path: str, rng: random.Random) -> int:
    """Writes the records of `source` to `path` (atomically) in shuffled order, removes
    `source`, and returns how many there are."""
    records = [record for batch in tf.data.TFRecordDataset(source).batch(4096)
               .as_numpy_iterator() for record in batch]
    rng.shuffle(records)
    with atomic_files.atomic_path(path) as temporary:
        with tf.io.TFRecordWriter(temporary) as writer:
            for record in records:
                writer.write(record)
    tf.io.gfile.remove(source)
    return len(records)


# --- Manifests -----------------------------------------------------------------------------

def manifest_path(data_dir: str, prefix: str) -> str:
    """{prefix}.manifest.json: outside the shards' pattern {prefix}-*-of-*."""
    return os.path.join(data_dir, prefix + MANIFEST_SUFFIX)


def file_sha256(path: str) -> str:
    """The file's sha256, read in 1 MB chunks (a few hundred MB/s)."""
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(path: str, paths: list, record_counts: list, lengths: dict,
                   vocabulary: dict = None):
    """Writes the manifest of the complete shards `paths` atomically; `lengths`, {length: how
    many examples}, as its example_lengths (shortest first); `vocabulary`, where the vocabulary
    that encoded them came from, as its "vocabulary": {"from": "trained" (in the data folder)
    or the path datagen's --vocab_from named, "sha256": the vocabulary file's, and "file": the
    file copied, for --vocab_from}. Problems whose vocabulary is made in code record none."""
    shards = [{"name": os.path.basename(shard), "records": records,
               "bytes": tf.io.gfile.stat(shard).length, "sha256": file_sha256(shard)}
              for shard, records in zip(paths, record_counts)]
    manifest = {"format": MANIFEST_FORMAT, "records": sum(record_counts), "shards": shards,
                "example_lengths": {str(length): lengths[length] for length in sorted(lengths)}}
    if vocabulary is not None:
        manifest[VOCABULARY] = dict(vocabulary)
    with atomic_files.atomic_write(path) as handle:
        handle.write(json.dumps(manifest, indent=1) + "\n")


def read_manifest(path: str) -> dict:
    """The manifest at `path`: {"format", "records", "shards": [{"name", "records", "bytes",
    "sha256"}, ...], "example_lengths": {"length": count}, "vocabulary": {"from", "sha256"}}
    ("vocabulary" where the vocabulary is a file); ValueError naming it when it is damaged."""
    with tf.io.gfile.GFile(path, "r") as handle:
        text = handle.read()
    try:
        manifest = json.loads(text)
        well_formed = (manifest["format"] == MANIFEST_FORMAT and manifest["shards"] and
                       all(set(SHARD_FIELDS) <= set(shard) for shard in manifest["shards"]))
        lengths = manifest["example_lengths"]
        well_formed = well_formed and all(
            length.isdigit() and isinstance(count, int) for length, count in lengths.items())
        vocabulary = manifest.get(VOCABULARY, {"from": "", "sha256": ""})
        well_formed = well_formed and all(isinstance(vocabulary.get(key), str)
                                          for key in ("from", "sha256"))
    except (ValueError, KeyError, TypeError, AttributeError):
        well_formed = False
    if not well_formed:
        raise ValueError(f"the manifest {path} is damaged (it is not the JSON list of shards "
                         f"that datagen writes)")
    return manifest


def manifest_example_lengths(path: str) -> dict:
    """{length: how many examples} of the split whose manifest is at `path`."""
    lengths = read_manifest(path)["example_lengths"]
    return {int(length): count for length, count in lengths.items()}


def count_records(manifest: str, filepattern: str) -> int:
    """The records of a set of shards: as its manifest lists them, or counted by reading the
    shards matching `filepattern` when there is no manifest."""
    if tf.io.gfile.exists(manifest):
        return read_manifest(manifest)["records"]
    return sum(int(tf.data.TFRecordDataset(path).reduce(0, lambda count, _: count + 1))
               for path in tf.io.gfile.glob(filepattern))


def manifest_vocabulary(path: str):
    """The origin of the vocabulary that encoded the split whose manifest is at `path`
    ({"from", "sha256", ...}, see write_manifest), or None for a vocabulary made in code."""
    return read_manifest(path).get(VOCABULARY)


def manifest_shards(path: str) -> list:
    """The paths of the shards the manifest lists (beside it)."""
    folder = os.path.dirname(path)
    return [os.path.join(folder, shard["name"]) for shard in read_manifest(path)["shards"]]


def verify_manifest(path: str, checksums: bool = True) -> str:
    """None when every shard the manifest at `path` lists is there with its recorded size and,
    with `checksums`, sha256; else what is wrong with the first shard that is not, naming it.
    Sizes alone (checksums=False) catch a missing or truncated shard without reading it."""
    try:
        manifest = read_manifest(path)
    except ValueError as error:
        return str(error)
    folder = os.path.dirname(path)
    for shard in manifest["shards"]:
        shard_path = os.path.join(folder, shard["name"])
        if not tf.io.gfile.exists(shard_path):
            return f"the shard {shard_path} is missing"
        size = tf.io.gfile.stat(shard_path).length
        if size != shard["bytes"]:
            return (f"the shard {shard_path} has {size} bytes, not the {shard['bytes']} "
                    f"that datagen wrote ({'truncated' if size < shard['bytes'] else 'changed'})")
        if checksums and file_sha256(shard_path) != shard["sha256"]:
            return (f"the shard {shard_path} changed since datagen wrote it (its sha256 differs "
                    f"from the one in {path})")
    return None


def find_corrupt_shard(paths: list) -> tuple:
    """(path, TensorFlow's message) of the first shard in `paths` that cannot be read to its
    end (a missing file, a bad length or checksum of a record), or None when all can. Reads
    every record, so it is the check to run after a DataLossError, not before every run."""
    for path in paths:
        try:
            for _ in tf.data.TFRecordDataset(path).batch(4096):
                pass
        except tf.errors.OpError as error:  # DataLossError, NotFoundError, ...
            return path, plain_message(error)
    return None


def plain_message(error) -> str:
    """TensorFlow's message without the op's wrapping: "corrupted record at 1085" rather than
    "{{function_node __wrapped__IteratorGetNext...}} corrupted record at 1085 [Op:...] name: "."""
    message = getattr(error, "message", None) or str(error)
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", message, flags=re.DOTALL).strip()


def all_exist(paths: list) -> bool:
    return all(tf.io.gfile.exists(path) for path in paths)


def remove_split(data_dir: str, prefix: str):
    """Deletes the manifest and every shard of `prefix` ({prefix}-*-of-*), whatever their
    number: what an earlier datagen left before this one writes the split again."""
    tf.io.gfile.makedirs(data_dir)
    atomic_files.remove_if_exists(manifest_path(data_dir, prefix))
    for path in tf.io.gfile.glob(os.path.join(data_dir, f"{prefix}-*-of-*")):
        tf.io.gfile.remove(path)
    atomic_files.remove_incomplete(data_dir, prefix)
