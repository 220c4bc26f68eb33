"""Training a registered model on a problem's data into an output folder (`train`; the Python
API `train_problem`, t2t_lite.train): the checks before anything is written (the data, the
run recorded there, a warm start's source), the model and Adam (paper §5.3) built under a
tf.distribute strategy with the latest checkpoint restored, and the loop (loop.Trainer).
docs/training.md tells what a run does on a resume, a signal, a full disk or changed data.
"""
import contextlib
import dataclasses
import functools
import math
import signal
import threading

import keras
import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints, registry
from t2t_lite.storage import outputs
from t2t_lite.errors import FlagError, UserError, unknown_name_message
from t2t_lite.hparams_lib import OPTIMIZATION_HPARAMS
from t2t_lite.models.building import build_model
from t2t_lite.storage.run_description import (description_path, differing_values, record_training,
                                      saved_run)
from t2t_lite.storage.run_description import checked_vocabulary, listed_changes
from t2t_lite.storage.storage_errors import reported_full_storage
from t2t_lite.training import distribution, warm_start
from t2t_lite.training.adam import Adam
from t2t_lite.training import best
from t2t_lite.training.data_watch import DataWatch
from t2t_lite.training.loop import (CheckpointSaver, NonFiniteLossGuard, Trainer,
                                    current_step, is_dev_metric)
from t2t_lite.training.schedules import LearningRateSchedule
from t2t_lite.training.signals import Interrupted, SignalWatch, StoppedBySignal
from t2t_lite.training.step import TrainingSteps
from t2t_lite.training.summaries import TrainingMonitor, write_learning_rate_picture


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How long to train and how often to evaluate, save and report (t2t's trainer flags)."""
    train_steps: int = 250_000
    # Minutes of training in this run, on the clock from the start of the training loop (after
    # the data checks, the model's building and the restore; evaluations count): training
    # stops after the update during which they run out, and saves a checkpoint there as at
    # train_steps. 0: no limit. The progress line counts down to whichever limit comes first.
    train_minutes: float = 0.0
    eval_steps: int = 100               # dev batches per evaluation
    eval_every: int = 1000              # updates between evaluations (t2t's local_eval_frequency)
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 20
    log_every_steps: int = 100
    jit_compile: bool = None            # XLA; None: where it pays (xla_pays)
    seed: int = 1                       # weights, dropout and the order of training batches
    devices: tuple = ()                 # MirroredStrategy devices; () = every GPU, else CPU
    allow_unverified_data: bool = False  # train on shards without a datagen manifest
    # After each evaluation, a checkpoint that beats the best so far goes to output_dir/best
    # (best.Evaluator): "bleu" (the dev BLEU, higher), "loss" (the dev loss, lower), "": none.
    keep_best: str = ""
    # Stop after this many evaluations in a row without an improvement of at least
    # early_stopping_min_delta in keep_best's metric (the dev loss when keep_best is ""); 0: never.
    early_stopping_patience: int = 0
    early_stopping_min_delta: float = 0.0
    # A run, folder or checkpoint whose model weights a new run starts from (warm_start.py).
    warm_start_from: str = None

    def __post_init__(self):
        """A FlagError (t2t_lite-trainer's flags by name) for a value no setting can take."""
        if not 0 <= self.train_minutes < math.inf:
            raise FlagError(f"train_minutes={self.train_minutes!r}: expected minutes >= 0, "
                            f"a finite number (0: no limit)")
        if self.keep_best not in ("", *best.METRICS):
            raise FlagError(f"keep_best={self.keep_best!r}: expected one of "
                            f"{['', *best.METRICS]}")
        if not self.early_stopping_patience >= 0:
            raise FlagError(f"early_stopping_patience={self.early_stopping_patience!r}: "
                            f"expected evaluations >= 0 (0: no early stopping)")
        if not 0 <= self.early_stopping_min_delta < math.inf:
            raise FlagError(f"early_stopping_min_delta={self.early_stopping_min_delta!r}: "
                            f"expected a difference >= 0, a finite number")


def xla_pays(strategy) -> bool:
    """XLA for the training step where it makes it faster: on GPUs and TPUs. On a CPU it
    compiles every batch shape (10-15 s each for transformer_small) and then trains no faster
    (benchmarks/README.md, train_speed)."""
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # the default strategy: TensorFlow places ops on a GPU if there is one
        devices = [device.name for device in tf.config.list_logical_devices()]
    return any("CPU" not in device.upper() for device in devices)


def length_bucketing_for(hparams, jit_compile: bool) -> str:
    """hparams.length_bucketing, with "auto" resolved: "each" (less padding, many batch shapes)
    without XLA, "longer" (one shape per bucket) under XLA."""
    if hparams.length_bucketing != "auto":
        return hparams.length_bucketing
    return "longer" if jit_compile else "each"


def cpu_multiplies_in_bfloat16(cpu_flags=None) -> bool:
    """Whether the CPU has bfloat16 matmul instructions (AVX512_BF16, or AMX), which oneDNN
    uses for bfloat16 products: `cpu_flags` (names as /proc/cpuinfo's "flags" line gives them),
    else that line read here (False where there is none)."""
    if cpu_flags is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
                flags_line = next((line for line in cpuinfo if line.startswith("flags")), "")
        except OSError:
            flags_line = ""
        cpu_flags = flags_line.partition(":")[2].split()
    return bool({"avx512_bf16", "amx_bf16"} & set(cpu_flags))


def mixed_precision_for(hparams, strategy) -> str:
    """hparams.mixed_precision, with "auto" resolved: bfloat16 when every device of the step is
    a CPU with bfloat16 matmul instructions (cpu_multiplies_in_bfloat16), else float32.
    On a Zen 4 EPYC transformer_small then trains 1.26-1.35 times as fast; its test BLEU at
    1,500 updates was within 0.3 of float32's (docs/benchmarks.md); float32 stays the choice
    on GPUs (where t2t made mixed precision the user's choice) and on CPUs without them."""
    if hparams.mixed_precision != "auto":
        return hparams.mixed_precision
    on_cpus = not xla_pays(strategy)  # no GPU or TPU among the step's devices
    return "bfloat16" if on_cpus and cpu_multiplies_in_bfloat16() else "float32"


# The hparams a resumed run may change (NonFiniteLossError advises a lower learning rate for
# the same output_dir); any other difference is another run.
CHANGEABLE_ON_RESUME = OPTIMIZATION_HPARAMS


class ResumeError(UserError):
    """A rerun in an output_dir that holds another run than the one requested."""


def resumable_hparams(output_dir: str, problem_name: str, model_name: str, hparams):
    """The hparams to train with in output_dir: `hparams` once the run recorded there
    (hparams.json), if any, is known to be the one requested, with a requested "auto"
    length_bucketing or mixed_precision taking the recorded choice (a plain rerun continues
    the same batches whichever --jit_compile it runs with, in the same dtype on any CPU). A
    ResumeError names every value that differs other than CHANGEABLE_ON_RESUME, before anything
    is written."""
    recorded = saved_run(output_dir)
    if not recorded:
        return hparams
    for name in ("length_bucketing", "mixed_precision"):
        if getattr(hparams, name) == "auto":
            hparams = hparams.replace(**{name: getattr(recorded["hparams"], name)})
    changes = differing_values(recorded, problem_name, model_name, hparams)
    refused = {name: values for name, values in changes.items()
               if name not in CHANGEABLE_ON_RESUME}
    path = description_path(output_dir)
    if refused:
        raise ResumeError(
            f"--output_dir={output_dir} holds another run than the one requested: "
            f"{listed_changes(refused, path)}. To train this one, choose a new --output_dir; to "
            f"resume that one, run with its problem, model and hparams (see {path})")
    if changes:
        logging.warning("resuming with other training settings: %s", listed_changes(changes, path))
    return hparams


def make_optimizer(hparams):
    """Adam (paper §5.3; training.adam: Keras's, one op per update) with t2t's betas and
    epsilon and the hparams' schedule; with optimizer_multistep_accumulate_steps = K > 1,
    Keras' gradient accumulation averages the gradients of K batches into one update
    (`optimizer.iterations` counts updates); dynamic loss scaling around it for float16."""
    accumulate = hparams.optimizer_multistep_accumulate_steps
    optimizer = Adam(
        learning_rate=LearningRateSchedule(hparams),
        beta_1=hparams.optimizer_adam_beta1,
        beta_2=hparams.optimizer_adam_beta2,
        epsilon=hparams.optimizer_adam_epsilon,
        gradient_accumulation_steps=accumulate if accumulate > 1 else None,
        name="adam")  # not auto-named ("adam_1"): its slots' checkpoint keys start with it
    if hparams.mixed_precision == "float16":
        # float16 gradients underflow without it; bfloat16 has float32's range.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


# Seconds the first update may take before a line says what it waits for.
FIRST_UPDATE_PATIENCE_SECONDS = 30.0


class FirstUpdateWait(keras.callbacks.Callback):
    """One line when the first update of a run has not finished after `seconds` (default
    FIRST_UPDATE_PATIENCE_SECONDS), saying what it waits for: the input pipeline filling the
    first batch, TensorFlow tracing the step, and XLA compiling it where XLA is on."""

    def __init__(self, batch_size: int, replicas: int, jit_compile: bool,
                 seconds: float = None):
        super().__init__()
        self.batch_size = batch_size
        self.replicas = replicas
        self.jit_compile = jit_compile
        self.seconds = FIRST_UPDATE_PATIENCE_SECONDS if seconds is None else seconds
        self.timer = None

    def _say(self):
        shares = f" x {self.replicas} replicas" if self.replicas > 1 else ""
        logging.info("the first update has not finished after %g s: it waits for the input "
                     "pipeline to fill the first batch of about %d tokens (batch_size=%d%s) "
                     "and for TensorFlow to trace the step%s", self.seconds,
                     self.batch_size * self.replicas, self.batch_size, shares,
                     " and XLA to compile it for the batch's shape" if self.jit_compile else "")

    def on_train_batch_begin(self, batch, logs=None):
        if self.timer is None:
            self.timer = threading.Timer(self.seconds, self._say)
            self.timer.daemon = True
            self.timer.start()

    def on_train_batch_end(self, batch, logs=None):
        self.timer.cancel()

    def on_train_end(self, logs=None):
        if self.timer is not None:
            self.timer.cancel()


@dataclasses.dataclass(frozen=True)
class TrainingResult:
    """What a call of train() returns: the `model` trained (a keras.Model), the `step` it
    reached (its last checkpoint's), and the `evaluations` of this call, one {"step": N,
    "val_loss": ..., "val_accuracy": ..., "val_bleu": ...} per evaluation in step order."""
    model: keras.Model
    step: int
    evaluations: list


@dataclasses.dataclass(frozen=True)
class CheckedRun:
    """A run as train() checked it before anything is written: its names, its hparams as it
    trains them, its output folder, its vocabulary's record and XLA choice, and the data
    (the undistributed train and dev datasets, the vocabulary's size, the DataWatch)."""
    problem_name: str
    model_name: str
    hparams: object
    output_dir: str
    vocabulary: dict
    jit_compile: bool
    train_data: object
    dev_data: object
    vocab_size: int
    data_watch: DataWatch


def train(problem_name: str, model_name: str, hparams, data_dir: str, output_dir: str,
          config: RunConfig = RunConfig(), callbacks=(), strategy=None,
          signal_watch: SignalWatch = None) -> TrainingResult:
    """Trains to `config.train_steps` updates (or for `config.train_minutes`), resuming from
    output_dir's latest checkpoint, or from `config.warm_start_from`'s weights in a new run.
    `callbacks`: Keras callbacks of the loop, on the chief (DevMetrics among them measure each
    evaluation). `strategy` defaults to distribution.choose_strategy(config.devices);
    `signal_watch`: the program's SIGTERM and SIGINT handler (a new one by default).
    Everything is checked before anything is written; the chief holds output_dir's lock while
    it trains. Returns a TrainingResult; StoppedBySignal after a signal's checkpoint."""
    problem = registry.problem(problem_name)
    strategy = strategy or distribution.choose_strategy(list(config.devices))
    jit_compile = xla_pays(strategy) if config.jit_compile is None else config.jit_compile
    chief = distribution.is_chief(strategy)
    if chief:  # the measures best-keeping and early stopping follow, before anything is written
        best.check_measured(config, [name for callback in callbacks
                                     if is_dev_metric(callback) for name in callback.names])
    output = outputs.Output.folder(output_dir, "output_dir",
                                   purpose=f"train in --output_dir={output_dir}")
    if chief:
        output.check()  # at once, before the slower checks of the data
        best.check_kept_metric(output_dir, config.keep_best)  # once output_dir answers
    hparams = _trained_hparams(resumable_hparams(output_dir, problem_name, model_name, hparams),
                               strategy, jit_compile)
    keras.utils.set_random_seed(config.seed)
    train_data, dev_data = _checked_data(problem, data_dir, hparams, config,
                                         strategy.num_replicas_in_sync)
    run = CheckedRun(problem_name, model_name, hparams, output_dir,
                     checked_vocabulary(output_dir, problem, data_dir, resuming=True),
                     jit_compile, train_data, dev_data, problem.vocab_size(data_dir),
                     DataWatch(problem, data_dir, ("train", "dev"), output_dir))
    if config.warm_start_from:  # checked before anything is written; None: output_dir resumes
        config = dataclasses.replace(config, warm_start_from=warm_start.checked_source(
            config.warm_start_from, output_dir,
            warm_start.NewRun(problem, data_dir, model_name, hparams)))
    watch = signal_watch or SignalWatch()
    try:
        # The chief writes the folder; the other workers' writes are named by its flag too.
        with watch.installed(), (outputs.opened(output) if chief else
                                 reported_full_storage(output_dir, "output_dir")):
            with _data_errors(problem, data_dir, run.data_watch):
                return _train_locked(run, config, tuple(callbacks) if chief else (), strategy,
                                     watch)
    except Interrupted as interrupt:
        raise _stopped_before_training(interrupt, output_dir) from None


def _trained_hparams(hparams, strategy, jit_compile: bool):
    """`hparams` with "auto" length_bucketing and mixed_precision resolved for this run."""
    precision = mixed_precision_for(hparams, strategy)
    if hparams.mixed_precision == "auto" and precision == "bfloat16":
        logging.info("training in bfloat16: mixed_precision=auto on a CPU with bfloat16 matmul "
                     "instructions (float32 weights and loss; --hparams=mixed_precision=float32 "
                     "trains in float32)")
    return hparams.replace(length_bucketing=length_bucketing_for(hparams, jit_compile),
                           mixed_precision=precision)


def _checked_data(problem, data_dir: str, hparams, config, replicas: int) -> tuple:
    """(train, dev) datasets of data_dir, once its data (and the batch size) is checked."""
    allow_unverified = config.allow_unverified_data  # shards without a datagen manifest
    logging.info("checking the data of %s in %s", problem.name, data_dir)
    problem.check_data(data_dir, ("train", "dev"), allow_unverified=allow_unverified)
    problem.check_batch_size(data_dir, hparams, replicas)  # a batch one pass cannot fill
    train_data = problem.dataset("train", data_dir, hparams, training=True,
                                 num_replicas=replicas, seed=config.seed,
                                 allow_unverified=allow_unverified)
    dev_data = problem.dataset("dev", data_dir, hparams, training=False, repeat=True,
                               num_replicas=replicas, allow_unverified=allow_unverified)
    return train_data, dev_data


@contextlib.contextmanager
def _data_errors(problem, data_dir: str, data_watch: DataWatch):
    """A shard damaged or removed after the checks as the problem's and DataWatch's errors."""
    try:
        yield
    except tf.errors.DataLossError as error:
        raise problem.corrupt_data_error(data_dir, ("train", "dev"), error) from None
    except tf.errors.NotFoundError as error:
        gone = data_watch.shard_gone_error(error)
        if gone is None:
            raise
        raise gone from None


def _stopped_before_training(interrupt: Interrupted, output_dir: str) -> StoppedBySignal:
    name = signal.Signals(interrupt.signal_number).name
    latest = checkpoints.latest(output_dir)
    resume = (f"the latest checkpoint is {latest}; the same command resumes from it"
              if latest else "no checkpoint yet; the same command starts again")
    when = "again while stopping" if interrupt.second else "before training began"
    return StoppedBySignal(f"stopped by {name} {when}: {resume}", interrupt.signal_number)


def record_run(run: CheckedRun, step: int, train_steps: int, started_from: dict = None):
    """hparams.json (a resume's changes appended: run_description.record_training) and the
    learning-rate picture. A new record is written before the first step; a resumed run's
    changes once the first checkpoint after the resume is complete, so that the record never
    describes a model other than the checkpoints beside it."""
    record_training(run.output_dir, run.problem_name, run.model_name, run.hparams, step,
                    run.vocabulary, started_from)
    write_learning_rate_picture(run.hparams, train_steps,
                                tf.io.gfile.join(run.output_dir, "learning_rate.png"))


def _restored(run: CheckedRun, config, strategy) -> tuple:
    """(model, optimizer, the checkpoint restored or None, hparams.json's "warm_start" of a
    warm-started run or None, the run id): built in the strategy's scope, with output_dir's
    latest checkpoint restored, or the weights of config.warm_start_from."""
    run_id = checkpoints.new_run_id()  # kept in every checkpoint; a resume restores it
    with strategy.scope():
        model = build_model(run.model_name, run.hparams, run.vocab_size)
        optimizer = make_optimizer(run.hparams)
        optimizer.build(model.trainable_variables)
        latest = checkpoints.latest(run.output_dir)
        started_from = None
        if latest:
            try:
                checkpoints.restore(latest, model, optimizer, run_id)
            except checkpoints.DamagedCheckpointError as damaged:
                files = f"{latest}.index and {latest}.data-*"
                then = (f"the same command resumes from {damaged.restorable}"
                        if damaged.restorable else "the same command trains from step 0")
                raise damaged.advising(f"move {files} out of {run.output_dir}, and {then}"
                                       ) from None
            logging.info("resuming from %s", latest)
        elif config.warm_start_from:  # the weights only: step 0, a fresh optimizer
            started_from = warm_start.restore_weights(config.warm_start_from, model)
    return model, optimizer, latest, started_from, run_id


def _train_locked(run: CheckedRun, config, callbacks: tuple, strategy,
                  watch: SignalWatch) -> TrainingResult:
    """train() once the inputs are checked and output_dir is locked."""
    model, optimizer, latest, started_from, run_id = _restored(run, config, strategy)
    step = int(optimizer.iterations.numpy())
    record = None  # a resumed run's changes, recorded after its first checkpoint
    if distribution.is_chief(strategy):  # the one writer of output_dir and O/best
        for folder in (run.output_dir, best.best_folder(run.output_dir)):
            checkpoints.remove_interrupted_saves(folder)
        record = functools.partial(record_run, run, step, config.train_steps, started_from)
        if not (latest and saved_run(run.output_dir)):  # a new record: before the first step
            record()
            record = None
    steps = TrainingSteps(model, optimizer, run.hparams, strategy, jit_compile=run.jit_compile)
    if run.jit_compile and run.hparams.length_bucketing == "each":
        logging.warning("length_bucketing=each under XLA: XLA compiles once per pair of source "
                        "and target buckets (hundreds of shapes); length_bucketing=longer has "
                        "one shape per bucket, or train with --nojit_compile")
    if step >= config.train_steps:
        logging.info("already trained %d of %d steps", step, config.train_steps)
        return TrainingResult(model, step, [])
    logging.info("training %s on %s from step %d to %d (%d parameters, %d replicas, XLA %s%s)",
                 run.model_name, run.problem_name, step, config.train_steps,
                 model.count_params(), strategy.num_replicas_in_sync,
                 "on" if run.jit_compile else "off",
                 f"; at most {config.train_minutes:g} minutes" if config.train_minutes else "")
    with distribution.CheckpointDirectory(run.output_dir, strategy) as checkpoint_dir:
        manager = checkpoints.make_manager(checkpoint_dir, model, optimizer,
                                           config.keep_checkpoint_max, run_id)
        trainer = _trainer(run, config, steps, CheckpointSaver(
            manager, config.save_checkpoints_steps, step if latest else None,
            after_first_save=record), watch)
        evaluations = _run_loop(trainer, run, config, callbacks)
    if watch.signal_number is not None:
        raise _stopped_by_signal(trainer, run.output_dir, step)
    return TrainingResult(model, trainer.saver.saved_step, evaluations)


def _trainer(run: CheckedRun, config, steps, saver, watch: SignalWatch) -> Trainer:
    """The Trainer of the run: its checks before each save (the data as it was checked, and
    finite weights) and, when config keeps the best or stops early, its Evaluator, with the
    record of evaluations as of the resumed step on the chief."""
    guard = NonFiniteLossGuard(steps, run.output_dir)

    def check_before_save():
        run.data_watch.check()  # weights trained on other data are not saved
        guard.check_weights()

    saver.check_before_save = check_before_save
    evaluator = None
    if config.keep_best or config.early_stopping_patience:
        evaluations = None  # the other workers follow the chief's decisions
        if distribution.is_chief(steps.strategy):
            evaluations = best.recorded_evaluations(
                run.output_dir, best.monitored_metric(config.keep_best),
                config.early_stopping_min_delta, current_step(steps))
        evaluator = best.Evaluator(config, evaluations, saver,
                                   functools.partial(distribution.agreed, steps.strategy))
    return Trainer(steps, saver, guard, watch, evaluator)


def _run_loop(trainer: Trainer, run: CheckedRun, config, callbacks: tuple) -> list:
    """Runs `trainer` over the run's data with the project's callbacks (what a user watches)
    and `callbacks`; returns the evaluations of this call."""
    hparams, replicas = run.hparams, trainer.steps.strategy.num_replicas_in_sync
    chief = distribution.is_chief(trainer.steps.strategy)
    monitor = TrainingMonitor(run.output_dir if chief else None, config.train_steps,
                              config.log_every_steps, hparams, trainer.budget)
    first_update = FirstUpdateWait(hparams.batch_size, replicas, run.jit_compile)
    batches_per_update = max(1, hparams.optimizer_multistep_accumulate_steps)
    # A resumed run continues the same stream of batches where the checkpoint left it.
    train_data = run.train_data.skip(current_step(trainer.steps) * batches_per_update)
    try:
        trainer(trainer.steps.distribute(train_data), trainer.steps.distribute(run.dev_data),
                config, [first_update, monitor, *callbacks], batches_per_update)
    finally:  # also when the first update fails
        first_update.on_train_end()
    return trainer.evaluations


def _stopped_by_signal(trainer: Trainer, output_dir: str, resumed_step: int):
    saved = trainer.saver.saved_step
    path = tf.io.gfile.join(output_dir, f"{checkpoints.CHECKPOINT_NAME}-{saved}")
    done = (f"after step {saved}: saved {path}" if saved != resumed_step
            else f"at step {resumed_step}, before any update: {path} holds it")
    return StoppedBySignal(f"stopped by {trainer.signal_name()} {done}; the same command "
                           f"resumes from it", trainer.watch.signal_number)


SETTINGS = tuple(field.name for field in dataclasses.fields(RunConfig)) + (
    "eval_bleu_sentences",)


def train_problem(problem: str, data_dir: str, output_dir: str, *, model: str = "transformer",
                  hparams_set="transformer_base", hparams="", callbacks=(), dev_bleu=None,
                  strategy=None, signal_watch: SignalWatch = None,
                  **settings) -> TrainingResult:
    """t2t_lite.train: trains `model` with `hparams_set` (a registered name, or HParams) and the
    `hparams` overrides ("a=1,b=2" or a dict) on `problem`'s data in data_dir into output_dir,
    resuming from its checkpoints (train()), with the Keras `callbacks` in the loop.

    `settings`: t2t_lite-trainer's flags by name (SETTINGS: RunConfig's fields and
    eval_bleu_sentences, the dev sentences whose BLEU each evaluation measures, 100 by
    default, through `dev_bleu`: decoding's DevBleu). `strategy` and `signal_watch`: the
    program's (train()). Returns train()'s TrainingResult."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise TypeError(unknown_name_message("setting", unknown[0], SETTINGS,
                                             "The settings are"))
    sentences = settings.pop("eval_bleu_sentences", 100)
    config = RunConfig(**{**settings, "devices": tuple(settings.get("devices", ()))})
    strategy = strategy or distribution.choose_strategy(list(config.devices))
    # On every worker (the chief alone measures BLEU): one that went on alone would wait.
    best.check_measured(config, (["val_bleu"] if sentences else []) + [
        name for callback in callbacks if is_dev_metric(callback) for name in callback.names])
    if sentences and distribution.is_chief(strategy):
        if dev_bleu is None:
            raise ValueError("eval_bleu_sentences > 0 measures the dev BLEU with decoding's "
                             "DevBleu: call t2t_lite.train, or set eval_bleu_sentences=0")
        callbacks = [dev_bleu(registry.problem(problem), data_dir, output_dir, sentences),
                     *callbacks]
    if isinstance(hparams_set, str):
        hparams_set = registry.hparams(hparams_set)
    if isinstance(hparams, dict):  # as overrides, checked alike (tuples as "a*b")
        hparams = ",".join(f"{name}={'*'.join(map(str, value))}" if isinstance(value, tuple)
                           else f"{name}={value}" for name, value in hparams.items())
    return train(problem, model, hparams_set.override_from_string(hparams, "hparams"),
                 data_dir, output_dir, config, callbacks, strategy, signal_watch)
