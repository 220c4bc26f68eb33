"""benchmarks/training_run.py's reading of t2t_lite-trainer's progress lines, the clock of
train_speed.py: the windows between the lines' timestamps, the tokens counted in each, and the
medians over the windows after the warm-up (harness.window_medians, the peers' rule too)."""
import datetime
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import harness  # noqa: E402
import training_run  # noqa: E402

# The trainer's stderr as absl writes it, with TensorFlow's own lines and a run over New Year.
LOG = """\
I0000 00:00:1795708410.320858    7667 port.cc:153] oneDNN custom operations are on.
I1231 23:59:40.000000 140684244073344 trainer.py:250] training transformer on \
translate_multi30k_deen from step 0 to 6 (7618560 parameters, 1 replicas, XLA off)
I1231 23:59:50.000000 140684244073344 summaries.py:62] step 2/6  loss 8.3931  lr 3.49e-07  \
150 target tok/s  0.20 steps/s  0m20s left
I0101 00:00:00.000000 140684244073344 summaries.py:62] step 4/6  loss 8.2000  lr 6.99e-07  \
400 target tok/s  0.20 steps/s  0m10s left
W0101 00:00:01.000000 140684244073344 something.py:1] a warning between the lines
I0101 00:00:05.000000 140684244073344 summaries.py:62] step 6/6  loss 8.1000  lr 1.05e-06  \
1000 target tok/s  0.40 steps/s  0m00s left
I0101 00:00:06.000000 140684244073344 trainer.py:117] saved /tmp/out/model.ckpt-6
"""


def seconds(year, month, day, hour, minute, second):
    return datetime.datetime(year, month, day, hour, minute, second).timestamp()


def updates():
    """Six updates of 1,000 target and 1,100 source tokens (the first 1,500), the shapes of
    updates 1, 2 and 5 new."""
    shapes = [[8, 30, 28], [16, 20, 18], [8, 30, 28], [16, 20, 18], [4, 60, 58], [4, 60, 58]]
    return [{"source": 1100, "target": 1500 if i == 0 else 1000, "positions": 2500,
             "shapes": [shape]} for i, shape in enumerate(shapes)]


def test_parse_trainer_log():
    log = training_run.parse_trainer_log(LOG, 2025)
    assert (log["start"], log["first_step"], log["parameters"]) == (
        seconds(2025, 12, 31, 23, 59, 40), 0, 7618560)
    assert [line["step"] for line in log["lines"]] == [2, 4, 6]
    assert [line["seconds"] for line in log["lines"]] == [
        seconds(2025, 12, 31, 23, 59, 50), seconds(2026, 1, 1, 0, 0, 0),
        seconds(2026, 1, 1, 0, 0, 5)]  # the year goes on after New Year
    first = log["lines"][0]
    assert (first["loss"], first["learning_rate"], first["logged_target_tokens_per_s"],
            first["logged_source_tokens_per_s"], first["logged_steps_per_s"]) == (
        8.3931, 3.49e-07, 150.0, None, 0.2)


def test_a_source_rate_on_the_line_is_read():
    line = ("I0101 00:00:05.000000 1 summaries.py:62] step 6/6  loss 8.1  lr 1e-06  1000 target "
            "tok/s  1040 source tok/s  0.40 steps/s  0m00s left\n")
    log = training_run.parse_trainer_log(LOG.splitlines(True)[1] + line, 2025)
    assert log["lines"][0]["logged_source_tokens_per_s"] == 1040.0


def test_windows_between_the_lines():
    windows = training_run.trainer_windows(training_run.parse_trainer_log(LOG, 2025), updates())
    assert [(w["first_step"], w["step"], w["seconds"]) for w in windows] == [
        (1, 2, 10.0), (3, 4, 10.0), (5, 6, 5.0)]
    assert [w["target_tokens"] for w in windows] == [2500, 2000, 2000]
    assert [w["source_tokens"] for w in windows] == [2200, 2200, 2200]
    assert [w["new_shapes"] for w in windows] == [2, 0, 1]
    assert [w["target_tokens_per_s"] for w in windows] == [250.0, 200.0, 400.0]
    assert [w["steps_per_s"] for w in windows] == [0.2, 0.2, 0.4]
    # the trainer's own rate against the count: 150 / 250, 400 / 200, 1000 / 400
    assert [round(w["count_check"], 6) for w in windows] == [-0.4, 1.0, 1.5]


def test_throughput_after_the_warm_up():
    windows = training_run.trainer_windows(training_run.parse_trainer_log(LOG, 2025), updates())
    rates = harness.window_medians(windows, skip_steps=2)  # the window of updates 1-2 is out
    assert rates == {"target_tokens_per_s": 300.0, "source_tokens_per_s": 330.0,
                     "steps_per_s": pytest.approx(0.3), "target_tokens_per_step": 1000.0,
                     "throughput_windows": 2}
    # a window that starts at or before skip_steps is left out whole
    assert harness.window_medians(windows, skip_steps=3)["throughput_windows"] == 1
    left_out = harness.window_medians(windows, 2, lambda w: w["new_shapes"] > 0)
    assert (left_out["target_tokens_per_s"], left_out["throughput_windows"]) == (200.0, 1)
    assert harness.window_medians(windows, skip_steps=6) == {
        "target_tokens_per_s": None, "source_tokens_per_s": None, "steps_per_s": None,
        "target_tokens_per_step": None, "throughput_windows": 0}


def test_a_log_without_the_training_line_is_refused():
    log = training_run.parse_trainer_log("".join(LOG.splitlines(True)[2:]), 2025)
    with pytest.raises(ValueError, match="training"):
        training_run.trainer_windows(log, updates())


def test_more_updates_logged_than_counted_is_refused():
    log = training_run.parse_trainer_log(LOG, 2025)
    with pytest.raises(ValueError, match="only 4 updates"):
        training_run.trainer_windows(log, updates()[:4])


def test_update_tokens_counts_real_tokens_and_shapes():
    import tensorflow as tf
    batches = [{"inputs": tf.constant([[5, 6, 1, 0], [7, 1, 0, 0]]),
                "targets": tf.constant([[8, 1, 0], [9, 9, 1]])},
               {"inputs": tf.constant([[5, 1]]), "targets": tf.constant([[1, 0, 0, 0]])},
               {"inputs": tf.constant([[5, 1]]), "targets": tf.constant([[1]])}]
    assert training_run.update_tokens(batches, 1, batches_per_update=2) == [
        {"source": 7, "target": 6, "positions": 8 + 6 + 2 + 4,
         "shapes": [[2, 4, 3], [1, 2, 4]]}]
    assert training_run.update_tokens(batches, 3)[2] == {
        "source": 2, "target": 1, "positions": 3, "shapes": [[1, 2, 1]]}
