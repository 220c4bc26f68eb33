"""A training run killed with SIGKILL resumes where its last checkpoint left it and trains as the
run that went on, dropout on (transformer_tiny's 0.1): the same loss at every step after the
resume and the same weights at the end. (With batches accumulated into each update and on two
replicas: tests/training/test_exact_resume.py. A NaN loss, which stops training and keeps the
last good checkpoint: tests/training/test_refused_resume.py.)"""
import json
import re
import signal
import subprocess
import time

import numpy as np
import pytest

from t2t_lite import checkpoints

from program_runs import SMALL, joined, program_command, run, trainer_flags

HPARAMS = joined(SMALL, "learning_rate_warmup_steps=20")


def flags_of_a_run(data_dir, output_dir, steps):
    """t2t_lite-trainer's flags for `steps` steps of HPARAMS, a checkpoint every 10."""
    return trainer_flags(data_dir, output_dir, steps, HPARAMS, checkpoint_every=10)


def losses_by_step(output):
    return {int(step): float(loss)
            for step, loss in re.findall(r"step (\d+)/\d+ +loss ([\d.]+)", output)}


def recorded_checkpoints(output_dir):
    """The checkpoint state file (written after a checkpoint's files are complete)."""
    try:
        return (output_dir / "checkpoint").read_text()
    except OSError:
        return ""


def model_weights(checkpoint: str) -> dict:
    reader = checkpoints.reader(checkpoint)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if checkpoints.is_model_key(key)}


def test_resume_after_sigkill_matches_an_uninterrupted_run(data_dir, tmp_path):
    code, uninterrupted = run("trainer", *flags_of_a_run(data_dir, tmp_path / "straight", 40))
    assert code == 0, uninterrupted
    reference = losses_by_step(uninterrupted)
    # On a CPU the trainer's defaults are no XLA and length_bucketing "each" (xla_pays).
    description = json.loads((tmp_path / "straight" / "hparams.json").read_text())
    assert description["hparams"]["length_bucketing"] == "each" and "XLA off" in uninterrupted

    output_dir = tmp_path / "killed"
    process = subprocess.Popen(program_command("trainer",
                                               *flags_of_a_run(data_dir, output_dir, 40)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while "model.ckpt-20" not in recorded_checkpoints(output_dir):
        assert process.poll() is None and time.time() < deadline, "no checkpoint 20"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()

    assert (output_dir / "t2t_lite.lock").exists()  # the killed trainer could not release it
    code, resumed = run("trainer", *flags_of_a_run(data_dir, output_dir, 40))
    assert code == 0, resumed
    assert "taking over the lock" in resumed and f"pid {process.pid}" in resumed
    assert not (output_dir / "t2t_lite.lock").exists()  # released at the end
    start = int(re.search(r"resuming from \S+model\.ckpt-(\d+)", resumed).group(1))
    assert 20 <= start < 40 and f"from step {start} to 40" in resumed
    after = losses_by_step(resumed)
    assert min(after) == start + 1  # the step counter continues, it does not restart
    for step in range(start + 1, 41):
        assert after[step] == pytest.approx(reference[step], rel=1e-4, abs=1e-5), step
    expected = model_weights(str(tmp_path / "straight" / "model.ckpt-40"))
    weights = model_weights(str(output_dir / "model.ckpt-40"))
    assert weights.keys() == expected.keys() and expected
    for key in expected:
        np.testing.assert_allclose(weights[key], expected[key], rtol=1e-5, atol=1e-6,
                                   err_msg=key)
