"""The learning-rate picture, the progress lines' duration format, their token rates, their
time left and the learning rate they show."""
import glob
import re
import types

import keras
import matplotlib.image
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.hparams_lib import HParams
from t2t_lite.training import summaries, trainer
from t2t_lite.training.adam import Adam
from t2t_lite.training.summaries import format_duration, time_left, write_learning_rate_picture


def test_learning_rate_picture_is_a_png_with_a_curve(tmp_path):
    hparams = registry.hparams("transformer_base")
    path = write_learning_rate_picture(hparams, 20000, str(tmp_path / "learning_rate.png"))
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert np.std(image[..., :3]) > 0.01  # not blank
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learning_rate.png"]


def test_durations_read_like_clocks():
    assert format_duration(59) == "0m59s"
    assert format_duration(3 * 3600 + 61) == "3h01m01s"


class _Optimizer:
    def __init__(self):
        self.iterations = tf.Variable(0, dtype=tf.int64)


CONSTANT_RATE = HParams(learning_rate_schedule=("constant",), learning_rate_constant=1e-3)
LOGS = {"loss_sum": 1200.0, "target_tokens": 600.0, "real_tokens": 1000.0,
        "padding_fraction": 0.1}


def two_updates_in_two_seconds(monkeypatch, train_steps, budget=None) -> list:
    """The progress line a monitor logs after 2 updates of 300 target and 500 real tokens
    each, in 2 seconds."""
    clock = iter([100.0, 102.0])
    monkeypatch.setattr(summaries.time, "time", lambda: next(clock))
    lines = []
    monkeypatch.setattr(summaries.logging, "info", lambda text, *args: lines.append(text % args))
    monitor = summaries.TrainingMonitor(None, train_steps=train_steps, log_every_steps=2,
                                        hparams=CONSTANT_RATE, budget=budget)
    model = keras.Model()
    model.optimizer = _Optimizer()
    monitor.set_model(model)
    monitor.on_epoch_begin(0)
    model.optimizer.iterations.assign(2)
    monitor.on_train_batch_end(1, LOGS)
    return lines


def test_progress_line_counts_target_and_source_tokens_per_second(monkeypatch):
    """Source tokens are the real tokens of both features less the target's, over the
    window since the last line: 300 target and 200 source tokens a second."""
    lines = two_updates_in_two_seconds(monkeypatch, train_steps=10)
    assert re.search(r"step 2/10  loss 2\.0000  lr 0\.001  300 target tok/s  200 source tok/s  "
                     r"1\.00 steps/s  0m08s left$", lines[0]), lines


def test_time_left_follows_whichever_limit_ends_the_run():
    # 1 update a second at step 1000 of 100000: 99000 s (27.5 h) to the cap, a budget with
    # 3 minutes left ends the run first, at step 1000 + 180.
    assert time_left(1000, 100_000, 1.0, budget_seconds=180.0) == (180.0, 1180, True)
    assert time_left(1000, 100_000, 1.0) == (99_000.0, 100_000, False)  # no budget
    assert time_left(1000, 1100, 1.0, budget_seconds=180.0) == (100.0, 1100, False)
    # 2 updates a second with 10.2 s left: the update under way when it runs out is the last.
    assert time_left(1000, 100_000, 2.0, budget_seconds=10.2) == (10.2, 1021, True)
    assert time_left(1000, 100_000, 1.0, budget_seconds=-4.0) == (0.0, 1000, True)  # ran out


def test_progress_line_counts_down_to_the_time_budget(monkeypatch):
    """Minute 27 of a 30-minute budget with train_steps=100000: 3 minutes left, not 27 hours,
    and the step the budget ends the run at."""
    budget = types.SimpleNamespace(seconds_left=lambda now: 180.0)
    lines = two_updates_in_two_seconds(monkeypatch, train_steps=100_000, budget=budget)
    assert re.search(r"step 2/182  .*  1\.00 steps/s  3m00s left \(time budget\)$",
                     lines[0]), lines


def tensorboard_scalars(folder: str, tag: str) -> dict:
    """{step: value} of a scalar that tf.summary.scalar wrote into folder's event files."""
    values = {}
    for path in glob.glob(f"{folder}/events.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


# The rates of updates 1..6 of transformer_base's schedule with a warmup of 4 updates:
# 2 * min(1, s / 4) * max(s, 4)^-0.5 * 512^-0.5.
RATES = [0.0110485, 0.0220971, 0.0331456, 0.0441942, 0.0395285, 0.0360844]


def test_the_learning_rate_shown_is_the_one_applied_whatever_the_accumulation(
        monkeypatch, tmp_path):
    """Gradients of K = 2 batches accumulated into each update: the learning rate of the
    progress line and of TensorBoard is, update for update, the one with K = 1 and the one the
    optimizer applies. (It was the rate of update step / K: 0.0110 for update 2.)"""
    applied = []
    apply_adam = Adam.update_step

    def recording_update_step(self, gradient, variable, learning_rate):
        applied.append(float(learning_rate))
        return apply_adam(self, gradient, variable, learning_rate)

    monkeypatch.setattr(Adam, "update_step", recording_update_step)
    lines = []
    monkeypatch.setattr(summaries.logging, "info", lambda text, *args: lines.append(text % args))
    shown, written = {}, {}
    for batches_per_update in (1, 2):
        hparams = HParams(learning_rate_warmup_steps=4,
                          optimizer_multistep_accumulate_steps=batches_per_update)
        output_dir = str(tmp_path / f"accumulate_{batches_per_update}")
        optimizer = trainer.make_optimizer(hparams)
        variable = tf.Variable([1.0])
        optimizer.build([variable])
        model = keras.Model()
        model.optimizer = optimizer
        monitor = summaries.TrainingMonitor(output_dir, train_steps=len(RATES),
                                            log_every_steps=1, hparams=hparams)
        monitor.set_model(model)
        monitor.on_epoch_begin(0)
        applied.clear()
        lines.clear()
        for update in range(len(RATES)):
            for _ in range(batches_per_update):
                optimizer.apply([tf.constant([0.5])], [variable])
            monitor.on_train_batch_end(update, LOGS)
        monitor.on_epoch_end(0)
        assert applied == pytest.approx(RATES, rel=1e-5)
        shown[batches_per_update] = [re.search(r" lr (\S+) ", line)[1] for line in lines]
        written[batches_per_update] = tensorboard_scalars(f"{output_dir}/train", "learning_rate")
        assert written[batches_per_update] == pytest.approx(
            dict(enumerate(RATES, start=1)), rel=1e-5)
    assert shown[2] == shown[1] == ["0.011", "0.0221", "0.0331", "0.0442", "0.0395", "0.0361"]
