"""Shards without a manifest are refused: a folder with 5 of its 10 training shards missing and
one empty, and no manifest, trained and exited 0 with a warning. The error names the split, the
folder, the datagen command (which writes the split again, with its manifest: the same shards
datagen wrote the first time) and --allow_unverified_data (allow_unverified=True), which reads
them with the warning. On algorithmic_copy with 300 training sequences."""
import logging
import os
import re
import shutil

import pytest

from t2t_lite import registry
from t2t_lite.errors import DataError

from program_runs import run_program, trainer_flags

HPARAMS = registry.hparams("transformer_tiny")


def contents(data_dir):
    return {name: open(os.path.join(data_dir, name), "rb").read()
            for name in sorted(os.listdir(data_dir))}


@pytest.fixture
def unverified(generated, tmp_path):
    """A copy without manifests, 5 of the 10 training shards missing and one empty."""
    problem, original = generated
    data_dir = str(tmp_path / "data")
    shutil.copytree(original, data_dir)
    for split in ("train", "dev"):
        os.remove(problem.manifest_path(data_dir, split))
    train = problem.filepaths(data_dir, problem.dataset_splits()[0])
    for path in train[5:]:
        os.remove(path)
    open(train[0], "wb").close()
    return problem, data_dir


def test_shards_without_a_manifest_are_refused_naming_the_split_and_both_ways_out(unverified):
    problem, data_dir = unverified
    manifest = problem.manifest_path(data_dir, "train")
    expected = (f"the train shards in {data_dir} have no manifest {manifest}, so nothing tells "
                f"whether they are whole (an interrupted datagen, or shards written by another "
                f"tool): rerun t2t_lite-datagen --problem=algorithmic_copy --data_dir={data_dir} "
                f"--tmp_dir=TMP_DIR, which writes the split again with its manifest, or pass "
                f"--allow_unverified_data to train on them as they are")
    with pytest.raises(DataError, match=f"^{re.escape(expected)}$"):
        problem.check_data(data_dir, ["train", "dev"])
    with pytest.raises(DataError, match=re.escape(expected)):
        problem.dataset("train", data_dir, HPARAMS, training=False)


def test_allow_unverified_reads_them_with_a_warning(unverified, caplog):
    problem, data_dir = unverified
    with caplog.at_level(logging.WARNING):
        problem.check_data(data_dir, ["train", "dev"], allow_unverified=True)
    manifest = problem.manifest_path(data_dir, "train")
    assert f"no manifest {manifest}: the shards cannot be verified" in caplog.text
    assert (f"rerun t2t_lite-datagen --problem=algorithmic_copy --data_dir={data_dir} "
            f"--tmp_dir=TMP_DIR" in caplog.text)
    batches = problem.dataset("train", data_dir, HPARAMS, training=False, allow_unverified=True)
    assert sum(int(batch["targets"].shape[0]) for batch in batches) < 300  # half is missing


def test_datagen_writes_a_split_without_manifest_again_as_the_error_says(unverified, generated):
    problem, data_dir = unverified
    assert set(problem.generate_data(data_dir, data_dir)) == {"train", "dev"}
    assert contents(data_dir) == contents(generated[1])  # the shards of a first run, manifests
    problem.check_data(data_dir, ["train", "dev"])


def test_the_trainer_refuses_them_unless_allow_unverified_data_is_given(unverified, tmp_path):
    _, data_dir = unverified
    output_dir = str(tmp_path / "train")

    def train(*extra):
        return run_program("trainer", *trainer_flags(data_dir, output_dir, 2), *extra)

    refused = train()
    assert refused.returncode == 2, refused.stderr
    assert "--allow_unverified_data" in refused.stderr.strip().splitlines()[-1]
    assert not os.path.exists(output_dir) or not os.listdir(output_dir)
    allowed = train("--allow_unverified_data")
    assert allowed.returncode == 0, allowed.stderr
    assert os.path.exists(os.path.join(output_dir, "model.ckpt-2.index"))
