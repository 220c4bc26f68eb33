"""Datagen on a disk that fills up: one `error:` line naming --data_dir and that it is full, exit
status 2, no temporary file left, the splits already complete kept with their manifests; the
same command, once there is space, keeps them and finishes. It ended in a ResourceExhaustedError
traceback and left hidden `.unshuffled.incomplete` shards. On tmpfs mounts of a few MiB
(`small_filesystem`: root only)."""
import os
import re
import subprocess

import pytest

from t2t_lite import registry
from t2t_lite.data import text_files
from t2t_lite.data.problem import DATAGEN_LOCK_NAME
from t2t_lite.storage.storage_errors import StorageError

from program_runs import error_lines, run_program

MIB = 1 << 20


def full_message(data_dir):
    return (f"--data_dir={data_dir}: no space left on its file system; free some space or "
            f"choose another folder, then run the same command again")


def datagen(data_dir, tmp_dir):
    return run_program("datagen", "--problem=algorithmic_copy", f"--data_dir={data_dir}",
                       f"--tmp_dir={tmp_dir}")


def fingerprints(folder):
    return {name: (os.stat(os.path.join(folder, name)).st_mtime_ns,
                   open(os.path.join(folder, name), "rb").read())
            for name in sorted(os.listdir(folder))}


def test_a_full_disk_is_one_error_line_and_leaves_no_temporary_file(small_filesystem, tmp_path):
    """algorithmic_copy's 50,000 training sequences take 3.7 MB: a 3 MiB disk fills while they
    are written. Made 16 MiB (`mount -o remount`), the same command finishes."""
    data_dir = small_filesystem(3)
    done = datagen(data_dir, str(tmp_path / "tmp"))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert error_lines(done.stderr) == [
        f"error: {full_message(data_dir)}"]
    assert os.listdir(data_dir) == []  # no shard of the split cut short, no temporary, no lock

    subprocess.run(["mount", "-o", "remount,size=16m", data_dir], check=True)
    done = datagen(data_dir, str(tmp_path / "tmp"))
    assert done.returncode == 0, done.stderr
    registry.problem("algorithmic_copy").check_data(data_dir, ["train", "dev"])


def test_a_disk_that_fills_midway_keeps_the_complete_split_and_the_rerun_finishes(
        small_filesystem):
    """300 training and 20,000 dev sequences (about 1.5 MB, written twice over for the
    shuffle) on a 4 MiB disk that a 1.5 MiB file fills up: the train split is complete when
    the dev split fills the disk. Once the file is deleted, the same call writes dev and test
    and keeps train."""
    data_dir = small_filesystem(4)
    ballast = os.path.join(data_dir, "ballast")
    with open(ballast, "wb") as handle:
        handle.write(b"\0" * (3 * MIB // 2))
    problem = registry.problem("algorithmic_copy")
    problem.num_samples = {"train": 300, "dev": 20_000, "test": 5}
    with pytest.raises(StorageError) as raised:
        problem.generate_data(data_dir, data_dir)
    assert str(raised.value) == full_message(data_dir)

    train = [os.path.basename(path) for path in
             problem.filepaths(data_dir, problem.dataset_splits()[0])]
    assert sorted(os.listdir(data_dir)) == sorted(
        train + ["algorithmic_copy-train.manifest.json", "ballast"])
    assert problem.split_fault(data_dir, "train") is None
    kept = fingerprints(data_dir)

    os.remove(ballast)
    del kept["ballast"]
    assert set(problem.generate_data(data_dir, data_dir)) == {"dev", "test"}
    assert {name: value for name, value in fingerprints(data_dir).items()
            if name in kept} == kept
    problem.check_data(data_dir, ["train", "dev"])
    assert not os.path.exists(os.path.join(data_dir, DATAGEN_LOCK_NAME))


def test_a_download_into_a_full_tmp_dir_names_it_and_leaves_no_partial_file(small_filesystem,
                                                                            tmp_path):
    """Multi30k's raw files are downloaded into tmp_dir (here from a file:// URL)."""
    raw = tmp_path / "train.de.gz"
    raw.write_bytes(os.urandom(2 * MIB))
    tmp_dir = small_filesystem(1)
    with pytest.raises(StorageError, match=re.escape(f"{tmp_dir}: no space left on its file "
                                                     f"system")):
        text_files.maybe_download(tmp_dir, "train.de.gz", raw.as_uri())
    assert os.listdir(tmp_dir) == []
