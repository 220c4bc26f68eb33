"""Training: Keras `fit` of a registered model on a problem's batches under a tf.distribute
strategy, with XLA, checkpoints in `output_dir`, periodic dev evaluation and resumption.

The objective is tensor2tensor's: label-smoothed cross entropy summed over real target tokens
and divided by their number; Adam with the hparams' learning-rate schedule (paper §5.3).
Running again with the same `output_dir` restores the latest checkpoint (weights, optimizer
moments and step) and continues to `train_steps`.
"""
import dataclasses
import json
import math
import os

import keras
import tensorflow as tf
from absl import logging

from t2t_lite import registry
from t2t_lite.training import checkpoints, losses
from t2t_lite.training.schedules import LearningRateSchedule
from t2t_lite.training.summaries import TrainingMonitor

HPARAMS_FILE = "hparams.json"


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How long to train and how often to evaluate, save and report (t2t's trainer flags)."""
    train_steps: int = 250_000
    eval_steps: int = 100               # dev batches per evaluation
    eval_every: int = 1000              # updates between evaluations (t2t's local_eval_frequency)
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 20
    log_every_steps: int = 100
    jit_compile: bool = True            # XLA; Keras' "auto" would turn it off on CPU
    seed: int = 1                       # weights, dropout and the order of training batches


class TrainingModel(keras.Model):
    """Wraps a model with t2t's loss so that `fit` and `evaluate` optimise and report it.

    Each replica's forward and backward pass is one XLA-compiled function; Keras' own
    `jit_compile` stays off because it compiles the whole step, optimizer included, which fails
    under MirroredStrategy ("Trying to access resource ... located in device CPU:1"). The loss
    is divided by the token count of the global batch, so that the summed replica gradients are
    the gradient of the per-token mean. The logs carry running sums (loss over tokens, tokens,
    correct tokens) so that losses and accuracies are token-weighted.
    """

    def __init__(self, model, hparams, jit_compile: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.model = model
        self.hparams = hparams
        self.loss_sum = keras.metrics.Sum(name="loss_sum")
        self.target_tokens = keras.metrics.Sum(name="target_tokens")
        self.correct_tokens = keras.metrics.Sum(name="correct_tokens")
        self.padded_tokens = keras.metrics.Sum(name="padded_tokens")  # positions incl. padding
        self.real_tokens = keras.metrics.Sum(name="real_tokens")
        self._gradients = tf.function(self._loss_and_gradients, jit_compile=jit_compile,
                                     reduce_retracing=True)
        self._evaluate = tf.function(self._loss_and_counts, jit_compile=jit_compile,
                                    reduce_retracing=True)

    @property
    def metrics(self):
        return [self.loss_sum, self.target_tokens, self.correct_tokens, self.padded_tokens,
                self.real_tokens]

    def call(self, features, training=False):
        return self.model(features, training=training)

    def _loss_and_counts(self, features, training=False):
        logits = self.model(features, training=training)
        targets = features["targets"]
        loss_sum, tokens = losses.loss_sum_and_tokens(logits, targets,
                                                      self.hparams.label_smoothing)
        return loss_sum, tokens, losses.correct_tokens(logits, targets)

    def _loss_and_gradients(self, features, global_tokens):
        with tf.GradientTape() as tape:
            loss_sum, tokens, correct = self._loss_and_counts(features, training=True)
            loss = self.optimizer.scale_loss(loss_sum / tf.maximum(global_tokens, 1.0))
        gradients = tape.gradient(loss, self.model.trainable_variables)
        return loss_sum, tokens, correct, gradients

    def _update_metrics(self, features, loss_sum, tokens, correct):
        self.loss_sum.update_state(loss_sum)
        self.target_tokens.update_state(tokens)
        self.correct_tokens.update_state(correct)
        for ids in (features["inputs"], features["targets"]):
            self.padded_tokens.update_state(tf.cast(tf.size(ids), tf.float32))
            self.real_tokens.update_state(tf.reduce_sum(losses.target_weights(ids)))
        totals = [metric.result() for metric in self.metrics]
        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            # Each replica holds its own sums; Keras would average the replicas' ratios.
            totals = replica_context.all_reduce("sum", totals)
        loss_sum, tokens_so_far, correct_so_far, padded, real = totals
        return {"loss": loss_sum / tf.maximum(tokens_so_far, 1.0),
                "accuracy": correct_so_far / tf.maximum(tokens_so_far, 1.0),
                "loss_sum": loss_sum, "target_tokens": tokens_so_far,
                "padding_fraction": 1.0 - real / tf.maximum(padded, 1.0)}

    def train_step(self, features):
        global_tokens = tf.reduce_sum(losses.target_weights(features["targets"]))
        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            global_tokens = replica_context.all_reduce("sum", global_tokens)
        loss_sum, tokens, correct, gradients = self._gradients(features, global_tokens)
        if self.hparams.clip_grad_norm:
            gradients, _ = tf.clip_by_global_norm(gradients, self.hparams.clip_grad_norm)
        self.optimizer.apply(gradients, self.model.trainable_variables)
        return self._update_metrics(features, loss_sum, tokens, correct)

    def test_step(self, features):
        return self._update_metrics(features, *self._evaluate(features))


def make_optimizer(hparams):
    """Adam (paper §5.3) with t2t's betas and epsilon and the hparams' schedule; with
    optimizer_multistep_accumulate_steps = K > 1, Keras' gradient accumulation averages the
    gradients of K batches into one update (`optimizer.iterations` counts updates); dynamic
    loss scaling around it for float16."""
    accumulate = hparams.optimizer_multistep_accumulate_steps
    optimizer = keras.optimizers.Adam(
        learning_rate=LearningRateSchedule(hparams),
        beta_1=hparams.optimizer_adam_beta1,
        beta_2=hparams.optimizer_adam_beta2,
        epsilon=hparams.optimizer_adam_epsilon,
        gradient_accumulation_steps=accumulate if accumulate > 1 else None)
    if hparams.mixed_precision == "float16":
        # float16 gradients underflow without it; bfloat16 has float32's range.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def choose_strategy():
    """MirroredStrategy over all GPUs (or logical CPUs) when there are several, else default."""
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    if len(devices) > 1:
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    return tf.distribute.get_strategy()


def build_model(model_name: str, hparams, vocab_size: int):
    """The registered model with its variables created (by a call on a tiny batch), its layers
    computing in hparams.mixed_precision with float32 weights."""
    previous_policy = keras.config.dtype_policy()
    if hparams.mixed_precision != "float32":
        keras.config.set_dtype_policy(f"mixed_{hparams.mixed_precision}")
    try:
        model = registry.model(model_name)(hparams, vocab_size)
        tokens = tf.ones([1, 2], tf.int32)
        model({"inputs": tokens, "targets": tokens}, training=False)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    return model


class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN or infinite loss."""


class NonFiniteLossGuard(keras.callbacks.Callback):
    """Stops training at the first NaN or infinite loss, before the checkpoint saver can write
    the poisoned weights: the last good checkpoint stays the latest."""

    def __init__(self, output_dir: str):
        super().__init__()
        self.output_dir = output_dir

    def on_train_batch_end(self, batch, logs=None):
        if not math.isfinite(float(logs["loss_sum"])):
            step = int(self.model.optimizer.iterations.numpy())
            latest = tf.train.latest_checkpoint(self.output_dir)
            raise NonFiniteLossError(
                f"the training loss became NaN or infinite at step {step}; stopped. The last "
                f"good checkpoint is {latest or '(none yet)'}. Lower the learning rate "
                f"(learning_rate_constant) or lengthen the warmup, then run again.")


class CheckpointSaver(keras.callbacks.Callback):
    """Saves every `every_steps` updates and at the end, numbered by the global step, and stops
    training at `train_steps` (epochs need not divide it)."""

    def __init__(self, manager, every_steps: int, train_steps: int):
        super().__init__()
        self.manager = manager
        self.every_steps = every_steps
        self.train_steps = train_steps
        self.saved_step = None

    def _save(self, step):
        if step != self.saved_step:
            logging.info("saved %s", self.manager.save(checkpoint_number=step))
            self.saved_step = step

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every_steps == 0 or step >= self.train_steps:
            self._save(step)
        if step >= self.train_steps:
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        self._save(int(self.model.optimizer.iterations.numpy()))


def save_run_description(output_dir, problem_name, model_name, hparams):
    """hparams.json beside the checkpoints, so the decoder rebuilds the same model."""
    description = {"problem": problem_name, "model": model_name, "hparams": hparams.to_dict()}
    path = os.path.join(output_dir, HPARAMS_FILE)
    with open(path + ".tmp", "w") as handle:
        json.dump(description, handle, indent=2)
    os.replace(path + ".tmp", path)


def train(problem_name: str, model_name: str, hparams, data_dir: str, output_dir: str,
          config: RunConfig = RunConfig(), callbacks=()):
    """Trains to `config.train_steps` updates, resuming from output_dir's latest checkpoint.
    `callbacks` (Keras callbacks, e.g. dev BLEU) run after each evaluation with the others."""
    problem = registry.problem(problem_name)
    os.makedirs(output_dir, exist_ok=True)
    save_run_description(output_dir, problem_name, model_name, hparams)
    strategy = choose_strategy()
    replicas = strategy.num_replicas_in_sync
    keras.utils.set_random_seed(config.seed)
    train_data = problem.dataset("train", data_dir, hparams, training=True,
                                 num_replicas=replicas, seed=config.seed)
    dev_data = problem.dataset("dev", data_dir, hparams, training=False, repeat=True,
                               num_replicas=replicas)
    with strategy.scope():
        model = build_model(model_name, hparams, problem.vocab_size(data_dir))
        optimizer = make_optimizer(hparams)
        optimizer.build(model.trainable_variables)
        manager = checkpoints.make_manager(output_dir, model, optimizer,
                                           config.keep_checkpoint_max)
        if manager.latest_checkpoint:
            checkpoints.restore(manager.latest_checkpoint, model, optimizer)
            logging.info("resuming from %s", manager.latest_checkpoint)
        trainer = TrainingModel(model, hparams, jit_compile=config.jit_compile)
        trainer.compile(optimizer=optimizer, jit_compile=False)
    step = int(optimizer.iterations.numpy())
    if step >= config.train_steps:
        logging.info("already trained %d of %d steps", step, config.train_steps)
        return model
    logging.info("training %s on %s from step %d to %d (%d parameters, %d replicas, XLA %s)",
                 model_name, problem_name, step, config.train_steps, model.count_params(),
                 strategy.num_replicas_in_sync, "on" if config.jit_compile else "off")
    batches_per_update = max(1, hparams.optimizer_multistep_accumulate_steps)
    # A resumed run continues the same stream of batches where the checkpoint left it.
    train_data = train_data.skip(step * batches_per_update)
    monitor = TrainingMonitor(output_dir, config.train_steps, config.log_every_steps,
                              LearningRateSchedule(hparams))
    trainer.fit(
        train_data,
        initial_epoch=step // config.eval_every,
        epochs=math.ceil(config.train_steps / config.eval_every),
        steps_per_epoch=config.eval_every * batches_per_update,
        validation_data=dev_data,
        validation_steps=config.eval_steps,
        callbacks=[NonFiniteLossGuard(output_dir), monitor, *callbacks,
                   CheckpointSaver(manager, config.save_checkpoints_steps, config.train_steps)],
        shuffle=False,  # the pipeline shuffles
        verbose=0)
    return model
