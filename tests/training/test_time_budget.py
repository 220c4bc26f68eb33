"""A time budget (RunConfig.train_minutes) ends training after the update during which it runs
out, whatever train_steps says, with a checkpoint there as at the end of any run; the progress
lines count down to it. In a run of two worker processes both stop after the same update: the
one whose budget runs out first stops the other."""
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
import tensorflow as tf

from program_runs import TINY, hparams_of
from t2t_lite.training import summaries, trainer
from t2t_lite.training.schedules import learning_rate

TRAIN_STEPS = 100_000
BUDGET_SECONDS = 4.0


def latest_step(output_dir: str) -> int:
    return int(tf.train.latest_checkpoint(output_dir).rsplit("-", 1)[1])


def test_a_time_budget_ends_training_early_with_a_checkpoint(data_dir, tmp_path, monkeypatch):
    """Two batches accumulated into each update, so that the learning rate of each progress
    line is checked against the schedule's rate of that update in a whole run as well."""
    lines = []
    monkeypatch.setattr(summaries.logging, "info", lambda text, *args: lines.append(text % args))
    hparams = hparams_of(TINY, "optimizer_multistep_accumulate_steps=2")
    output_dir = str(tmp_path / "run")
    start = time.monotonic()
    trainer.train("algorithmic_copy", "transformer", hparams, data_dir, output_dir,
                  trainer.RunConfig(train_steps=TRAIN_STEPS, train_minutes=BUDGET_SECONDS / 60,
                                    eval_steps=0, log_every_steps=1,
                                    save_checkpoints_steps=TRAIN_STEPS))
    seconds = time.monotonic() - start
    step = latest_step(output_dir)
    assert 1 <= step < TRAIN_STEPS
    assert seconds < BUDGET_SECONDS + 60  # the building and the first step's tracing included
    assert any(re.search(r"from step 0 to 100000 .*; at most 0\.0666667 minutes\)$", line)
               for line in lines), lines
    progress = [line for line in lines if re.match(r"step \d+/\d+  loss", line)]
    assert len(progress) == step
    assert all(line.endswith(" left (time budget)") for line in progress), progress
    assert progress[-1].startswith(f"step {step}/{step} ")
    assert progress[-1].endswith("0m00s left (time budget)")
    shown = [re.search(r" lr (\S+) ", line)[1] for line in progress]
    assert shown == [f"{float(learning_rate(update, hparams)):.3g}"
                     for update in range(1, step + 1)]


def test_minutes_are_not_negative():
    with pytest.raises(ValueError, match="train_minutes=-1: expected minutes >= 0"):
        trainer.RunConfig(train_minutes=-1)


WORKER = textwrap.dedent("""
    import sys
    from absl import logging
    logging.set_verbosity(logging.INFO)
    from t2t_lite import registry
    from t2t_lite.training import distribution, trainer
    strategy = distribution.choose_strategy()
    data, out, hparams, seconds = sys.argv[1:5]
    hparams = registry.hparams("transformer_tiny").override_from_string(hparams)
    trainer.train("algorithmic_copy", "transformer", hparams, data, out,
                  trainer.RunConfig(train_steps=100000, train_minutes=float(seconds) / 60,
                                    eval_steps=0, log_every_steps=1, save_checkpoints_steps=100000),
                  strategy=strategy)
""")
# Worker 0's budget runs out during the first update, whatever the machine's speed; worker 1's
# would not in a day (nor its train_steps): it stops only because worker 0's has run out.
WORKER_BUDGET_SECONDS = [0.001, 86_400]


def test_two_workers_stop_after_the_same_update(data_dir, tmp_path, free_ports):
    """Without the stop of the other, worker 1 would go on to update 2 and wait in its
    all-reduce for worker 0, which has ended."""
    output_dir = str(tmp_path / "workers")
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    # Files, not pipes: a worker whose full pipe nobody reads yet (a line per update) would
    # stop, and the other wait for it in the next all-reduce.
    logs = [tmp_path / f"worker_{index}.log" for index in range(2)]
    workers = []
    for index, (log, seconds) in enumerate(zip(logs, WORKER_BUDGET_SECONDS)):
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        with open(log, "w") as handle:
            workers.append(subprocess.Popen(
                [sys.executable, "-c", WORKER, data_dir, output_dir, TINY, str(seconds)],
                env=env, stdout=handle, stderr=subprocess.STDOUT))
    try:
        for worker in workers:
            worker.wait(timeout=300)
    finally:
        for worker in workers:
            worker.kill()
    outputs = [log.read_text() for log in logs]
    last_steps = []
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output
        last_steps.append(re.findall(r"step (\d+)/(\d+)  loss", output)[-1])
    assert last_steps == [("1", "1")] * 2, last_steps
    assert latest_step(output_dir) == 1
    assert "the time budget of 1.66667e-05 minutes has run out" in outputs[0]
    assert "the time budget of 1440 minutes has run out" in outputs[1]  # told by worker 0
