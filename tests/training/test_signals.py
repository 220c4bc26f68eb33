"""SIGTERM and SIGINT stop the trainer after the update under way: a checkpoint at the step
reached, its lock released, one line saying so and exit status 143 or 130; the same command
resumes from that step. A second signal while the checkpoint is saved stops at once and leaves
the last complete checkpoint the latest. Of two worker processes, both stop after the same
update when one receives the signal."""
import json
import os
import re
import signal
import subprocess

import keras
import pytest
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management

from t2t_lite.training import trainer

from program_runs import SMALL, hparams_of, program_command, run, trainer_flags


def test_a_signal_saves_a_checkpoint_releases_the_lock_and_the_same_command_resumes(
        data_dir, tmp_path):
    """Ctrl-C (SIGINT) mid-training; SIGTERM mid-training is the worker tests' below, and
    both signals before training began give their own statuses."""
    number, status = signal.SIGINT, 130
    output_dir = tmp_path / "run"
    flags = trainer_flags(data_dir, output_dir, 100_000, checkpoint_every=1000)
    process = subprocess.Popen(program_command("trainer", *flags),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # Until the first progress line: training is under way.
    before = lines_until(process.stderr, r"step \d+/100000  loss")
    assert process.poll() is None, "".join(before)
    process.send_signal(number)
    try:
        out = "".join(before) + process.communicate(timeout=300)[1]
    finally:
        process.kill()  # when it did not stop
    assert process.returncode == status, out
    assert "Traceback" not in out, out
    name = signal.Signals(number).name
    stopped = [line for line in out.splitlines() if line.startswith("stopped by")]
    assert len(stopped) == 1, out
    match = re.fullmatch(rf"stopped by {name} after step (\d+): saved {output_dir}/model\.ckpt-"
                         rf"(\d+); the same command resumes from it", stopped[0])
    assert match and match[1] == match[2], stopped
    step = int(match[1])
    assert tf.train.latest_checkpoint(str(output_dir)) == f"{output_dir}/model.ckpt-{step}"
    assert not (output_dir / "t2t_lite.lock").exists()

    code, resumed = run("trainer", *trainer_flags(data_dir, output_dir, step + 1,
                                                  checkpoint_every=1000))
    assert code == 0, resumed
    assert f"resuming from {output_dir}/model.ckpt-{step}" in resumed
    assert f"from step {step} to {step + 1}" in resumed


class SignalAt(keras.callbacks.Callback):
    """Sends this process SIGTERM after update `step`."""

    def __init__(self, step):
        super().__init__()
        self.step = step
        self.sent = False

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_second_signal_during_the_save_leaves_the_last_complete_checkpoint(
        data_dir, tmp_path, monkeypatch):
    """The second SIGTERM arrives when the new checkpoint's files are written and the
    `checkpoint` file that would name it is not yet."""
    hparams = hparams_of(SMALL)
    output_dir = tmp_path / "run"
    config = trainer.RunConfig(train_steps=1, eval_steps=0, save_checkpoints_steps=1000)
    keras.backend.clear_session()  # both runs name their variables as a new process does
    trainer.train("algorithmic_copy", "transformer", hparams, data_dir, str(output_dir), config)

    first = SignalAt(step=3)
    record_state = checkpoint_management.update_checkpoint_state_internal
    handler = signal.getsignal(signal.SIGTERM)

    def second_signal_then_record(*args, **kwargs):
        if first.sent:
            os.kill(os.getpid(), signal.SIGTERM)
        return record_state(*args, **kwargs)

    monkeypatch.setattr(checkpoint_management, "update_checkpoint_state_internal",
                        second_signal_then_record)
    keras.backend.clear_session()  # the variables' names of a new process
    with pytest.raises(trainer.StoppedBySignal) as stopped:
        trainer.train("algorithmic_copy", "transformer", hparams, data_dir, str(output_dir),
                      trainer.RunConfig(train_steps=100, eval_steps=0,
                                        save_checkpoints_steps=1000), [first])
    assert stopped.value.exit_status == 143
    assert str(stopped.value) == (
        f"stopped by SIGTERM again while stopping: the latest checkpoint is "
        f"{output_dir}/model.ckpt-1; the same command resumes from it")
    assert sorted(path.name for path in output_dir.iterdir() if path.is_file()) == [
        "checkpoint", "hparams.json", "learning_rate.png", "model.ckpt-1.data-00000-of-00001",
        "model.ckpt-1.index"]
    assert signal.getsignal(signal.SIGTERM) is handler  # the trainer's is removed


def test_a_signal_to_one_worker_stops_both_after_the_same_update(data_dir, tmp_path,
                                                                 free_ports):
    output_dir = tmp_path / "workers"
    statuses, outputs = sigterm_to_worker_1(data_dir, output_dir, tmp_path, free_ports,
                                            r"step \d+/100000  loss")
    assert statuses == [143, 143], outputs
    stopped = [[line for line in output.splitlines() if line.startswith("stopped by")]
               for output in outputs]
    assert stopped[0] == stopped[1] and len(stopped[0]) == 1, outputs
    step = int(re.fullmatch(rf"stopped by SIGTERM after step (\d+): saved {output_dir}/model"
                            rf"\.ckpt-\1; the same command resumes from it", stopped[0][0])[1])
    assert tf.train.latest_checkpoint(str(output_dir)) == f"{output_dir}/model.ckpt-{step}"
    assert not (output_dir / "t2t_lite.lock").exists()


def lines_until(stream, pattern: str) -> list:
    """The lines read from `stream` up to and with the first that matches `pattern`."""
    lines = []
    for line in stream:
        lines.append(line)
        if re.search(pattern, line):
            break
    return lines


# The trainer's line before its checks of the data, after the strategy's creation: the moment
# MultiWorkerMirroredStrategy's own SIGTERM handler had taken the place of Python's.
CHECKING_DATA = r"checking the data of algorithmic_copy in "


@pytest.mark.parametrize("number, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_before_training_began_is_one_line_and_writes_nothing(data_dir, tmp_path,
                                                                        number, status):
    output_dir = tmp_path / "run"
    process = subprocess.Popen(program_command("trainer", *trainer_flags(data_dir, output_dir)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        before = lines_until(process.stderr, CHECKING_DATA)
        process.send_signal(number)
        out = "".join(before) + process.communicate(timeout=300)[1]
    finally:
        process.kill()
    assert process.returncode == status, out
    assert "Traceback" not in out, out
    name = signal.Signals(number).name
    assert [line for line in out.splitlines() if line.startswith("stopped by")] == [
        f"stopped by {name} before training began: nothing written; the same command starts "
        f"again"], out
    assert not output_dir.exists()


def test_a_sigterm_to_one_worker_before_training_began_stops_both(data_dir, tmp_path,
                                                                  free_ports):
    output_dir = tmp_path / "workers"
    statuses, outputs = sigterm_to_worker_1(data_dir, output_dir, tmp_path, free_ports,
                                            CHECKING_DATA)
    assert statuses == [143, 143], outputs
    assert all("Traceback" not in output for output in outputs), outputs
    stopped = [[line for line in output.splitlines() if line.startswith("stopped by")]
               for output in outputs]
    # Both before the first update, at step 0, which the checkpoint there holds.
    assert stopped[0] == stopped[1] == [
        f"stopped by SIGTERM at step 0, before any update: {output_dir}/model.ckpt-0 holds "
        f"it; the same command resumes from it"], outputs
    assert not (output_dir / "t2t_lite.lock").exists()


def sigterm_to_worker_1(data_dir, output_dir, tmp_path, free_ports, pattern: str) -> tuple:
    """(exit statuses, outputs) of two trainer workers on 127.0.0.1 training the copy task in
    output_dir, SIGTERM sent to worker 1 once it has printed a line matching `pattern`."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    flags = trainer_flags(data_dir, output_dir, 100_000, checkpoint_every=1000)
    chief_log = tmp_path / "worker_0.log"
    workers = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        # The chief's lines to a file: a full pipe that nobody reads would stop it.
        with open(chief_log if index == 0 else os.devnull, "w") as log:
            workers.append(subprocess.Popen(
                program_command("trainer", *flags), env=env,
                stdout=subprocess.DEVNULL, stderr=log if index == 0 else subprocess.PIPE,
                text=True))
    try:
        other = workers[1]
        before = lines_until(other.stderr, pattern)
        other.send_signal(signal.SIGTERM)
        outputs = [None, "".join(before) + other.communicate(timeout=300)[1]]
        statuses = [worker.wait(timeout=300) for worker in workers]
        outputs[0] = chief_log.read_text()
    finally:
        for worker in workers:
            worker.kill()
    return statuses, outputs
