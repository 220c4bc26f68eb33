"""The best evaluation of a run: its record by step, the best checkpoint kept in `O/best/`,
and early stopping (OpenNMT-tf's `early_stopping` and `export_on_best`, fairseq's
`--best-checkpoint-metric` and `--patience`, Marian's `--keep-best` and `--early-stopping`).

The Evaluator, after each evaluation, in this order: adds it to the run's record
(`O/evaluations.json`, by step), writes a checkpoint that beats the best so far to `O/best/`
with `O/best/best.json`, and stops training after `patience` evaluations in a row without an
improvement of at least `min_delta`; each write is atomic, and the trainer's checkpoint of the
step comes after them, so that a run resumed from a checkpoint finds every evaluation up to its
step recorded (those after it are dropped and done again, deterministically).
"""
import dataclasses
import json
import math

import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints
from t2t_lite.errors import FlagError, UserError
from t2t_lite.storage import atomic_files

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


class Evaluator:
    """A run's evaluations and what they decide (OpenNMT-tf's Evaluator): each evaluation's
    logs recorded by step (O/evaluations.json; the best so far as `best_bleu` or `best_loss`
    under O/eval), the checkpoint of the best kept in O/best with O/best/best.json
    (`is_best`), and early stopping (`should_stop`). The chief holds the record and decides;
    each decision is agreed by all workers in one vote (`agreed`), since saving a checkpoint
    and stopping are collective.

    O/best's CheckpointManager keeps the best before it beside it (max_to_keep=2), so that a
    kill between the checkpoint and best.json loses neither; a resumed run whose record ends
    before O/best's latest puts the folder back to the record's best (`begin`).

    Args:
        config: the RunConfig (keep_best, early_stopping_patience, eval_every, train_steps).
        evaluations: the record as of the resumed step (recorded_evaluations); None on a
            worker other than the chief, which follows the chief's decisions.
        saver: the trainer's CheckpointSaver: its checkpoint, the folder O/best goes in
            (output_dir, or another worker's own) and its checks before a save.
        agreed: flags -> whether each holds on any worker (distribution.agreed).
    """

    def __init__(self, config, evaluations, saver, agreed):
        self.keep_best, self.patience = bool(config.keep_best), config.early_stopping_patience
        self.eval_every, self.train_steps = config.eval_every, config.train_steps
        self.evaluations, self.saver, self.agreed = evaluations, saver, agreed
        self.output_dir = saver.manager.directory
        self.folder = best_folder(self.output_dir)
        self.manager = self._manager() if self.keep_best else None
        self.writer = None  # opened at the first evaluation recorded

    def _manager(self):
        return tf.train.CheckpointManager(self.saver.manager.checkpoint, self.folder,
                                          max_to_keep=2,
                                          checkpoint_name=checkpoints.CHECKPOINT_NAME)

    def _best(self):
        return None if self.evaluations is None else self.evaluations.best()

    def is_best(self, step: int) -> bool:
        """Whether the evaluation of `step` is the best so far (the chief's record)."""
        best = self._best()
        return best is not None and best[0] == step and step in self.evaluations.by_step

    def should_stop(self):
        """since_improvement() once `patience` evaluations came without an improvement, else
        None (also without early stopping, and on a worker other than the chief)."""
        if self.evaluations is None or not self.patience:
            return None
        state = self.evaluations.since_improvement()
        return state if state is not None and state[2] >= self.patience else None

    def on_grid(self, step: int) -> bool:
        """Whether `step` is one an uninterrupted run evaluates at (every eval_every updates,
        and the last): an evaluation at another step (a time budget's stop) is not recorded,
        so that a run split into several is decided as the same run in one piece."""
        return step % self.eval_every == 0 or step == self.train_steps

    def needs_evaluation(self, step: int) -> bool:
        """Whether the run resumes at an evaluation's step whose evaluation is not recorded (a
        signal stopped training there before it): the trainer evaluates it first."""
        return self.agreed([self.evaluations is not None and self.on_grid(step)
                            and step not in self.evaluations.by_step])[0]

    def begin(self, step: int) -> bool:
        """Makes O/best agree with the record of the resumed `step` (the restored weights kept
        when the best is that step's own evaluation and O/best lacks it; the record's best put
        back when O/best holds a later one); True when the run stopped early already."""
        best = self._best()
        kept = self._kept_step() if best is not None else None
        keep_again, stop = self.agreed([self.keep_best and best is not None and kept != best[0]
                                        and best[0] == step, self.should_stop() is not None])
        if keep_again:
            logging.info("keeping the best checkpoint of step %d again: %s", step,
                         self._keep(step, best[1] if best else None))
        elif self.keep_best and best is not None:
            self._agree_with_record(best, kept, step)
        if stop and self.evaluations is not None:
            logging.info("stopped early already at step %d: %s (--early_stopping_patience=%d); "
                         "nothing to train", step, self._describe(self.should_stop()),
                         self.patience)
        return stop

    def evaluated(self, step: int, logs: dict) -> bool:
        """Records the evaluation of `step` (`logs`), keeps its checkpoint if it is the best;
        returns whether training stops early here."""
        self._record(step, logs)
        keep, stop = self.agreed([self.keep_best and self.is_best(step),
                                  self.should_stop() is not None])
        if keep:
            best = self._best()
            path = self._keep(step, best[1] if best is not None else None)
            if best is not None:
                logging.info("step %d  new best dev %s %.4f: kept %s", step,
                             self.evaluations.metric, best[1], path)
        if stop and self.evaluations is not None:
            logging.info("stopping early at step %d: %s", step,
                         self._describe(self.should_stop()))
        return stop

    def _describe(self, state) -> str:
        best_step, best_score, count = state
        return (f"{count} evaluations in a row without an improvement of at least "
                f"{self.evaluations.min_delta:g} in dev {self.evaluations.metric} over the best, "
                f"{best_score:.4f} at step {best_step}")

    def _record(self, step: int, logs: dict):
        """The evaluation added to O/evaluations.json (atomically) and the best so far to
        TensorBoard, on the chief, when it measured the metric at a step of the grid."""
        if (self.evaluations is None or not logs or self.evaluations.log_name not in logs
                or not self.on_grid(step)):
            return
        self.evaluations.add(step, logs)
        _write_json(evaluations_path(self.output_dir), {
            "metric": self.evaluations.metric, "evaluations": self.evaluations.as_list()})
        best = self.evaluations.best()
        if best is not None:
            if self.writer is None:
                self.writer = tf.summary.create_file_writer(
                    tf.io.gfile.join(self.output_dir, "eval"))
            with self.writer.as_default(step=step):
                tf.summary.scalar(f"best_{self.evaluations.metric}", best[1])
            self.writer.flush()

    def _path(self, step: int) -> str:
        return tf.io.gfile.join(self.folder, f"{checkpoints.CHECKPOINT_NAME}-{step}")

    def _kept_step(self):
        """The step of the checkpoint O/best/checkpoint names, if its files are there."""
        kept = checkpoints.latest(self.folder)
        return None if kept is None else checkpoints.step_of(kept)

    def _write_best(self, step: int, score: float, path: str):
        _write_json(tf.io.gfile.join(self.folder, BEST_RECORD), {
            "metric": self.evaluations.metric, "step": step, "score": score,
            "checkpoint": path.rsplit("/", 1)[-1], "evaluations": self.evaluations.as_list()})

    def _keep(self, step: int, score: float) -> str:
        """Saves the checkpoint of `step` in O/best (every worker: the save is collective),
        then best.json (the chief); returns its path."""
        if self.saver.check_before_save is not None:
            self.saver.check_before_save()
        path = checkpoints.save(self.manager, step)
        if self.evaluations is not None:
            self._write_best(step, score, path)
        return path

    def _agree_with_record(self, best: tuple, kept, resumed: int):
        """O/best as the record of the `resumed` step says, on the chief: its `best` (step,
        score) put back when O/best keeps a `kept` step after it, or best.json written again
        when a kill came between the checkpoint and it."""
        step, score = best
        record = _read_json(tf.io.gfile.join(self.folder, BEST_RECORD)) or {}
        if kept is not None and kept > resumed and tf.io.gfile.exists(
                self._path(step) + ".index"):
            self._put_back(step, score, kept)
        elif kept == step and record.get("step") != step:
            self._write_best(step, score, checkpoints.latest(self.folder))
        elif kept is not None and kept > resumed:
            logging.info("%s holds the best of step %d, after step %d this run resumes from: "
                         "its evaluations are done again", self.folder, kept, resumed)

    def _put_back(self, step: int, score: float, later: int):
        """O/best's best of `step` named by the `checkpoint` file and best.json, the checkpoint
        of the `later` best (whose evaluation the resumed run does again) removed."""
        path = self._path(step)
        name = path.rsplit("/", 1)[-1]
        # TensorFlow's `checkpoint` file (a text CheckpointState), naming only the put-back one.
        with atomic_files.atomic_write(tf.io.gfile.join(self.folder, "checkpoint")) as handle:
            handle.write(f'model_checkpoint_path: "{name}"\n'
                         f'all_model_checkpoint_paths: "{name}"\n')
        atomic_files.remove_matching(self._path(later) + ".*")
        self.manager = self._manager()
        self._write_best(step, score, path)
        logging.info("%s: the best of step %d put back (the run resumes before step %d, whose "
                     "evaluation it does again)", self.folder, step, later)
