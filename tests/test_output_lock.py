"""OutputLock: one writer per folder, on any TensorFlow file system; a dead holder's lock is
taken over, a live one refuses the second writer by name."""
import json
import logging
import subprocess
import sys

import pytest
import tensorflow as tf

from t2t_lite.storage import output_lock
from t2t_lite.errors import UserError
from t2t_lite.storage.output_lock import OutputLock, OutputLockedError


def test_a_second_lock_is_refused_naming_the_holder(tmp_path):
    with OutputLock.of_folder(str(tmp_path)) as first:
        with pytest.raises(OutputLockedError) as refused:
            OutputLock.of_folder(str(tmp_path), f"train in --output_dir={tmp_path}").acquire()
        message = str(refused.value)
        assert f"cannot train in --output_dir={tmp_path}" in message
        assert f"pid {first.holder['pid']}" in message and first.holder["host"] in message
        assert first.holder["started"] in message
        assert isinstance(refused.value, UserError)
        with pytest.raises(OutputLockedError, match=f"pid {first.holder['pid']}"):
            OutputLock.of_folder(str(tmp_path)).refuse_if_held()
    assert not (tmp_path / output_lock.LOCK_NAME).exists()
    OutputLock.of_folder(str(tmp_path)).refuse_if_held()  # free again
    with OutputLock.of_folder(str(tmp_path)):
        pass


def test_the_lock_of_a_process_that_is_gone_is_taken_over(tmp_path, caplog):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    dead = OutputLock.of_folder(str(tmp_path)).holder | {"pid": int(ended.stdout)}
    (tmp_path / output_lock.LOCK_NAME).write_text(json.dumps(dead))
    OutputLock.of_folder(str(tmp_path)).refuse_if_held()  # a dead holder does not count
    with caplog.at_level(logging.WARNING), OutputLock.of_folder(str(tmp_path)) as taken:
        held = json.loads((tmp_path / output_lock.LOCK_NAME).read_text())
        assert held == taken.holder and held["token"] != dead["token"]  # the dead one replaced
    assert not (tmp_path / output_lock.LOCK_NAME).exists()  # and released as ours
    assert (f"taking over the lock {tmp_path / output_lock.LOCK_NAME} of" in caplog.text and
            f"no process has pid {dead['pid']} now" in caplog.text)


def test_a_reused_pid_does_not_keep_a_lock(tmp_path, caplog):
    """Our own pid, but another start time: the holder is gone and the number reused, which
    the warning says (the pid alone names a live process)."""
    holder = OutputLock.of_folder(str(tmp_path)).holder
    if holder["start_ticks"] is None:
        pytest.skip("no /proc on this system")
    (tmp_path / output_lock.LOCK_NAME).write_text(
        json.dumps(holder | {"start_ticks": holder["start_ticks"] - 1, "token": "old"}))
    with caplog.at_level(logging.WARNING), OutputLock.of_folder(str(tmp_path)) as taken:
        held = json.loads((tmp_path / output_lock.LOCK_NAME).read_text())
        assert held == taken.holder and held["token"] != "old"  # the old lock replaced
    assert not (tmp_path / output_lock.LOCK_NAME).exists()  # and released as ours
    assert (f"pid {holder['pid']} now belongs to another process, started at another time"
            in caplog.text)
    assert "no process has pid" not in caplog.text


def test_a_lock_from_another_host_is_refused_and_says_what_to_delete(tmp_path):
    other = OutputLock.of_folder(str(tmp_path)).holder | {"host": "elsewhere", "pid": 1}
    (tmp_path / output_lock.LOCK_NAME).write_text(json.dumps(other))
    with pytest.raises(OutputLockedError, match="host elsewhere.*delete the lock file"):
        OutputLock.of_folder(str(tmp_path)).acquire()


def test_the_lock_works_on_tensorflows_in_memory_file_system():
    folder = "ram://output_lock_test/run"
    tf.io.gfile.makedirs(folder)
    with OutputLock.of_folder(folder):
        assert tf.io.gfile.exists(f"{folder}/{output_lock.LOCK_NAME}")
        with pytest.raises(OutputLockedError):
            OutputLock.of_folder(folder).acquire()
    assert not tf.io.gfile.exists(f"{folder}/{output_lock.LOCK_NAME}")


def test_a_reused_pid_of_another_user_does_not_keep_a_lock(tmp_path, monkeypatch, caplog):
    """The pid now belongs to another user's process (kill answers PermissionError, as it does
    to a program that is not root): its start time, readable by all, tells it is not the
    holder."""
    if output_lock._process_start_ticks(1) is None:
        pytest.skip("no /proc on this system")
    holder = OutputLock.of_folder(str(tmp_path)).holder | {
        "pid": 1, "start_ticks": output_lock._process_start_ticks(1) + 1, "token": "old"}
    (tmp_path / output_lock.LOCK_NAME).write_text(json.dumps(holder))

    def kill(pid, number):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(output_lock.os, "kill", kill)
    with caplog.at_level(logging.WARNING), OutputLock.of_folder(str(tmp_path)) as taken:
        held = json.loads((tmp_path / output_lock.LOCK_NAME).read_text())
        assert held == taken.holder and held["token"] != "old"
    assert "pid 1 now belongs to another process" in caplog.text


def test_a_live_process_of_another_user_keeps_its_lock(tmp_path, monkeypatch):
    """The same pid and start time, as another user: the holder runs, and the lock holds."""
    if output_lock._process_start_ticks(1) is None:
        pytest.skip("no /proc on this system")
    holder = OutputLock.of_folder(str(tmp_path)).holder | {
        "pid": 1, "start_ticks": output_lock._process_start_ticks(1), "token": "other"}
    (tmp_path / output_lock.LOCK_NAME).write_text(json.dumps(holder))

    def kill(pid, number):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(output_lock.os, "kill", kill)
    with pytest.raises(OutputLockedError, match="pid 1"):
        OutputLock.of_folder(str(tmp_path)).acquire()
