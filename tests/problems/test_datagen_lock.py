"""One datagen per --data_dir: datagen holds t2t_lite-datagen.lock there while it writes, a second
one is refused at once naming the first (host, pid, start), and the data is not read meanwhile.
Without the lock two datagens removed and renamed each other's files (NotFoundError,
DataLossError, final-named shards without a manifest). The lock is not the trainer's
t2t_lite.lock, and is never taken for a shard."""
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from t2t_lite import registry
from t2t_lite.data.problem import DATAGEN_LOCK_NAME, datagen_output
from t2t_lite.storage.output_lock import OutputLock, OutputLockedError

from program_runs import error_lines, program_command


def datagen_command(data_dir, tmp_dir) -> list:
    return program_command("datagen", "--problem=algorithmic_copy", f"--data_dir={data_dir}",
                           f"--tmp_dir={tmp_dir}")


def small_copy_problem():
    problem = registry.problem("algorithmic_copy")
    problem.num_samples = {"train": 300, "dev": 30, "test": 5}
    return problem


def test_a_second_datagen_is_refused_naming_the_first_whose_data_verifies(tmp_path):
    """The first datagen is paused (SIGSTOP) as soon as it writes in --data_dir, so that it is
    still running, whatever the machine's speed, when the second starts."""
    data_dir, tmp_dir = str(tmp_path / "data"), str(tmp_path / "tmp")
    first = subprocess.Popen(datagen_command(data_dir, tmp_dir), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        # Its lock (without the lock: its first shard's temporary file).
        while not (os.path.isdir(data_dir) and any(
                name == DATAGEN_LOCK_NAME or "-train-" in name for name in os.listdir(data_dir))):
            assert first.poll() is None, first.communicate()[0]
            assert time.monotonic() < deadline, "the first datagen wrote nothing in 300 s"
            time.sleep(0.02)
        first.send_signal(signal.SIGSTOP)
        try:
            second = subprocess.run(datagen_command(data_dir, tmp_dir), capture_output=True,
                                    text=True, timeout=300)
        finally:
            first.send_signal(signal.SIGCONT)
        first_output = first.communicate(timeout=600)[0]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    assert second.returncode == 2, second.stdout + second.stderr
    assert "Traceback" not in second.stderr
    errors = error_lines(second.stderr)
    lock = os.path.join(data_dir, DATAGEN_LOCK_NAME)
    assert len(errors) == 1 and re.fullmatch(
        re.escape(f"error: cannot generate data in --data_dir={data_dir}: datagen.py (host "
                  f"{socket.gethostname()}, pid {first.pid}, started ") + r"[0-9T:+-]+" +
        re.escape(f") is writing there (lock {lock}). Wait for it to finish or stop it"),
        errors[0]), errors
    assert first.returncode == 0, first_output
    registry.problem("algorithmic_copy").check_data(data_dir, ["train", "dev"])
    assert not os.path.exists(lock)
    assert not [name for name in os.listdir(data_dir) if name.endswith(".incomplete")]


def test_the_data_is_not_read_while_a_datagen_writes_it(tmp_path):
    problem, data_dir = small_copy_problem(), str(tmp_path)
    problem.generate_data(data_dir, data_dir)
    with datagen_output(data_dir).lock():
        with pytest.raises(OutputLockedError, match=re.escape(
                f"cannot read the data in {data_dir}: ") + ".* is writing there"):
            problem.check_data(data_dir)
    problem.check_data(data_dir)


def test_the_trainers_lock_and_a_dead_datagens_lock_in_data_dir_are_no_obstacle(tmp_path):
    """--output_dir and --data_dir the same folder: the trainer's t2t_lite.lock does not stop
    datagen. A datagen lock left by a process that ended (kill -9) is neither taken for a stray
    shard nor a refusal; the next datagen takes it over."""
    problem, data_dir = small_copy_problem(), str(tmp_path)
    with OutputLock.of_folder(data_dir, f"train in --output_dir={data_dir}"):
        problem.generate_data(data_dir, data_dir)
        problem.check_data(data_dir)
    ended = subprocess.Popen(["true"])
    ended.wait()
    lock = os.path.join(data_dir, DATAGEN_LOCK_NAME)
    with open(lock, "w") as handle:
        json.dump({"program": "datagen.py", "host": socket.gethostname(), "pid": ended.pid,
                   "started": "2024-01-01T00:00:00+00:00", "token": "gone"}, handle)
    problem.check_data(data_dir)
    assert problem.generate_data(data_dir, data_dir) == {}  # every split kept
    assert not os.path.exists(lock)
