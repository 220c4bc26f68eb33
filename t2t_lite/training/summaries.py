"""What a user watches during training: progress lines, TensorBoard scalars and the picture
of the learning-rate schedule.

Scalars are written with `tf.summary.scalar` (Keras 3's TensorBoard callback writes tensor
summaries that some TensorBoard tools cannot read) to `output_dir/train` and `output_dir/eval`.
"""
import math
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from t2t_lite.training.schedules import learning_rate
from t2t_lite.visualize import plt, save_figure  # pyplot with the file-only Agg backend


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


def time_left(step: int, train_steps: int, steps_per_second: float,
              budget_seconds: float = math.inf):
    """(seconds left, the step the run ends at, whether the time budget ends it) at
    `steps_per_second`: the train_steps cap or, when it comes first, the end of a time budget
    with `budget_seconds` left (inf: none), after which the update under way is the last."""
    steps_per_second = max(steps_per_second, 1e-9)
    to_cap = (train_steps - step) / steps_per_second
    if budget_seconds >= to_cap:
        return to_cap, train_steps, False
    budget_seconds = max(budget_seconds, 0.0)
    last_step = min(step + math.ceil(budget_seconds * steps_per_second), train_steps)
    return budget_seconds, last_step, True


class TrainingMonitor(keras.callbacks.Callback):
    """Every `log_every_steps` updates and after the last: a line with step (of the step the
    run ends at), loss, learning rate, target and source tokens per second (real tokens, end of
    sentence included, padding not), steps per second and time left (to train_steps or to the
    end of the time budget, whichever comes first), and the same numbers (with the padding
    share of the batches since the epoch began) in TensorBoard. After each evaluation: dev
    loss and dev token accuracy.

    The learning rate shown is the one the optimizer applied in the last update: the
    schedule's rate of update `step` (schedules.learning_rate), whatever the number of batches
    accumulated into one update. `budget`: the trainer's TimeBudget (its seconds_left), or
    None for none."""

    def __init__(self, output_dir, train_steps: int, log_every_steps: int, hparams,
                 budget=None):
        super().__init__()
        self.train_steps = train_steps
        self.log_every_steps = log_every_steps
        self.hparams = hparams
        self.budget = budget
        self.output_dir = output_dir  # None (not the chief): progress lines only
        self._writers = {}  # opened at their first scalar: a run that trains nothing writes none
        self._last = None  # (step, time, loss_sum, target tokens, real tokens) at the last line

    def _writer(self, name: str):
        """The summary writer of output_dir/name ("train", "eval"), created at first use."""
        if name not in self._writers:
            self._writers[name] = (
                tf.summary.create_file_writer(tf.io.gfile.join(self.output_dir, name))
                if self.output_dir else tf.summary.create_noop_writer())
        return self._writers[name]

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        # The running sums restart with every Keras epoch.
        self._last = (self._step(), time.time(), 0.0, 0.0, 0.0)

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        last_step, last_time, last_loss_sum, last_tokens, last_real = self._last
        if step == last_step or (step % self.log_every_steps and step < self.train_steps
                                 and not self.model.stop_training):
            return
        now = time.time()
        loss_sum, tokens = float(logs["loss_sum"]), float(logs["target_tokens"])
        real = float(logs.get("real_tokens", tokens))
        steps, seconds = step - last_step, max(now - last_time, 1e-9)
        loss = (loss_sum - last_loss_sum) / max(tokens - last_tokens, 1.0)
        rate = float(learning_rate(step, self.hparams))
        tokens_per_second = (tokens - last_tokens) / seconds
        source_per_second = (real - last_real - (tokens - last_tokens)) / seconds
        steps_per_second = steps / seconds
        seconds_left, end_step, budgeted = time_left(
            step, self.train_steps, steps_per_second,
            self.budget.seconds_left(now) if self.budget else math.inf)
        logging.info("step %d/%d  loss %.4f  lr %.3g  %.0f target tok/s  %.0f source tok/s  "
                     "%.2f steps/s  %s left%s", step, end_step, loss, rate,
                     tokens_per_second, source_per_second, steps_per_second,
                     format_duration(seconds_left), " (time budget)" if budgeted else "")
        with self._writer("train").as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("learning_rate", rate)
            tf.summary.scalar("target_tokens_per_second", tokens_per_second)
            tf.summary.scalar("source_tokens_per_second", source_per_second)
            tf.summary.scalar("steps_per_second", steps_per_second)
            tf.summary.scalar("padding_fraction", float(logs["padding_fraction"]))
        self._last = (step, now, loss_sum, tokens, real)

    def on_epoch_end(self, epoch, logs=None):
        if logs and "val_loss" in logs:
            step = self._step()
            logging.info("step %d  dev loss %.4f  dev token accuracy %.4f", step,
                         logs["val_loss"], logs["val_accuracy"])
            with self._writer("eval").as_default(step=step):
                tf.summary.scalar("loss", logs["val_loss"])
                tf.summary.scalar("accuracy", logs["val_accuracy"])
        for writer in self._writers.values():
            writer.flush()


def write_learning_rate_picture(hparams, train_steps: int, path: str) -> str:
    """A PNG of the hparams' learning rate over updates 1..train_steps (paper §5.3; t2t's
    schedules), with the warmup's end and the peak marked: the picture to check before a long
    run that the warmup fits it."""
    steps = np.unique(np.linspace(1, max(train_steps, 2), 500).astype(np.int64))
    rates = learning_rate(tf.constant(steps, tf.float32), hparams).numpy()
    warmup = hparams.learning_rate_warmup_steps
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(steps, rates)
    if warmup <= steps[-1]:
        axes.axvline(warmup, color="gray", linestyle=":", label=f"warmup {warmup:,} steps")
    peak = int(np.argmax(rates))
    axes.plot(steps[peak], rates[peak], "o", label=f"peak {rates[peak]:.3g} at step "
                                                   f"{steps[peak]:,}")
    axes.set(xlabel="update", ylabel="learning rate",
             title=" * ".join(hparams.learning_rate_schedule))
    axes.legend()
    figure.tight_layout()
    save_figure(figure, path)
    return path
