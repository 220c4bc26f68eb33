"""translate_multi30k_deen datagen on the real Multi30k files (run once for the module, ~25 s):
record counts, balanced shards, the test split as text, ids that decode back to the raw
sentences, EOS at the end of every record, reruns that keep or complete the work, and errors
that name the file."""
import gzip
import os
import random
import shutil
import urllib.request

import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data import pipeline, records
from t2t_lite.data.text_files import read_lines, read_parallel
from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.errors import DataError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MULTI30K = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))
PROBLEM = "translate_multi30k_deen"
RAW_NAMES = {"train": "train", "dev": "val", "test": "test_2016_flickr"}
RAW_COUNTS = {"train": 29000, "dev": 1014, "test": 1000}
SOURCE, TARGET = "de", "en"

needs_multi30k = pytest.mark.skipif(
    not all(os.path.exists(os.path.join(MULTI30K, f"{name}.{language}.gz"))
            for name in RAW_NAMES.values() for language in (SOURCE, TARGET)),
    reason=f"the Multi30k raw files are absent from {MULTI30K} (<repo>/../shared/data/multi30k)")


def raw_lines(split, language):
    return list(read_lines(os.path.join(MULTI30K, f"{RAW_NAMES[split]}.{language}.gz")))


def read_shard(path):
    """The records of one shard as {"inputs": ids, "targets": ids}, parsed in large batches
    (iterating 30,000 single examples through tf.data takes about 15 s; this takes 1)."""
    spec = {name: tf.io.VarLenFeature(tf.int64) for name in pipeline.FEATURES}
    examples = []
    for batch in tf.data.TFRecordDataset(path).batch(8192):
        parsed = tf.io.parse_example(batch, spec)
        columns = [tf.RaggedTensor.from_sparse(parsed[name]).to_list() for name in spec]
        examples += [dict(zip(spec, row)) for row in zip(*columns)]
    return examples


def fingerprints(data_dir):
    """{file name: (mtime_ns, size)} of everything in data_dir."""
    return {name: (os.stat(os.path.join(data_dir, name)).st_mtime_ns,
                   os.path.getsize(os.path.join(data_dir, name)))
            for name in sorted(os.listdir(data_dir))}


def split_of(problem, name):
    return next(split for split in problem.dataset_splits() if split.name == name)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    if not os.path.isdir(MULTI30K):
        pytest.skip(f"the Multi30k raw files are absent: no folder {MULTI30K}")
    problem = registry.problem(PROBLEM)
    data_dir = str(tmp_path_factory.mktemp("multi30k_data"))
    stats = problem.generate_data(data_dir, MULTI30K)
    return problem, data_dir, stats


@pytest.fixture(scope="module")
def shards(generated):
    """{split: [records of each shard]} for train and dev, read once for the module."""
    problem, data_dir, _ = generated
    return {split: [read_shard(path)
                    for path in problem.filepaths(data_dir, split_of(problem, split))]
            for split in ("train", "dev")}


@pytest.fixture(scope="module")
def raw():
    return {split: {language: raw_lines(split, language) for language in (SOURCE, TARGET)}
            for split in RAW_NAMES}


@needs_multi30k
def test_record_counts_are_the_raw_pairs_minus_the_counted_skips(generated, shards, raw):
    problem, data_dir, stats = generated
    assert set(stats) == {"train", "dev", "test"}
    for split in ("train", "dev"):
        assert len(raw[split][SOURCE]) == len(raw[split][TARGET]) == RAW_COUNTS[split]
        written = sum(len(shard) for shard in shards[split])
        skipped = sum(stats[split].skipped.values())
        assert written == stats[split].records == RAW_COUNTS[split] - skipped, \
            (split, written, stats[split].describe())
        assert stats[split].input_tokens > stats[split].records  # EOS plus at least one piece
    assert stats["test"].records == RAW_COUNTS["test"]
    assert not [name for name in os.listdir(data_dir) if name.endswith(".incomplete")]


@needs_multi30k
def test_train_shards_hold_the_same_number_of_records(generated, shards):
    problem, data_dir, _ = generated
    paths = problem.filepaths(data_dir, split_of(problem, "train"))
    assert [os.path.basename(path) for path in paths] == \
        [f"{PROBLEM}-train-{i:05d}-of-00010" for i in range(10)]
    counts = [len(shard) for shard in shards["train"]]
    assert max(counts) - min(counts) <= 0.01 * max(counts), counts
    dev_paths = problem.filepaths(data_dir, split_of(problem, "dev"))
    assert [os.path.basename(path) for path in dev_paths] == [f"{PROBLEM}-dev-00000-of-00001"]


@needs_multi30k
def test_test_split_is_written_as_the_raw_text(generated, raw):
    problem, data_dir, _ = generated
    paths = problem.text_paths(data_dir, "test")
    for feature, language in (("inputs", SOURCE), ("targets", TARGET)):
        with open(paths[feature], encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        assert lines[-1] == ""  # every line ends with a newline, the last one too
        assert len(lines[:-1]) == RAW_COUNTS["test"]
        assert lines[:-1] == raw["test"][language]
    assert not [name for name in os.listdir(data_dir) if "-test-" in name]  # no test records


@needs_multi30k
def test_records_decode_back_to_the_raw_sentence_pairs(generated, shards, raw):
    """Shards are shuffled, so each decoded pair is looked up among the raw pairs of its split;
    the source and target must come from the same line."""
    problem, data_dir, _ = generated
    vocabulary = problem.feature_encoders(data_dir)["targets"]
    rng = random.Random(0)
    for split, sample_size in (("train", 200), ("dev", 50)):
        pairs = set(zip(raw[split][SOURCE], raw[split][TARGET]))
        examples = [example for shard in shards[split] for example in shard]
        for example in rng.sample(examples, sample_size):
            decoded = (vocabulary.decode(example["inputs"]), vocabulary.decode(example["targets"]))
            assert decoded in pairs, (split, decoded)


@needs_multi30k
def test_every_record_ends_with_eos_and_has_no_other_reserved_id(shards):
    for split in ("train", "dev"):
        examples = [example for shard in shards[split] for example in shard]
        assert len(examples) == RAW_COUNTS[split]
        for example in examples:
            for feature in ("inputs", "targets"):
                ids = example[feature]
                assert len(ids) >= 2 and ids[-1] == EOS_ID, (split, feature, ids)
                assert EOS_ID not in ids[:-1] and PAD_ID not in ids, (split, feature, ids)


@needs_multi30k
def test_rerun_keeps_complete_shards(generated):
    problem, data_dir, _ = generated
    before = fingerprints(data_dir)
    assert problem.generate_data(data_dir, MULTI30K) == {}  # nothing written again
    assert fingerprints(data_dir) == before


@needs_multi30k
def test_rerun_completes_an_interrupted_run(generated):
    problem, data_dir, stats = generated
    train_paths = problem.filepaths(data_dir, split_of(problem, "train"))
    contents = {}
    for path in train_paths:
        with open(path, "rb") as handle:
            contents[path] = handle.read()
    kept = {name: value for name, value in fingerprints(data_dir).items()
            if "-train" not in name}
    # An interruption while the train split was written: a shard missing, leftovers present.
    os.remove(train_paths[3])
    for leftover in (train_paths[3] + records.INCOMPLETE_SUFFIX,
                     train_paths[7] + ".unshuffled" + records.INCOMPLETE_SUFFIX):
        with open(leftover, "wb") as handle:
            handle.write(b"truncated")

    written = problem.generate_data(data_dir, MULTI30K)

    assert set(written) == {"train"}  # dev and test were complete and are kept
    assert written["train"].records == stats["train"].records
    assert records.all_exist(train_paths)
    assert not [name for name in os.listdir(data_dir) if name.endswith(".incomplete")]
    assert {name: value for name, value in fingerprints(data_dir).items()
            if "-train" not in name} == kept
    for path in train_paths:  # same vocabulary, same shuffle seed: the same shards again
        with open(path, "rb") as handle:
            assert handle.read() == contents[path], path


@needs_multi30k
@pytest.mark.parametrize("missing, done", [("train.en.gz", False),
                                           ("test_2016_flickr.de.gz", True)])
def test_a_missing_raw_file_is_a_data_error_naming_its_path(generated, tmp_path, monkeypatch,
                                                            missing, done):
    """tmp_dir holds some of the raw files; the problem would download the others, which is
    made to fail here as it does offline. `done`: train and dev were already generated."""
    def no_network(url, filename, *args, **kwargs):
        raise OSError("network unreachable (simulated by the test)")
    monkeypatch.setattr(urllib.request, "urlretrieve", no_network)

    problem, generated_dir, _ = generated
    tmp_dir = tmp_path / "raw"
    tmp_dir.mkdir()
    for name in os.listdir(MULTI30K):
        if name.endswith(".gz") and name != missing:
            shutil.copy(os.path.join(MULTI30K, name), tmp_dir / name)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    if done:
        for name in os.listdir(generated_dir):
            if "-test." not in name:
                shutil.copy(os.path.join(generated_dir, name), data_dir / name)
    missing_path = str(tmp_dir / missing)

    with pytest.raises(DataError) as raised:
        problem.generate_data(str(data_dir), str(tmp_dir))

    assert missing_path in str(raised.value)
    assert not os.path.exists(missing_path)
    assert not [name for name in os.listdir(data_dir)
                if "-test." in name and not name.endswith(".incomplete")]
    if not done:
        assert not os.path.exists(problem.vocab_path(str(data_dir)))


# --- read_parallel ---------------------------------------------------------------------------

def _write(path, data: bytes):
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as handle:
            handle.write(data)
    else:
        path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_parallel_names_the_file_and_line_of_invalid_utf8_and_both_line_counts(
        tmp_path, suffix):
    good = _write(tmp_path / f"good.de{suffix}", "eins\nzwei\ndrei\n".encode("utf-8"))
    bad = _write(tmp_path / f"bad.en{suffix}", b"one\ntwo\nth\xffree\n")
    with pytest.raises(DataError) as raised:
        list(read_parallel(good, bad))
    message = str(raised.value)
    assert bad in message and "line 3" in message and "UTF-8" in message, message
    assert good not in message

    pairs = list(read_parallel(good, _write(tmp_path / f"ok.en{suffix}", b"one\ntwo\nthree\n")))
    assert pairs == [{"inputs": "eins", "targets": "one"}, {"inputs": "zwei", "targets": "two"},
                     {"inputs": "drei", "targets": "three"}]

    five = _write(tmp_path / f"five.en{suffix}", b"a\nb\nc\nd\ne\n")
    for source, target, counts in ((good, five, (3, 5)), (five, good, (5, 3))):
        with pytest.raises(DataError) as raised:
            list(read_parallel(source, target))
        message = str(raised.value)
        assert f"{source} has {counts[0]} lines" in message, message
        assert f"{target} has {counts[1]}" in message, message
