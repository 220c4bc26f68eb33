"""The shards datagen wrote are checked against their manifests before training: a missing,
truncated, changed or stray shard is one DataError naming the file and the datagen command;
a damaged record met while reading is named by corrupt_data_error; datagen writes such a split
again and keeps the verified ones. On algorithmic_copy with 300 training sequences. Shards
without a manifest: test_unverified_data.py."""
import os
import re
import shutil

import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.errors import DataError

RERUN = "rerun t2t_lite-datagen --problem=algorithmic_copy --data_dir={} --tmp_dir=TMP_DIR"


@pytest.fixture
def data(generated, tmp_path):
    """A copy of the generated folder for a test to damage: (problem, folder, train shards)."""
    problem, original = generated
    data_dir = str(tmp_path / "data")
    shutil.copytree(original, data_dir)
    train = problem.filepaths(data_dir, problem.dataset_splits()[0])
    return problem, data_dir, train


def flip_a_byte(path):
    content = bytearray(open(path, "rb").read())
    content[len(content) // 2] ^= 0xFF
    with open(path, "wb") as handle:
        handle.write(bytes(content))


def contents(data_dir):
    return {name: open(os.path.join(data_dir, name), "rb").read()
            for name in sorted(os.listdir(data_dir))}


def test_datagen_writes_a_manifest_per_record_split_and_fresh_data_passes(data):
    problem, data_dir, _ = data
    assert sorted(name for name in os.listdir(data_dir) if name.endswith(".manifest.json")) == [
        "algorithmic_copy-dev.manifest.json", "algorithmic_copy-train.manifest.json"]
    problem.check_data(data_dir, ["train", "dev"])


def test_a_truncated_shard_is_one_error_naming_it_and_the_command(data):
    problem, data_dir, train = data
    with open(train[4], "r+b") as handle:
        handle.truncate(100)
    expected = (re.escape(f"the shard {train[4]} has 100 bytes, not the ") + r"\d+" +
                re.escape(f" that datagen wrote (truncated): the train data in {data_dir} is "
                          f"incomplete or damaged; {RERUN.format(data_dir)}, which writes this "
                          f"split again"))
    with pytest.raises(DataError, match=expected):
        problem.check_data(data_dir, ["train", "dev"])
    with pytest.raises(DataError, match=expected):  # the size check of every dataset()
        problem.dataset("train", data_dir, registry.hparams("transformer_tiny"), True)


def test_a_changed_shard_fails_the_check_and_reading_it_names_it(data):
    problem, data_dir, train = data
    flip_a_byte(train[2])
    with pytest.raises(DataError, match=re.escape(f"the shard {train[2]} changed since datagen "
                                                    f"wrote it")):
        problem.check_data(data_dir, ["train", "dev"])
    # Reading without the check: TensorFlow's error names no file; corrupt_data_error does.
    dataset = problem.dataset("train", data_dir, registry.hparams("transformer_tiny"), False)
    with pytest.raises(tf.errors.DataLossError) as caught:
        for _ in dataset:
            pass
    error = problem.corrupt_data_error(data_dir, ["train", "dev"], caught.value)
    assert isinstance(error, DataError)
    assert str(error).startswith(f"the shard {train[2]} is damaged (corrupted record at ")
    assert str(error).endswith(f"{RERUN.format(data_dir)}, which writes the train split again")


def test_a_missing_shard_and_a_stray_shard_are_named(data):
    problem, data_dir, train = data
    dev = problem.filepaths(data_dir, problem.dataset_splits()[1])[0]
    os.remove(dev)
    with pytest.raises(DataError, match=re.escape(f"the shard {dev} is missing: the dev data")):
        problem.check_data(data_dir, ["train", "dev"])
    stray = os.path.join(data_dir, "algorithmic_copy-train-00000-of-00003")
    shutil.copy(train[0], stray)
    with pytest.raises(DataError, match=re.escape(f"{stray} is not one of the shards that ")):
        problem.check_data(data_dir, ["train"])


def test_datagen_writes_a_damaged_split_again_and_keeps_the_verified_one(data, generated):
    problem, data_dir, train = data
    original = contents(generated[1])
    dev = problem.filepaths(data_dir, problem.dataset_splits()[1])[0]
    flip_a_byte(dev)
    before = os.stat(train[0]).st_mtime_ns
    written = problem.generate_data(data_dir, data_dir)
    assert set(written) == {"dev"}
    assert os.stat(train[0]).st_mtime_ns == before
    assert contents(data_dir) == original  # the same bytes as the first run
    # A stale shard of another count makes the split's files disagree with its manifest.
    shutil.copy(train[0], os.path.join(data_dir, "algorithmic_copy-train-00000-of-00003"))
    assert set(problem.generate_data(data_dir, data_dir)) == {"train"}
    assert contents(data_dir) == original
    problem.check_data(data_dir, ["train", "dev"])
