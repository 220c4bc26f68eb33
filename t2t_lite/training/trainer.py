"""Training: the loop that steps a registered model through a problem's batches under a
tf.distribute strategy (see step.py for one step), with XLA where it pays, checkpoints in
`output_dir`, periodic dev evaluation, Keras callbacks, resumption and an optional time budget.

The objective is tensor2tensor's: label-smoothed cross entropy summed over real target tokens
and divided by their number; Adam with the hparams' learning-rate schedule (paper §5.3).
Running again with the same `output_dir` restores the latest checkpoint (weights, optimizer
moments and step) and continues to `train_steps` (or for another `train_minutes`); a rerun
that asks for another run than the one recorded there (hparams.json) is refused before it
writes anything (resumable_hparams).
A full disk ends training with one StorageError, the last complete checkpoint the latest; so
does a data folder that changes while training reads it, with a DataChangedError (data_watch).
SIGTERM and SIGINT stop training after the update under way, with a checkpoint there
(SignalStop).
"""
import dataclasses
import functools
import math
import signal
import threading
import time

import keras
import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints, registry
from t2t_lite.storage import outputs
from t2t_lite.errors import UserError
from t2t_lite.hparams_lib import OPTIMIZATION_HPARAMS
from t2t_lite.models.building import build_model
from t2t_lite.storage.run_description import (description_path, differing_values, record_training,
                                      saved_run)
from t2t_lite.storage.run_description import checked_vocabulary
from t2t_lite.storage.storage_errors import reported_full_storage
from t2t_lite.training import distribution, warm_start
from t2t_lite.training.adam import Adam
from t2t_lite.training import best
from t2t_lite.training.data_watch import DataWatch
from t2t_lite.training.loop import current_step, is_dev_metric, run_loop
from t2t_lite.training.schedules import LearningRateSchedule
from t2t_lite.training.signals import (STOPPING_SIGNALS, Interrupted, SignalWatch,
                                       StoppedBySignal)
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
    # (best.KeepBest): "bleu" (the dev BLEU, higher), "loss" (the dev loss, lower), "": none.
    keep_best: str = ""
    # Stop after this many evaluations in a row without an improvement of at least
    # early_stopping_min_delta in keep_best's metric (the dev loss when keep_best is ""); 0: never.
    early_stopping_patience: int = 0
    early_stopping_min_delta: float = 0.0
    # A run, folder or checkpoint whose model weights a new run starts from (warm_start.py).
    warm_start_from: str = None

    def __post_init__(self):
        if not self.train_minutes >= 0:
            raise ValueError(f"train_minutes={self.train_minutes!r}: expected minutes >= 0 "
                             f"(0: no limit)")
        if self.keep_best not in ("", *best.METRICS):
            raise ValueError(f"keep_best={self.keep_best!r}: expected one of "
                             f"{['', *best.METRICS]}")
        if not self.early_stopping_patience >= 0:
            raise ValueError(f"early_stopping_patience={self.early_stopping_patience!r}: "
                             f"expected evaluations >= 0 (0: no early stopping)")
        if not self.early_stopping_min_delta >= 0:
            raise ValueError(f"early_stopping_min_delta={self.early_stopping_min_delta!r}: "
                             f"expected a difference >= 0")


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
    ResumeError names every value that differs other than CHANGEABLE_ON_RESUME.
    tensor2tensor, and t2t_lite before, overwrote the record and then failed to restore the
    checkpoint, leaving checkpoints the record no longer described; this runs before anything
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
            f"{_listed(refused, path)}. To train this one, choose a new --output_dir; to "
            f"resume that one, run with its problem, model and hparams (see {path})")
    if changes:
        logging.warning("resuming with other training settings: %s", _listed(changes, path))
    return hparams


def _listed(changes: dict, path: str) -> str:
    return "; ".join(f"{name}: {before!r} in {path}, {after!r} requested"
                     for name, (before, after) in changes.items())


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


class NonFiniteLossError(UserError, FloatingPointError):
    """Training produced a NaN or infinite loss."""


class NonFiniteLossGuard(keras.callbacks.Callback):
    """Stops training at the first NaN or infinite loss, and before a checkpoint of weights
    whose loss is not finite (`check_weights`, which CheckpointSaver calls before each save): a
    step's loss is computed before its update, so an update that spoils the weights shows
    only in the next step's loss, after a checkpoint of that step may have been written. The
    last good checkpoint stays the latest."""

    def __init__(self, output_dir: str):
        super().__init__()
        self.output_dir = output_dir

    def _stop(self, what: str):
        step = int(self.model.optimizer.iterations.numpy())
        latest = checkpoints.latest(self.output_dir)
        raise NonFiniteLossError(
            f"{what} at step {step}; stopped. The last good checkpoint is "
            f"{latest or '(none yet)'}. Lower the learning rate (learning_rate_constant) or "
            f"lengthen the warmup, then run again.")

    def on_train_batch_end(self, batch, logs=None):
        if not math.isfinite(float(logs["loss_sum"])):
            self._stop("the training loss became NaN or infinite")

    def check_weights(self):
        """Raises NonFiniteLossError when the weights, as the last update left them, give a
        NaN or infinite loss on the batch last trained (one forward pass, under every
        worker's strategy as each save is)."""
        batch = self.model.last_batch
        if batch is not None and not math.isfinite(
                float(self.model.eval_step(batch)["loss_sum"])):
            self._stop("the loss after the update became NaN or infinite")


class TimeBudget(keras.callbacks.Callback):
    """Stops training after the update during which `minutes` have passed since training
    began (on_train_begin); 0 minutes: no limit. Every worker of a multi-worker run stops after
    the same update: the first to run out stops them all (TrainingSteps.on_any_worker).
    CheckpointSaver then saves at the step reached, as at the end of any run."""

    def __init__(self, minutes: float):
        super().__init__()
        self.seconds = minutes * 60
        self.start = None
        self.ran_out = False  # on some worker: training stops after this update

    def on_train_begin(self, logs=None):
        self.start = time.time()

    def seconds_left(self, now: float = None) -> float:
        """Seconds until the budget runs out: inf without one, 0 once training stops for it
        (also when another worker's ran out first), negative when it has run out here since
        the last update."""
        if not self.seconds:
            return math.inf
        if self.ran_out:
            return 0.0
        return self.seconds - ((time.time() if now is None else now) - self.start)

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds and self.model.on_any_worker(self.seconds_left() <= 0):
            self.ran_out = True
            logging.info("the time budget of %g minutes has run out", self.seconds / 60)
            self.model.stop_training = True


# Seconds the first update may take before a line says what it waits for.
FIRST_UPDATE_PATIENCE_SECONDS = 30.0


class FirstUpdateWait(keras.callbacks.Callback):
    """One line when the first update of a run has not finished after `seconds` (default
    FIRST_UPDATE_PATIENCE_SECONDS), saying what it waits for: the input pipeline filling the
    first batch (reading and bucketing the shards until a bucket holds a batch's tokens) and
    TensorFlow tracing the step, and XLA compiling it where XLA is on (before, nothing was
    said while it waited)."""

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


class SignalStop(keras.callbacks.Callback):
    """Training's part of SIGTERM (a cluster preempting the job, `kill`) and SIGINT (Ctrl-C):
    `watch` (signals.SignalWatch; a new one by default) receives them, and the first signal
    during the training loop stops training after the update under way, without the epoch's
    evaluation; CheckpointSaver then saves at the step reached, and train raises
    StoppedBySignal. A signal before the loop (nothing trained yet), or a second one, ends
    training at once (Interrupted): checkpoints.save leaves the last complete checkpoint the
    latest. In a run of several workers they vote as training begins and after every update
    (one all-reduce), so that every worker stops at the same step, whichever received the
    signal."""

    def __init__(self, multi_worker: bool, watch: SignalWatch = None):
        super().__init__()
        self.multi_worker = multi_worker
        self.watch = watch or SignalWatch()

    @property
    def signal_number(self):
        return self.watch.signal_number

    def installed(self):
        """The watch's handler in place within the context (installed again when the program
        had it in place: TensorFlow may have put its own in between)."""
        return self.watch.installed()

    def on_train_begin(self, logs=None):
        self.watch.in_loop = True
        if self.multi_worker:  # a signal that some worker kept until now stops every one
            self._vote()

    def on_train_batch_end(self, batch, logs=None):
        if self.multi_worker:
            self._vote()
        if self.watch.signal_number is not None:
            self.model.stop_training = self.model.stop_at_once = True

    def _vote(self):
        """The signal any worker received (each worker's signal_number the same after it)."""
        received = self.watch.signal_number
        votes = self.model.each_on_any_worker([received == number
                                               for number in STOPPING_SIGNALS])
        received = next((number for number, vote in zip(STOPPING_SIGNALS, votes) if vote), None)
        if received is not None:
            self.watch.signal_number = received
            self.model.stop_training = self.model.stop_at_once = True


class CheckpointSaver(keras.callbacks.Callback):
    """Saves every `every_steps` updates and at the end (train_steps, a time budget or any
    callback that stops training), numbered by the global step, and stops training at
    `train_steps` (epochs need not divide it). A save due at a step that ends an epoch (every
    `eval_every` updates, the last) waits for the epoch's end, after the callbacks that record
    its evaluation (best.py): a run resumed from that checkpoint finds the evaluation of its
    step recorded. `after_first_save` (if any) is called once the first checkpoint of this
    run is complete; `check_before_save` (if any) before each save, which it may refuse by
    raising. `saved_step`: the step of the checkpoint training resumed from, which is not
    saved again."""

    def __init__(self, manager, every_steps: int, train_steps: int, after_first_save=None,
                 saved_step: int = None, check_before_save=None, eval_every: int = 0):
        super().__init__()
        self.check_before_save = check_before_save  # raises instead of saving bad weights
        self.manager = manager
        self.every_steps = every_steps
        self.train_steps = train_steps
        self.eval_every = eval_every
        self.after_first_save = after_first_save
        self.saved_step = saved_step

    def _save(self, step):
        if step != self.saved_step:
            if self.check_before_save is not None:
                self.check_before_save()
            logging.info("saved %s", checkpoints.save(self.manager, step))
            self.saved_step = step
            if self.after_first_save is not None:
                self.after_first_save()
                self.after_first_save = None

    def on_train_batch_end(self, batch, logs=None):
        step = current_step(self.model)
        if step >= self.train_steps:
            self.model.stop_training = True
        ends_epoch = self.model.stop_training or (self.eval_every and
                                                  step % self.eval_every == 0)
        if step % self.every_steps == 0 and not ends_epoch:
            self._save(step)

    def on_epoch_end(self, epoch, logs=None):
        step = current_step(self.model)
        if step % self.every_steps == 0 or self.model.stop_training:
            self._save(step)

    def on_train_end(self, logs=None):
        self._save(current_step(self.model))


def train(problem_name: str, model_name: str, hparams, data_dir: str, output_dir: str,
          config: RunConfig = RunConfig(), callbacks=(), strategy=None,
          signal_watch: SignalWatch = None):
    """Trains to `config.train_steps` updates, or for `config.train_minutes` when they run out
    first, resuming from output_dir's latest checkpoint.
    `callbacks` (Keras callbacks, e.g. dev BLEU) run on the chief after each evaluation.
    With `config.warm_start_from`, a new run starts from that run's model weights at step 0
    (warm_start.py; an output_dir with checkpoints resumes from them instead).
    `strategy` defaults to distribution.choose_strategy(config.devices). `signal_watch`: the
    program's SIGTERM and SIGINT handler, installed from its start (a new one by default).

    The inputs (problem, data, vocabulary) and the run recorded in output_dir are checked
    before anything is written, and the chief opens output_dir through storage.outputs,
    holding its lock while it trains: a second trainer started on the same folder is refused
    instead of writing the same checkpoint names. A write that finds output_dir's disk full
    is a StorageError."""
    problem = registry.problem(problem_name)
    strategy = strategy or distribution.choose_strategy(list(config.devices))
    jit_compile = xla_pays(strategy) if config.jit_compile is None else config.jit_compile
    replicas = strategy.num_replicas_in_sync
    chief = distribution.is_chief(strategy)
    if chief:  # the measures best-keeping and early stopping follow, before anything is written
        best.check_measured(config, [name for callback in callbacks
                                     if is_dev_metric(callback) for name in callback.names])
    output = outputs.Output.folder(output_dir, "output_dir",
                                   purpose=f"train in --output_dir={output_dir}")
    if chief:
        output.check()  # at once, before the slower checks of the data
        best.check_kept_metric(output_dir, config.keep_best)  # once output_dir answers
    hparams = resumable_hparams(output_dir, problem_name, model_name, hparams)
    precision = mixed_precision_for(hparams, strategy)
    if hparams.mixed_precision == "auto" and precision == "bfloat16":
        logging.info("training in bfloat16: mixed_precision=auto on a CPU with bfloat16 matmul "
                     "instructions (float32 weights and loss; --hparams=mixed_precision=float32 "
                     "trains in float32)")
    hparams = hparams.replace(length_bucketing=length_bucketing_for(hparams, jit_compile),
                              mixed_precision=precision)
    keras.utils.set_random_seed(config.seed)
    allow_unverified = config.allow_unverified_data  # shards without a datagen manifest
    logging.info("checking the data of %s in %s", problem_name, data_dir)
    problem.check_data(data_dir, ("train", "dev"), allow_unverified=allow_unverified)
    problem.check_batch_size(data_dir, hparams, replicas)  # a batch one pass cannot fill
    train_data = problem.dataset("train", data_dir, hparams, training=True,
                                 num_replicas=replicas, seed=config.seed,
                                 allow_unverified=allow_unverified)
    dev_data = problem.dataset("dev", data_dir, hparams, training=False, repeat=True,
                               num_replicas=replicas, allow_unverified=allow_unverified)
    vocab_size = problem.vocab_size(data_dir)
    # The vocabulary the checkpoints were trained on, or a VocabularyError naming both files.
    vocabulary = checked_vocabulary(output_dir, problem, data_dir, resuming=True)
    if config.warm_start_from:  # checked before anything is written; None: output_dir resumes
        config = dataclasses.replace(config, warm_start_from=warm_start.checked_source(
            config.warm_start_from, output_dir, problem, data_dir, model_name, hparams))
    data_watch = DataWatch(problem, data_dir, ("train", "dev"), output_dir)  # as checked
    signal_stop = SignalStop(distribution.cluster_workers() > 1, signal_watch)
    try:
        # The chief writes the folder; the other workers' writes are named by its flag too.
        with signal_stop.installed(), (outputs.opened(output) if chief else
                                       reported_full_storage(output_dir, "output_dir")):
            try:
                return _train_locked(RunSettings(
                    problem_name=problem_name, model_name=model_name, hparams=hparams,
                    output_dir=output_dir, config=config,
                    callbacks=tuple(callbacks) if chief else (), strategy=strategy,
                    jit_compile=jit_compile, train_data=train_data, dev_data=dev_data,
                    vocab_size=vocab_size, vocabulary=vocabulary, signal_stop=signal_stop,
                    data_watch=data_watch))
            except tf.errors.DataLossError as error:  # a shard damaged after the check
                raise problem.corrupt_data_error(data_dir, ("train", "dev"), error) from None
            except tf.errors.NotFoundError as error:  # a shard removed after the check
                gone = data_watch.shard_gone_error(error)
                if gone is None:
                    raise
                raise gone from None
    except Interrupted as interrupt:
        name = signal.Signals(interrupt.signal_number).name
        latest = checkpoints.latest(output_dir)
        resume = (f"the latest checkpoint is {latest}; the same command resumes from it"
                  if latest else "no checkpoint yet; the same command starts again")
        when = "again while stopping" if interrupt.second else "before training began"
        raise StoppedBySignal(f"stopped by {name} {when}: {resume}",
                              interrupt.signal_number) from None


def record_run(output_dir, problem_name, model_name, hparams, step: int, train_steps: int,
               vocabulary: dict = None, started_from: dict = None):
    """hparams.json (a resume's changes appended to it: run_description.record_training) and
    the learning-rate picture. A new record is written once the model is built (and the latest
    checkpoint, if any, restored into it), before the first step; a resumed run's changes (from
    the checkpoint of `step`) once the first checkpoint after the resume is complete
    (CheckpointSaver), so that a change that failed (a NaN loss at its first update, an
    interrupt) leaves the record as it was: the record never describes a model other than the
    checkpoints beside it, nor a change that no checkpoint holds."""
    record_training(output_dir, problem_name, model_name, hparams, step, vocabulary,
                    started_from)
    write_learning_rate_picture(hparams, train_steps,
                                tf.io.gfile.join(output_dir, "learning_rate.png"))


def _resume_advice(damaged: str, restorable: str, output_dir: str) -> str:
    """How to resume after the latest checkpoint was found damaged: the trainer moves and
    deletes nothing itself (the user may want to look at the files, or have a copy)."""
    files = f"{damaged}.index and {damaged}.data-*"
    then = (f"the same command resumes from {restorable}" if restorable
            else "the same command trains from step 0")
    return f"move {files} out of {output_dir}, and {then}"


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What train() hands to the run once the inputs are checked and output_dir is locked: the
    run's names and hparams, its RunConfig, the callbacks (the chief's; none on the other
    workers), the strategy and XLA choice, the (undistributed) train and dev datasets, the
    vocabulary's size and record, and the trainer's SignalStop and DataWatch."""
    problem_name: str
    model_name: str
    hparams: object
    output_dir: str
    config: RunConfig
    callbacks: tuple
    strategy: object
    jit_compile: bool
    train_data: object
    dev_data: object
    vocab_size: int
    vocabulary: dict
    signal_stop: SignalStop
    data_watch: DataWatch


def evaluation_callbacks(run: RunSettings, resumed_step: int, checkpoint, check_before_save,
                         checkpoint_dir: str) -> list:
    """The callbacks of best-keeping and early stopping that run.config asks for (best.py),
    with the record of evaluations as of `resumed_step`: on the chief RecordEvaluations,
    KeepBest over `checkpoint` (the trainer's) and EarlyStopping; on the other workers KeepBest
    (saving into their `checkpoint_dir`, as the save is collective) and EarlyStopping, which
    follow the chief's decisions."""
    config = run.config
    if not (config.keep_best or config.early_stopping_patience):
        return []
    if not distribution.is_chief(run.strategy):  # they follow the chief's decisions
        return ([best.KeepBest(checkpoint_dir, None, checkpoint, check_before_save)]
                if config.keep_best else []) + (
            [best.EarlyStopping(None, config.early_stopping_patience)]
            if config.early_stopping_patience else [])
    evaluations = best.recorded_evaluations(
        run.output_dir, best.monitored_metric(config.keep_best),
        config.early_stopping_min_delta, resumed_step)
    callbacks = [best.RecordEvaluations(run.output_dir, evaluations, config.eval_every,
                                        config.train_steps)]
    if config.keep_best:
        callbacks.append(best.KeepBest(run.output_dir, evaluations, checkpoint,
                                       check_before_save))
    if config.early_stopping_patience:
        callbacks.append(best.EarlyStopping(evaluations, config.early_stopping_patience))
    return callbacks


def _train_locked(run: RunSettings):
    """train() once the inputs are checked and output_dir is locked."""
    strategy, output_dir, config, hparams = run.strategy, run.output_dir, run.config, run.hparams
    chief = distribution.is_chief(strategy)
    replicas = strategy.num_replicas_in_sync
    run_id = checkpoints.new_run_id()  # kept in every checkpoint; a resume restores it
    # The model and optimizer, and the latest checkpoint restored into them.
    with strategy.scope():
        model = build_model(run.model_name, hparams, run.vocab_size)
        optimizer = make_optimizer(hparams)
        optimizer.build(model.trainable_variables)
        latest = checkpoints.latest(output_dir)
        started_from = None  # hparams.json's "warm_start" of a warm-started run
        if latest:
            try:
                checkpoints.restore(latest, model, optimizer, run_id)
            except checkpoints.DamagedCheckpointError as damaged:
                raise damaged.advising(_resume_advice(latest, damaged.restorable,
                                                      output_dir)) from None
            logging.info("resuming from %s", latest)
        elif config.warm_start_from:  # the weights only: step 0, a fresh optimizer
            started_from = warm_start.restore_weights(config.warm_start_from, model)
    step = int(optimizer.iterations.numpy())
    record = None  # a resumed run's changes, recorded after its first checkpoint
    if chief:
        record = functools.partial(record_run, output_dir, run.problem_name, run.model_name,
                                   hparams, step, config.train_steps, run.vocabulary,
                                   started_from)
        if not (latest and saved_run(output_dir)):  # a new record: before the first step
            record()
            record = None
    steps = TrainingSteps(model, optimizer, hparams, strategy, jit_compile=run.jit_compile)
    if run.jit_compile and hparams.length_bucketing == "each":
        logging.warning("length_bucketing=each under XLA: XLA compiles once per pair of source "
                        "and target buckets (hundreds of shapes); length_bucketing=longer has "
                        "one shape per bucket, or train with --nojit_compile")
    if step >= config.train_steps:
        logging.info("already trained %d of %d steps", step, config.train_steps)
        return model
    logging.info("training %s on %s from step %d to %d (%d parameters, %d replicas, XLA %s%s)",
                 run.model_name, run.problem_name, step, config.train_steps,
                 model.count_params(), replicas, "on" if run.jit_compile else "off",
                 f"; at most {config.train_minutes:g} minutes" if config.train_minutes else "")
    batches_per_update = max(1, hparams.optimizer_multistep_accumulate_steps)
    # A resumed run continues the same stream of batches where the checkpoint left it.
    train_data = run.train_data.skip(step * batches_per_update)
    budget = TimeBudget(config.train_minutes)
    monitor = TrainingMonitor(output_dir if chief else None, config.train_steps,
                              config.log_every_steps, hparams, budget)
    with distribution.CheckpointDirectory(output_dir, strategy) as checkpoint_dir:
        manager = checkpoints.make_manager(checkpoint_dir, model, optimizer,
                                           config.keep_checkpoint_max, run_id)
        guard = NonFiniteLossGuard(output_dir)

        def check_before_save():
            run.data_watch.check()  # weights trained on other data are not saved
            guard.check_weights()

        saver = CheckpointSaver(manager, config.save_checkpoints_steps, config.train_steps,
                                after_first_save=record, saved_step=step if latest else None,
                                check_before_save=check_before_save,
                                eval_every=config.eval_every)
        deciding = evaluation_callbacks(run, step, manager.checkpoint, check_before_save,
                                        checkpoint_dir)
        first_update = FirstUpdateWait(hparams.batch_size, replicas, run.jit_compile)
        try:
            run_loop(steps, steps.distribute(train_data), steps.distribute(run.dev_data),
                     config, [first_update, guard, budget, run.signal_stop, monitor,
                              *run.callbacks, *deciding, saver], batches_per_update)
        finally:  # also when the first update fails
            first_update.on_train_end()
    signal_stop = run.signal_stop
    if signal_stop.signal_number is not None:
        name = signal.Signals(signal_stop.signal_number).name
        path = tf.io.gfile.join(output_dir, f"{checkpoints.CHECKPOINT_NAME}-{saver.saved_step}")
        done = (f"after step {saver.saved_step}: saved {path}" if saver.saved_step != step
                else f"at step {step}, before any update: {path} holds it")
        raise StoppedBySignal(f"stopped by {name} {done}; the same command resumes from it",
                              signal_stop.signal_number)
    return model
