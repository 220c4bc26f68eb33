"""The training loop as Keras' `fit` carries it, over TrainingSteps (step.py): callbacks see
each update's end (`on_train_batch_end`, with the running sums since the last evaluation) and,
every `eval_every` updates and at the last, an epoch's end whose logs hold that evaluation's
measures (val_loss and val_accuracy from the dev batches; val_bleu and the like from each
DevMetric), from which callbacks decide (keep a checkpoint, stop).

What a callback reads: the logs it is given, `self.model.optimizer.iterations` (the step:
updates made, whatever the number of batches accumulated into each) and the TrainingSteps as
`self.model`; what it decides: `self.model.stop_training` (stop after this update, with the
epoch's evaluation) and `self.model.stop_at_once` (a signal: without it).
"""
import itertools

import keras

from t2t_lite.training.step import COUNTS


class DevMetric(keras.callbacks.Callback):
    """A measure of the model that each evaluation takes after the dev loss: the loop calls
    `measure(model, step)` (the Keras model being trained, the step it has reached), whose
    {log name: value} (e.g. {"val_bleu": 27.3}) go into that epoch's end logs for the callbacks
    that decide from them. `names`: the log names it gives. Any callback with `measure` and
    `names` is one (decoding's DevBleu, which may not import training: tests/test_module_map.py)."""

    names = ()

    def measure(self, model, step: int) -> dict:
        raise NotImplementedError


def is_dev_metric(callback) -> bool:
    """Whether the loop asks `callback` for measures at each evaluation (DevMetric's interface)."""
    return callable(getattr(callback, "measure", None)) and hasattr(callback, "names")


def current_step(steps) -> int:
    """The optimizer's updates so far. Read anew each time: under gradient accumulation Keras 3's
    `optimizer.iterations` is a new tensor (batches // accumulation steps) at each read."""
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


def evaluation_logs(steps, dev_batches, eval_steps: int, metrics: list) -> dict:
    """One evaluation's logs, Keras' names: val_loss and val_accuracy over `eval_steps` dev
    batches (none without dev batches or eval_steps), then each DevMetric's measures."""
    logs = {}
    if dev_batches is not None and eval_steps:
        dev_logs = evaluate(steps, dev_batches, eval_steps)
        logs = {"val_loss": dev_logs["loss"], "val_accuracy": dev_logs["accuracy"]}
    for metric in metrics:
        logs.update(metric.measure(steps.model, current_step(steps)))
    return logs


def _evaluation_lacking(steps, callbacks: list, step: int, config) -> bool:
    """Whether the run resumes at the end of an epoch whose evaluation a callback lacks
    (`lacks_evaluation(step)`: a signal stopped the run it resumes there, before the
    evaluation), decided on every worker alike (the evaluation is collective)."""
    if steps.stop_training or not step or step % config.eval_every or step >= config.train_steps:
        return False
    lacking = any(callback.lacks_evaluation(step) for callback in callbacks
                  if callable(getattr(callback, "lacks_evaluation", None)))
    return bool(steps.on_any_worker(lacking))


def run_loop(steps, train_batches, dev_batches, config, callbacks: list,
             batches_per_update: int = 1):
    """Steps through `train_batches` (distributed, repeated) until the optimizer has made
    `config.train_steps` updates or a callback stops training; an epoch ends every
    `config.eval_every` updates (counted from step 0, so that a resumed run evaluates at the
    same steps) with an evaluation (evaluation_logs of `config.eval_steps` dev batches and the
    DevMetrics among `callbacks`), except when a callback stopped training at once; a run
    resumed at such an end evaluates it first when a callback lacks it (`lacks_evaluation`).
    Returns the last logs."""
    callback_list = keras.callbacks.CallbackList(list(callbacks), model=steps)
    metrics = [callback for callback in callbacks if is_dev_metric(callback)]
    step = current_step(steps)
    logs = {}
    callback_list.on_train_begin()
    if _evaluation_lacking(steps, callbacks, step, config):
        callback_list.on_epoch_end(step // config.eval_every - 1,
                                   evaluation_logs(steps, dev_batches, config.eval_steps,
                                                   metrics))
    iterator = iter(train_batches)
    while step < config.train_steps and not steps.stop_training:
        epoch = step // config.eval_every
        epoch_end = min((epoch + 1) * config.eval_every, config.train_steps)
        callback_list.on_epoch_begin(epoch)
        totals = dict.fromkeys(COUNTS, 0.0)
        batch_index = 0
        while step < epoch_end and not steps.stop_training:
            callback_list.on_train_batch_begin(batch_index)
            for _ in range(batches_per_update):
                totals = add_counts(totals, steps.train_step(next(iterator)))
            logs = token_weighted_logs(totals)
            callback_list.on_train_batch_end(batch_index, logs)
            batch_index += 1
            step = current_step(steps)
        if steps.stop_at_once:
            break
        logs = {**logs, **evaluation_logs(steps, dev_batches, config.eval_steps, metrics)}
        callback_list.on_epoch_end(epoch, logs)
    callback_list.on_train_end(logs)
    return logs
