"""A training run killed with SIGKILL resumes where its last checkpoint left it, with the same
loss an uninterrupted run has at that step; a NaN loss stops training and keeps the last good
checkpoint."""
import json
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf


HPARAMS = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
           "max_length=22,min_length_bucket=22,learning_rate_warmup_steps=20,"
           "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0")


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(3000, 100)


def trainer_command(data_dir, output_dir, steps, hparams=HPARAMS):
    return [sys.executable, "-m", "t2t_lite.bin.trainer", "--problem=algorithmic_copy",
            "--hparams_set=transformer_tiny", f"--hparams={hparams}", f"--data_dir={data_dir}",
            f"--output_dir={output_dir}", f"--train_steps={steps}", "--eval_every=1000",
            "--eval_steps=1", "--save_checkpoints_steps=10", "--log_every_steps=1"]


def losses_by_step(output):
    return {int(step): float(loss)
            for step, loss in re.findall(r"step (\d+)/\d+ +loss ([\d.]+)", output)}


def recorded_checkpoints(output_dir):
    """The checkpoint state file (written after a checkpoint's files are complete)."""
    try:
        return (output_dir / "checkpoint").read_text()
    except OSError:
        return ""


def run(command):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout + result.stderr


def test_resume_after_sigkill_matches_an_uninterrupted_run(data_dir, tmp_path):
    code, uninterrupted = run(trainer_command(data_dir, tmp_path / "straight", 40))
    assert code == 0, uninterrupted
    reference = losses_by_step(uninterrupted)
    # On a CPU the trainer's defaults are no XLA and length_bucketing "each" (xla_pays).
    description = json.loads((tmp_path / "straight" / "hparams.json").read_text())
    assert description["hparams"]["length_bucketing"] == "each" and "XLA off" in uninterrupted

    output_dir = tmp_path / "killed"
    process = subprocess.Popen(trainer_command(data_dir, output_dir, 40),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while "model.ckpt-20" not in recorded_checkpoints(output_dir):
        assert process.poll() is None and time.time() < deadline, "no checkpoint 20"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()

    assert (output_dir / "t2t_lite.lock").exists()  # the killed trainer could not release it
    code, resumed = run(trainer_command(data_dir, output_dir, 40))
    assert code == 0, resumed
    assert "taking over the lock" in resumed and f"pid {process.pid}" in resumed
    assert not (output_dir / "t2t_lite.lock").exists()  # released at the end
    start = int(re.search(r"resuming from \S+model\.ckpt-(\d+)", resumed).group(1))
    assert 20 <= start < 40 and f"from step {start} to 40" in resumed
    after = losses_by_step(resumed)
    assert min(after) == start + 1  # the step counter continues, it does not restart
    for step in range(start + 1, 41):
        assert after[step] == pytest.approx(reference[step], rel=1e-4, abs=1e-5), step


def test_a_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(data_dir, tmp_path):
    output_dir = tmp_path / "diverged"
    code, out = run(trainer_command(data_dir, output_dir, 10))
    assert code == 0, out
    code, out = run(trainer_command(data_dir, output_dir, 40,
                                    HPARAMS + ",learning_rate_constant=1e30"))
    assert code == 2, out
    assert "error: the training loss became NaN or infinite at step" in out
    assert "model.ckpt-10" in out.split("error:")[-1]
    latest = tf.train.latest_checkpoint(str(output_dir))
    assert latest.endswith("model.ckpt-10")
    reader = tf.train.load_checkpoint(latest)
    for key in reader.get_variable_to_shape_map():
        value = reader.get_tensor(key)
        if np.issubdtype(np.asarray(value).dtype, np.floating):
            assert np.all(np.isfinite(value)), key
