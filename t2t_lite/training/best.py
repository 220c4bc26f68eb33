"""The best evaluation of a run: its record by step, the best checkpoint kept in `O/best/`,
and early stopping (OpenNMT-tf's `early_stopping` and `export_on_best`, fairseq's
`--best-checkpoint-metric` and `--patience`, Marian's `--keep-best` and `--early-stopping`).

Three callbacks, after each evaluation (the epoch-end logs of loop.py) and the step, the last
two deciding from the record the first keeps:
RecordEvaluations adds the evaluation to the run's record (`O/evaluations.json`, by step);
KeepBest writes a checkpoint that beats the best so far to `O/best/` with `O/best/best.json`;
EarlyStopping stops training after `patience` evaluations in a row without an improvement of
at least `min_delta`. Writes come in that order, each atomic, and the trainer's checkpoint of
an evaluation's step after them (CheckpointSaver), so that a run resumed from a checkpoint
finds every evaluation up to its step recorded; the evaluations recorded after it are dropped
(the resumed run does them again, deterministically) and the best score and the count of
evaluations since it are those of the resumed step.
"""
import dataclasses
import json
import math

import keras
import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints
from t2t_lite.errors import FlagError, UserError
from t2t_lite.storage import atomic_files
from t2t_lite.training.loop import current_step

# metric: (the log name an evaluation gives it under, +1 when higher is better, -1 when lower)
METRICS = {"bleu": ("val_bleu", 1), "loss": ("val_loss", -1)}
BEST_FOLDER = "best"
BEST_RECORD = "best.json"
EVALUATIONS_RECORD = "evaluations.json"


class EvaluationSettingsError(FlagError):
    """Best-keeping or early stopping on a measure that no evaluation takes."""


class EvaluationRecordError(UserError, ValueError):
    """An O/evaluations.json or O/best/best.json that cannot be read."""


def monitored_metric(keep_best: str) -> str:
    """The metric best-keeping and early stopping follow: keep_best's, else the dev loss."""
    return keep_best or "loss"


def check_measured(config, metric_names) -> None:
    """Raises EvaluationSettingsError naming the flags when `config` keeps the best or stops
    early on a measure that no evaluation takes: `metric_names`, the log names the run's
    DevMetrics give (val_bleu: --eval_bleu_sentences > 0), and val_loss when config.eval_steps
    > 0."""
    if not (config.keep_best or config.early_stopping_patience):
        return
    metric = monitored_metric(config.keep_best)
    asked = " and ".join(
        ([f"--keep_best={config.keep_best}"] if config.keep_best else []) +
        ([f"--early_stopping_patience={config.early_stopping_patience}"]
         if config.early_stopping_patience else []))
    if metric == "bleu" and "val_bleu" not in metric_names:
        raise EvaluationSettingsError(f"{asked} follows the dev BLEU, which no evaluation "
                                      f"measures: set --eval_bleu_sentences > 0")
    if metric == "loss" and not config.eval_steps:
        raise EvaluationSettingsError(f"{asked} follows the dev loss, which no evaluation "
                                      f"measures with --eval_steps=0: set --eval_steps > 0"
                                      + ("" if config.keep_best else " (or --keep_best=bleu)"))


def check_kept_metric(output_dir: str, keep_best: str) -> None:
    """Raises EvaluationSettingsError when output_dir's O/best holds the best by another
    metric than `keep_best` asks for (a resume with another --keep_best): its checkpoint
    would stand as the best of a metric it was not chosen by."""
    if not keep_best:
        return
    record = _read_json(tf.io.gfile.join(best_folder(output_dir), BEST_RECORD))
    if record and record.get("metric") not in (None, keep_best):
        raise EvaluationSettingsError(
            f"--keep_best={keep_best}, but {best_folder(output_dir)} holds the best by dev "
            f"{record['metric']} (its {BEST_RECORD}): resume with --keep_best="
            f"{record['metric']}, or move that folder away to keep the best by {keep_best}")


@dataclasses.dataclass
class Evaluations:
    """A run's evaluations, {step: {log name: value}}, and what follows from them for `metric`
    ("bleu": higher is better, "loss": lower): the best (strictly better than every earlier
    one) and, for early stopping, the reference best (improved on by at least `min_delta`)
    with the count of evaluations since it."""
    metric: str
    min_delta: float = 0.0
    by_step: dict = dataclasses.field(default_factory=dict)

    @property
    def log_name(self) -> str:
        return METRICS[self.metric][0]

    def _gain(self, score: float, over: float) -> float:
        return (score - over) * METRICS[self.metric][1]

    def scores(self) -> list:
        """[(step, score)] in step order, for the evaluations that measured the metric."""
        return [(step, float(logs[self.log_name])) for step, logs in sorted(self.by_step.items())
                if self.log_name in logs and math.isfinite(float(logs[self.log_name]))]

    def add(self, step: int, logs: dict):
        self.by_step[step] = {name: float(value) for name, value in logs.items()
                              if name.startswith("val_")}

    def until(self, step: int) -> "Evaluations":
        """The evaluations at or before `step` (a resumed run's)."""
        return Evaluations(self.metric, self.min_delta,
                           {at: logs for at, logs in self.by_step.items() if at <= step})

    def best(self):
        """(step, score) of the best evaluation, the first of equals; None before any."""
        best = None
        for step, score in self.scores():
            if best is None or self._gain(score, best[1]) > 0:
                best = (step, score)
        return best

    def since_improvement(self):
        """(reference step, reference score, evaluations after it): the reference is the first
        evaluation, then each that improves on the reference before it by at least min_delta
        (Keras' EarlyStopping); with min_delta 0 it is the best. None before any."""
        reference, count = None, 0
        for step, score in self.scores():
            gain = None if reference is None else self._gain(score, reference[1])
            if reference is None or (gain > 0 and gain >= self.min_delta):
                reference, count = (step, score), 0
            else:
                count += 1
        return None if reference is None else (*reference, count)

    def as_list(self) -> list:
        return [{"step": step, **logs} for step, logs in sorted(self.by_step.items())]


def _read_json(path: str):
    """The object in the JSON file at `path`, None without one; EvaluationRecordError naming
    it when it is not an object whose "evaluations" each have a "step" number."""
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as handle:
            record = json.loads(handle.read())
        if not (isinstance(record, dict) and all(
                isinstance(entry, dict) and isinstance(entry.get("step"), int)
                for entry in record.get("evaluations", []))):
            raise ValueError("not a record of evaluations by step")
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise EvaluationRecordError(
            f"{path} cannot be read ({error}): it records the run's evaluations for "
            f"--keep_best and --early_stopping_patience; put back a copy, or remove it to "
            f"forget them") from None
    return record


def _write_json(path: str, value):
    with atomic_files.atomic_write(path) as handle:
        handle.write(json.dumps(value, indent=1) + "\n")


def evaluations_path(output_dir: str) -> str:
    return tf.io.gfile.join(output_dir, EVALUATIONS_RECORD)


def best_folder(output_dir: str) -> str:
    return tf.io.gfile.join(output_dir, BEST_FOLDER)


def recorded_evaluations(output_dir: str, metric: str, min_delta: float,
                         resumed_step: int) -> Evaluations:
    """The evaluations output_dir records up to `resumed_step` (the step of the checkpoint the
    run resumes from; those after it are done again): O/evaluations.json's."""
    evaluations = Evaluations(metric, min_delta)
    for entry in (_read_json(evaluations_path(output_dir)) or {}).get("evaluations", []):
        entry = dict(entry)
        evaluations.by_step[entry.pop("step")] = entry
    return evaluations.until(resumed_step)


class RecordEvaluations(keras.callbacks.Callback):
    """Reads each evaluation's logs and the step; writes the run's record of evaluations
    (O/evaluations.json, atomically) and the best score so far as `best_bleu` or `best_loss`
    under O/eval in TensorBoard. `evaluations`: the record as of the resumed step, which
    KeepBest and EarlyStopping read after it."""

    def __init__(self, output_dir: str, evaluations: Evaluations, eval_every: int,
                 train_steps: int):
        super().__init__()
        self.output_dir = output_dir
        self.evaluations = evaluations
        self.eval_every, self.train_steps = eval_every, train_steps
        self.writer = None  # opened at the first evaluation recorded

    def on_grid(self, step: int) -> bool:
        """Whether `step` is one an uninterrupted run evaluates at (every eval_every updates,
        and the last): an evaluation at another step (a time budget's stop) is not recorded,
        so that a run split into several is decided as the same run in one piece."""
        return step % self.eval_every == 0 or step == self.train_steps

    def lacks_evaluation(self, step: int) -> bool:
        """Whether the run resumes at an evaluation's step whose evaluation is not recorded
        (a signal stopped training there before it): the loop then evaluates first."""
        return self.on_grid(step) and step not in self.evaluations.by_step

    def on_epoch_end(self, epoch, logs=None):
        step = current_step(self.model)
        if not logs or self.evaluations.log_name not in logs or not self.on_grid(step):
            return
        self.evaluations.add(step, logs)
        _write_json(evaluations_path(self.output_dir),
                    {"metric": self.evaluations.metric, "evaluations": self.evaluations.as_list()})
        best = self.evaluations.best()
        if best is not None:
            if self.writer is None:
                self.writer = tf.summary.create_file_writer(
                    tf.io.gfile.join(self.output_dir, "eval"))
            with self.writer.as_default(step=step):
                tf.summary.scalar(f"best_{self.evaluations.metric}", best[1])
            self.writer.flush()


class KeepBest(keras.callbacks.Callback):
    """Reads the record after each evaluation; when this step's evaluation is the best so far,
    keeps the checkpoint: `checkpoint` (the trainer's tf.train.Checkpoint: weights, optimizer
    and run id) saved by a CheckpointManager of its own in O/best, whose `checkpoint` file
    names it (keep_checkpoint_max never touches the folder), then O/best/best.json (metric,
    step, score, checkpoint, evaluations so far). The best before it stays beside it
    (max_to_keep=2), so that a kill between the two writes loses neither: a resumed run whose
    record ends before O/best's latest puts the folder back to the record's best
    (on_train_begin). `check_before_save` (if any) is called before each save, which it may
    refuse by raising (the trainer's checks of its own saves).

    In a run of several workers the save is collective: every worker keeps the checkpoint when
    the chief (the one holding `evaluations`) decides to (TrainingSteps.on_any_worker), the
    others into their own `output_dir` (distribution.CheckpointDirectory), and only the chief
    writes best.json."""

    def __init__(self, output_dir: str, evaluations: Evaluations, checkpoint,
                 check_before_save=None):
        super().__init__()
        self.folder = best_folder(output_dir)
        self.evaluations = evaluations  # None on a worker other than the chief
        self.checkpoint = checkpoint
        self.manager = self._manager()
        self.check_before_save = check_before_save

    def _manager(self):
        return tf.train.CheckpointManager(self.checkpoint, self.folder, max_to_keep=2,
                                          checkpoint_name=checkpoints.CHECKPOINT_NAME)

    def _path(self, step: int) -> str:
        return tf.io.gfile.join(self.folder, f"{checkpoints.CHECKPOINT_NAME}-{step}")

    def _kept_step(self):
        """The step of the checkpoint O/best/checkpoint names, if its files are there."""
        kept = checkpoints.latest(self.folder)
        return None if kept is None else checkpoints.step_of(kept)

    def _record(self, step: int, score: float, path: str):
        _write_json(tf.io.gfile.join(self.folder, BEST_RECORD), {
            "metric": self.evaluations.metric, "step": step, "score": score,
            "checkpoint": path.rsplit("/", 1)[-1], "evaluations": self.evaluations.as_list()})

    def _keep(self, step: int, score: float) -> str:
        if self.check_before_save is not None:
            self.check_before_save()
        path = checkpoints.save(self.manager, step)
        if self.evaluations is not None:
            self._record(step, score, path)
        return path

    def _keeps(self, decided: bool) -> bool:
        """Whether the chief decided to keep a checkpoint now (every worker then saves)."""
        return bool(self.model.on_any_worker(decided))

    def _put_back(self, step: int, score: float, later: int):
        """O/best as the record of the resumed run says: its best of `step` named by the
        `checkpoint` file and best.json, the checkpoint of the `later` best (whose evaluation
        the resumed run does again) removed."""
        path = self._path(step)
        name = path.rsplit("/", 1)[-1]
        # TensorFlow's `checkpoint` file (a text CheckpointState), naming only the put-back one.
        with atomic_files.atomic_write(tf.io.gfile.join(self.folder, "checkpoint")) as handle:
            handle.write(f'model_checkpoint_path: "{name}"\n'
                         f'all_model_checkpoint_paths: "{name}"\n')
        atomic_files.remove_matching(self._path(later) + ".*")
        self.manager = self._manager()
        self._record(step, score, path)
        logging.info("%s: the best of step %d put back (the run resumes before step %d, whose "
                     "evaluation it does again)", self.folder, step, later)

    def on_train_begin(self, logs=None):
        """Makes O/best agree with the record of the resumed step: the restored weights kept
        when the best is the resumed step's own evaluation and O/best lacks it; the record's
        best put back when O/best holds a later one; best.json written again when a kill
        came between the checkpoint and it."""
        best = None if self.evaluations is None else self.evaluations.best()
        step, score = best if best is not None else (None, None)
        kept = self._kept_step() if best is not None else None
        resumed = current_step(self.model)
        if self._keeps(best is not None and kept != step and step == resumed):
            logging.info("keeping the best checkpoint of step %d again: %s", resumed,
                         self._keep(resumed, score))
            return
        if best is None:
            return
        record = _read_json(tf.io.gfile.join(self.folder, BEST_RECORD)) or {}
        if kept is not None and kept > resumed and tf.io.gfile.exists(
                self._path(step) + ".index"):
            self._put_back(step, score, kept)
        elif kept == step and record.get("step") != step:
            self._record(step, score, checkpoints.latest(self.folder))
        elif kept is not None and kept > resumed:
            logging.info("%s holds the best of step %d, after step %d this run resumes from: "
                         "its evaluations are done again", self.folder, kept, resumed)

    def on_epoch_end(self, epoch, logs=None):
        step = current_step(self.model)
        best = None if self.evaluations is None else self.evaluations.best()
        if not self._keeps(best is not None and best[0] == step
                           and step in self.evaluations.by_step):
            return
        path = self._keep(step, best[1] if best is not None else None)
        if best is not None:
            logging.info("step %d  new best dev %s %.4f: kept %s", step,
                         self.evaluations.metric, best[1], path)


class EarlyStopping(keras.callbacks.Callback):
    """Reads the record after each evaluation (and as training begins, for a resumed run);
    decides to stop when the last `patience` evaluations in a row brought no improvement of at
    least min_delta over the best (Evaluations.since_improvement), with one line saying so.
    Every worker of a run stops at the same step: the chief's decision (the one holding
    `evaluations`; None on the others) goes to all (TrainingSteps.on_any_worker). The trainer's
    CheckpointSaver then saves at the stop step, as at any end."""

    def __init__(self, evaluations, patience: int):
        super().__init__()
        self.evaluations = evaluations
        self.patience = patience
        self.stopped = False

    def _exhausted(self):
        """since_improvement() once `patience` evaluations came without improvement, else
        None."""
        if self.evaluations is None:
            return None
        state = self.evaluations.since_improvement()
        return state if state is not None and state[2] >= self.patience else None

    def _describe(self, state) -> str:
        best_step, best_score, count = state
        return (f"{count} evaluations in a row without an improvement of at least "
                f"{self.evaluations.min_delta:g} in dev {self.evaluations.metric} over the best, "
                f"{best_score:.4f} at step {best_step}")

    def on_train_begin(self, logs=None):
        state = self._exhausted()
        if self.model.on_any_worker(state is not None):
            step = current_step(self.model)
            if state is not None:
                logging.info("stopped early already at step %d: %s (--early_stopping_patience="
                             "%d); nothing to train", step, self._describe(state), self.patience)
            self.stopped = self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        state = self._exhausted()
        if self.model.on_any_worker(state is not None):
            step = current_step(self.model)
            if state is not None:
                logging.info("stopping early at step %d: %s", step, self._describe(state))
            self.stopped = self.model.stop_training = True
