"""atomic_files: a file or a folder appears under its name whole, or not at all; on the local disk
and on ram:// (whose `exists(p)` is True for any path that merely starts with p, and whose
rename of a folder leaves the files in it behind)."""
import uuid

import pytest
import tensorflow as tf

from t2t_lite.storage import atomic_files


@pytest.fixture(params=["local", "ram"])
def folder(request, tmp_path):
    if request.param == "local":
        return str(tmp_path)
    path = f"ram://atomic-{uuid.uuid4().hex}"
    tf.io.gfile.makedirs(path)
    return path


def test_the_temporary_file_is_hidden_beside_the_final_one_and_never_under_its_name(folder):
    path = f"{folder}/vocab.model"
    assert atomic_files.temporary_path(path) == f"{folder}/.vocab.model.incomplete"
    with atomic_files.atomic_write(path, "wb") as handle:
        handle.write(b"half")
        handle.flush()
        assert not tf.io.gfile.exists(path)  # ram:// too: the name does not start with path
        handle.write(b" and half")
    with tf.io.gfile.GFile(path, "rb") as handle:
        assert handle.read() == b"half and half"
    assert tf.io.gfile.listdir(folder) == ["vocab.model"]


def test_a_write_replaces_an_older_file_only_when_complete(folder):
    path = f"{folder}/settings.json"
    with atomic_files.atomic_write(path) as handle:
        handle.write("old")
    with atomic_files.atomic_path(path) as temporary:
        with tf.io.gfile.GFile(temporary, "w") as handle:
            handle.write("new")
        with tf.io.gfile.GFile(path) as handle:
            assert handle.read() == "old"
    with tf.io.gfile.GFile(path) as handle:
        assert handle.read() == "new"


def test_an_exception_leaves_neither_file(folder):
    path = f"{folder}/shard-00000-of-00001"
    with pytest.raises(KeyboardInterrupt):
        with atomic_files.atomic_write(path, "wb") as handle:
            handle.write(b"truncated")
            raise KeyboardInterrupt
    assert tf.io.gfile.listdir(folder) == []


def test_remove_incomplete_removes_leftovers_of_the_prefix_only(folder):
    names = [".p-train-00000-of-00002.incomplete", "p-train.manifest.json.incomplete",
             ".other-00000-of-00001.incomplete", "p-train-00001-of-00002"]
    for name in names:  # leftovers of a killed run, in today's and in the earlier naming
        with tf.io.gfile.GFile(f"{folder}/{name}", "w") as handle:
            handle.write("x")
    atomic_files.remove_incomplete(folder, "p-train")
    assert sorted(tf.io.gfile.listdir(folder)) == [".other-00000-of-00001.incomplete",
                                                   "p-train-00001-of-00002"]
    atomic_files.remove_incomplete(f"{folder}/absent", "p-train")  # no folder: nothing to do


def test_a_writer_of_its_own_gets_a_temporary_name_of_its_own(folder):
    path = f"{folder}/t2t_lite.lock"
    assert (atomic_files.temporary_path(path, owner="f00d")
            == f"{folder}/.t2t_lite.lock.f00d.incomplete")


def test_two_owners_write_one_file_at_once_without_clashing(folder):
    """Two writers of the same file, interleaved (two processes recording one failed build):
    each writes its own temporary file, and the file is whole: the one that finished last."""
    path = f"{folder}/build.log"
    with atomic_files.atomic_write(path, owner="1") as first:
        first.write("first")
        with atomic_files.atomic_write(path, owner="2") as second:
            second.write("second")
        assert sorted(tf.io.gfile.listdir(folder)) == [".build.log.1.incomplete", "build.log"]
    assert tf.io.gfile.listdir(folder) == ["build.log"]
    with tf.io.gfile.GFile(path) as handle:
        assert handle.read() == "first"


def test_a_folder_appears_whole_and_replaces_the_old_one_only_when_complete(folder):
    path = f"{folder}/export"
    tf.io.gfile.makedirs(path)
    with tf.io.gfile.GFile(f"{path}/old.pb", "w") as handle:
        handle.write("old")
    with atomic_files.atomic_folder(path) as temporary:
        assert temporary == f"{folder}/.export.incomplete"
        tf.io.gfile.makedirs(f"{temporary}/variables")
        for name in ("saved_model.pb", "variables/variables.index"):
            with tf.io.gfile.GFile(f"{temporary}/{name}", "w") as handle:
                handle.write(name)
        assert tf.io.gfile.listdir(path) == ["old.pb"]
    assert tf.io.gfile.listdir(folder) == ["export"]
    assert sorted(name.rstrip("/") for name in tf.io.gfile.listdir(path)) == [
        "saved_model.pb", "variables"]
    with tf.io.gfile.GFile(f"{path}/variables/variables.index") as handle:
        assert handle.read() == "variables/variables.index"


def test_an_exception_leaves_no_folder(folder):
    with pytest.raises(KeyboardInterrupt):
        with atomic_files.atomic_folder(f"{folder}/export") as temporary:
            tf.io.gfile.makedirs(temporary)
            with tf.io.gfile.GFile(f"{temporary}/saved_model.pb", "w") as handle:
                handle.write("half")
            raise KeyboardInterrupt
    assert tf.io.gfile.listdir(folder) == []


def no_space(*args, **kwargs):
    raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")


def test_a_failed_rename_leaves_no_temporary(folder, monkeypatch):
    """On gs:// a rename is a copy, which can fail as a write does."""
    monkeypatch.setattr(tf.io.gfile, "rename", no_space)
    with pytest.raises(tf.errors.ResourceExhaustedError):
        with atomic_files.atomic_write(f"{folder}/vocab.model") as handle:
            handle.write("complete")
    assert tf.io.gfile.listdir(folder) == []


def test_a_failed_folder_replacement_keeps_the_old_folder(folder, monkeypatch):
    """The old folder waits aside until the new one is in place (a failed --overwrite export
    keeps the SavedModel it was to replace); on gs:// a rename is a copy, which can fail."""
    path = f"{folder}/export"
    tf.io.gfile.makedirs(path)
    with tf.io.gfile.GFile(f"{path}/saved_model.pb", "w") as handle:
        handle.write("old")
    rename = tf.io.gfile.rename

    def the_new_one_fails(source, target, overwrite=False):
        if atomic_files.INCOMPLETE_SUFFIX in source:
            no_space()
        return rename(source, target, overwrite)
    monkeypatch.setattr(tf.io.gfile, "rename", the_new_one_fails)
    with pytest.raises(tf.errors.ResourceExhaustedError):
        with atomic_files.atomic_folder(path) as temporary:
            tf.io.gfile.makedirs(temporary)
            with tf.io.gfile.GFile(f"{temporary}/saved_model.pb", "w") as handle:
                handle.write("new")
    assert tf.io.gfile.listdir(folder) == ["export"]
    with tf.io.gfile.GFile(f"{path}/saved_model.pb") as handle:
        assert handle.read() == "old"


def test_a_full_disk_leaves_no_temporary(small_filesystem):
    """TensorFlow reports a full disk at `write` when the data exceeds its buffer, else at
    `close`; either way the temporary file goes."""
    folder = small_filesystem(1)
    with pytest.raises(tf.errors.ResourceExhaustedError):
        with atomic_files.atomic_write(f"{folder}/big.bin", "wb") as handle:
            handle.write(bytes(2 << 20))
    with open(f"{folder}/filler", "wb") as handle:
        handle.write(bytes((1 << 20) - 4096))  # one page free
    with pytest.raises(tf.errors.ResourceExhaustedError):
        with atomic_files.atomic_write(f"{folder}/small.txt") as handle:
            handle.write("x" * 10_000)  # buffered: the error comes at close
    with pytest.raises(tf.errors.ResourceExhaustedError):
        with atomic_files.atomic_folder(f"{folder}/export") as temporary:
            tf.io.gfile.makedirs(temporary)
            with tf.io.gfile.GFile(f"{temporary}/saved_model.pb", "wb") as handle:
                handle.write(bytes(10_000))
    assert sorted(tf.io.gfile.listdir(folder)) == ["filler"]

