"""A training run killed with SIGKILL resumes where its last checkpoint left it, with the same
loss an uninterrupted run has at that step. (A NaN loss, which stops training and keeps the last
good checkpoint: tests/training/test_refused_resume.py.)"""
import json
import re
import signal
import subprocess
import time

import pytest

from program_runs import NO_DROPOUT, SMALL, joined, program_command, run, trainer_flags

HPARAMS = joined(SMALL, "learning_rate_warmup_steps=20", NO_DROPOUT)


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
