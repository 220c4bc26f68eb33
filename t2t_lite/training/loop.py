"""The training loop (OpenNMT-tf's Trainer): a Trainer holds one run, its TrainingSteps (step.py),
checkpoints and evaluator, and steps it as Keras' `fit` would.

Callbacks see the Keras model being trained as `self.model` (its `optimizer.iterations` is the
step, `stop_training` stops after this update) and fit's events: each update's end (logs: the
running sums since the last evaluation) and, every `eval_every` updates and at the last, an
epoch's end whose logs hold that evaluation (val_loss, val_accuracy, and each DevMetric's
measures such as val_bleu). What the run decides itself (a NaN loss, the time budget, a signal,
the checkpoints, the best checkpoint and early stopping) it decides here, the same on every
worker, around the callbacks, which need no order among themselves.
"""
import itertools
import math
import signal
import time

import keras
from absl import logging

from t2t_lite import checkpoints
from t2t_lite.errors import UserError
from t2t_lite.training import distribution
from t2t_lite.training.signals import STOPPING_SIGNALS
from t2t_lite.training.step import COUNTS


class DevMetric(keras.callbacks.Callback):
    """A measure of the model that each evaluation takes after the dev loss: the loop calls
    `measure(model, step)` (the Keras model being trained, the step it has reached), whose
    {log name: value} (e.g. {"val_bleu": 27.3}) go into that epoch's end logs. `names`: the log
    names it gives. Any callback with `measure` and `names` is one (decoding's DevBleu)."""

    names = ()

    def measure(self, model, step: int) -> dict:
        raise NotImplementedError


def is_dev_metric(callback) -> bool:
    """Whether the loop asks `callback` for measures at each evaluation (DevMetric's interface)."""
    return callable(getattr(callback, "measure", None)) and hasattr(callback, "names")


def current_step(steps) -> int:
    """The optimizer's updates so far (of a model or TrainingSteps). Read anew each time: under
    gradient accumulation Keras 3's `optimizer.iterations` is a new tensor at each read."""
    return int(steps.optimizer.iterations.numpy())


def token_weighted_logs(totals: dict) -> dict:
    """Keras-style logs from summed counts: loss and accuracy per real target token, and the
    padding share of all positions in the batches (both features)."""
    tokens = max(totals["target_tokens"], 1.0)
    return {"loss": totals["loss_sum"] / tokens, "accuracy": totals["correct_tokens"] / tokens,
            "loss_sum": totals["loss_sum"], "target_tokens": totals["target_tokens"],
            "real_tokens": totals["real_tokens"],
            "padding_fraction": 1.0 - totals["real_tokens"] / max(totals["padded_tokens"], 1.0)}


def add_counts(totals: dict, counts: dict) -> dict:
    return {name: totals[name] + float(counts[name]) for name in COUNTS}


def evaluate(steps, batches, num_batches: int) -> dict:
    """Token-weighted dev loss and accuracy over the first `num_batches` distributed batches
    (the same batches at every evaluation)."""
    totals = dict.fromkeys(COUNTS, 0.0)
    for batch in itertools.islice(iter(batches), num_batches):
        totals = add_counts(totals, steps.eval_step(batch))
    return token_weighted_logs(totals)


class NonFiniteLossError(UserError, FloatingPointError):
    """Training produced a NaN or infinite loss."""


class NonFiniteLossGuard:
    """Stops training at the first NaN or infinite loss (`check_loss`), and before a checkpoint
    of weights whose loss is not finite (`check_weights`, before each save): a step's loss is
    computed before its update, so an update that spoils the weights shows only in the next
    step's loss. The last good checkpoint in `output_dir` stays the latest."""

    def __init__(self, steps, output_dir: str):
        self.steps, self.output_dir = steps, output_dir

    def _stop(self, what: str):
        latest = checkpoints.latest(self.output_dir)
        raise NonFiniteLossError(
            f"{what} at step {current_step(self.steps)}; stopped. The last good checkpoint is "
            f"{latest or '(none yet)'}. Lower the learning rate (learning_rate_constant) or "
            f"lengthen the warmup, then run again.")

    def check_loss(self, logs: dict):
        if not math.isfinite(float(logs["loss_sum"])):
            self._stop("the training loss became NaN or infinite")

    def check_weights(self):
        """Raises NonFiniteLossError when the weights give a NaN or infinite loss on the batch
        last trained (one forward pass, under every worker's strategy as each save is)."""
        batch = self.steps.last_batch
        if batch is not None and not math.isfinite(
                float(self.steps.eval_step(batch)["loss_sum"])):
            self._stop("the loss after the update became NaN or infinite")


class TimeBudget:
    """The minutes of training from `start(minutes)` (0: no limit); training stops after the
    update during which they run out, on every worker (the Trainer's vote)."""

    def __init__(self):
        self.seconds, self.start_time = 0.0, None
        self.ran_out = False  # on some worker: training stops after this update

    def start(self, minutes: float):
        self.seconds, self.start_time = minutes * 60, time.time()

    def seconds_left(self, now: float = None) -> float:
        """Seconds until the budget runs out: inf without one, 0 once training stops for it
        (also when another worker's ran out first), negative when it ran out since the last
        update."""
        if not self.seconds:
            return math.inf
        if self.ran_out:
            return 0.0
        return self.seconds - ((time.time() if now is None else now) - self.start_time)


class CheckpointSaver:
    """Saves the run's checkpoints through `manager`, numbered by the step; `every_steps`: the
    interval. `check_before_save` (if any) is called before each save, which it may refuse by
    raising; `after_first_save` (if any) once the first checkpoint of this run is complete.
    `saved_step`: the step of the checkpoint training resumed from, not saved again."""

    def __init__(self, manager, every_steps: int, saved_step: int = None,
                 check_before_save=None, after_first_save=None):
        self.manager, self.every_steps, self.saved_step = manager, every_steps, saved_step
        self.check_before_save, self.after_first_save = check_before_save, after_first_save

    def save(self, step: int):
        if step == self.saved_step:
            return
        if self.check_before_save is not None:
            self.check_before_save()
        logging.info("saved %s", checkpoints.save(self.manager, step))
        self.saved_step = step
        if self.after_first_save is not None:
            self.after_first_save()
            self.after_first_save = None


class Trainer:
    """One run (OpenNMT-tf's Trainer(model, optimizer, checkpoint)): `steps` (TrainingSteps: the
    model, its optimizer and strategy), `saver` (CheckpointSaver), `guard` (NonFiniteLossGuard),
    the program's signal `watch` (signals.SignalWatch) and the `evaluator` of its best
    checkpoint and early stopping (best.Evaluator, or None). Call it to train (`__call__`);
    `budget` is its TimeBudget."""

    def __init__(self, steps, saver, guard, watch, evaluator=None):
        self.steps, self.model = steps, steps.model
        self.model.optimizer = steps.optimizer  # what callbacks read, as after compile()
        self.saver, self.guard, self.watch, self.evaluator = saver, guard, watch, evaluator
        self.budget = TimeBudget()
        self.stop_at_once = False  # a signal: stop without the epoch's evaluation
        self.config = self.callbacks = self.dev_batches = None
        self.metrics, self.evaluations = [], []  # this call's: {"step": N, "val_...": ...}

    def agreed(self, flags: list) -> list:
        """Each flag, held on any worker (distribution.agreed)."""
        return distribution.agreed(self.steps.strategy, flags)

    def __call__(self, train_batches, dev_batches, config, callbacks=(),
                 batches_per_update: int = 1) -> dict:
        """Steps through `train_batches` (distributed, repeated) until the optimizer has made
        `config.train_steps` updates or training stops; an epoch ends every `config.eval_every`
        updates (from step 0, so that a resumed run evaluates at the same steps) with an
        evaluation of `config.eval_steps` dev batches and the DevMetrics among `callbacks`,
        unless a signal stopped it. Saves at the end; returns the last logs."""
        self.config, self.dev_batches = config, dev_batches
        self.callbacks = keras.callbacks.CallbackList(list(callbacks), model=self.model)
        self.metrics = [callback for callback in callbacks if is_dev_metric(callback)]
        self.model.stop_training = False
        self.evaluations = []
        self._begin()
        iterator, logs = iter(train_batches), {}
        step = current_step(self.steps)
        while step < config.train_steps and not self.model.stop_training:
            logs = self._epoch(iterator, step // config.eval_every, batches_per_update)
            step = current_step(self.steps)
            if self.stop_at_once:
                break
        self.callbacks.on_train_end(logs)
        self.saver.save(current_step(self.steps))
        return logs

    def _begin(self):
        """Training begins: the budget's clock, the callbacks, the signal some worker kept until
        now, then the evaluator's state of the resumed step (stopped early already; an
        evaluation a signal left undone, done now)."""
        self.budget.start(self.config.train_minutes)
        self.callbacks.on_train_begin()
        self.watch.in_loop = True
        self._agree_on_stops(False)
        step, config = current_step(self.steps), self.config
        if self.evaluator is None:
            return
        if self.evaluator.begin(step):
            self.model.stop_training = True
        elif (not self.model.stop_training and step and not step % config.eval_every
              and step < config.train_steps and self.evaluator.needs_evaluation(step)):
            self._end_epoch(step // config.eval_every - 1, self._evaluation(), step)

    def _epoch(self, iterator, epoch: int, batches_per_update: int) -> dict:
        config = self.config
        epoch_end = min((epoch + 1) * config.eval_every, config.train_steps)
        self.callbacks.on_epoch_begin(epoch)
        totals, logs, batch_index = dict.fromkeys(COUNTS, 0.0), {}, 0
        step = current_step(self.steps)
        while step < epoch_end and not self.model.stop_training:
            self.callbacks.on_train_batch_begin(batch_index)
            for _ in range(batches_per_update):
                totals = add_counts(totals, self.steps.train_step(next(iterator)))
            logs = token_weighted_logs(totals)
            step = current_step(self.steps)
            self._after_update(step, logs)
            self.callbacks.on_train_batch_end(batch_index, logs)
            if not (step % self.saver.every_steps or self.model.stop_training
                    or step % config.eval_every == 0):
                self.saver.save(step)  # a save at an epoch's end waits for its evaluation
            batch_index += 1
        if self.stop_at_once:
            return logs
        logs = {**logs, **self._evaluation()}
        self._end_epoch(epoch, logs, step)
        return logs

    def _after_update(self, step: int, logs: dict):
        """The run's own decisions on an update, before the callbacks see it: a NaN loss
        raises; training stops at train_steps, at the end of the time budget or on a signal."""
        self.guard.check_loss(logs)
        if step >= self.config.train_steps:
            self.model.stop_training = True
        self._agree_on_stops(bool(self.budget.seconds) and self.budget.seconds_left() <= 0)

    def _agree_on_stops(self, out_of_time: bool):
        """One vote of the workers on the time budget and the signals any of them received."""
        received = self.watch.signal_number
        votes = self.agreed([out_of_time] + [received == number for number in STOPPING_SIGNALS])
        if votes[0]:
            self.budget.ran_out = self.model.stop_training = True
            logging.info("the time budget of %g minutes has run out", self.budget.seconds / 60)
        received = next((number for number, vote in zip(STOPPING_SIGNALS, votes[1:]) if vote),
                        None)
        if received is not None:
            self.watch.signal_number = received
            self.model.stop_training = self.stop_at_once = True

    def _evaluation(self) -> dict:
        """One evaluation's logs, Keras' names: val_loss and val_accuracy over `eval_steps` dev
        batches (none without dev batches or eval_steps), then each DevMetric's measures."""
        logs = {}
        if self.dev_batches is not None and self.config.eval_steps:
            dev_logs = evaluate(self.steps, self.dev_batches, self.config.eval_steps)
            logs = {"val_loss": dev_logs["loss"], "val_accuracy": dev_logs["accuracy"]}
        for metric in self.metrics:
            logs.update(metric.measure(self.model, current_step(self.steps)))
        return logs

    def _end_epoch(self, epoch: int, logs: dict, step: int):
        """The callbacks see the evaluation, then the evaluator records it, keeps the best and
        decides whether to stop, then the checkpoint of the step is saved if due: a run resumed
        from it finds its evaluation recorded."""
        self.callbacks.on_epoch_end(epoch, logs)
        measured = {name: value for name, value in logs.items() if name.startswith("val_")}
        if measured:
            self.evaluations.append({"step": step, **measured})
        if self.evaluator is not None and self.evaluator.evaluated(step, logs):
            self.model.stop_training = True
        if step % self.saver.every_steps == 0 or self.model.stop_training:
            self.saver.save(step)

    def signal_name(self):
        """The name of the signal that stopped training (SIGTERM, SIGINT), or None."""
        number = self.watch.signal_number
        return None if number is None else signal.Signals(number).name
