"""One training or evaluation step of a model under any tf.distribute strategy, with or
without XLA (`jit_compile`: trainer.xla_pays), in the arrangement that compiles each replica's
step under MirroredStrategy and MultiWorkerMirroredStrategy alike (Keras 3 `fit` does neither:
keras-team/keras#20585): the global batch's target tokens counted across replicas (t2t divides
the summed loss by them), each replica's forward and backward pass in one compiled function,
the gradients summed in one batched all-reduce and applied once by the optimizer. Each training
batch's number is the model's `dropout_seed` (layers.dropout), so that a resumed run trains on
the masks of the run it continues. Each step returns the batch's sums (COUNTS), over replicas.
"""
import tensorflow as tf

from t2t_lite.training import losses, output_layer_loss

SUM = tf.distribute.ReduceOp.SUM
COUNTS = ("loss_sum", "target_tokens", "correct_tokens", "padded_tokens", "real_tokens")


class TrainingSteps:
    """A model, its optimizer and the strategy whose scope created them, as step functions.

    `train_step(batch)` and `eval_step(batch)` take an element of `distribute(dataset)` and
    return {name: scalar tensor} for the names in COUNTS; `last_batch` is the batch last
    trained.
    """

    def __init__(self, model, optimizer, hparams, strategy=None, jit_compile: bool = True):
        self.model = model
        self.optimizer = optimizer
        self.hparams = hparams
        self.strategy = strategy or tf.distribute.get_strategy()
        self.batches_per_update = max(1, hparams.optimizer_multistep_accumulate_steps)
        self.batches_trained = None  # counted from the optimizer's step at the first batch
        self.last_batch = None  # the batch of the last train_step (NonFiniteLossGuard)
        self.jit_compile = jit_compile  # XLA needs the output layer's chunks of one shape
        if not optimizer.built:  # its slots must be created in the strategy's scope
            with self.strategy.scope():
                optimizer.build(model.trainable_variables)
        # reduce_retracing: after the first few shapes the trace is shape-generic, and XLA
        # compiles once per concrete batch shape (one per length bucket).
        self.replica_gradients = tf.function(self._loss_and_gradients, jit_compile=jit_compile,
                                             reduce_retracing=True)
        self.replica_counts = tf.function(self._counts, jit_compile=jit_compile,
                                          reduce_retracing=True)
        self._train_step = tf.function(self._distributed_train_step, reduce_retracing=True)
        self._eval_step = tf.function(self._distributed_eval_step, reduce_retracing=True)

    def distribute(self, dataset: tf.data.Dataset):
        """Splits every global batch between the replicas. Across workers each worker reads
        the whole (identically seeded) stream and keeps its own share of each batch, so that
        two workers of one replica see the batches two local replicas would."""
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA)
        return self.strategy.experimental_distribute_dataset(dataset.with_options(options))

    def train_step(self, batch) -> dict:
        if self.batches_trained is None:
            self.batches_trained = int(self.optimizer.iterations.numpy()) * self.batches_per_update
        counts = self._train_step(batch, tf.constant(self.batches_trained, tf.int64))
        self.batches_trained += 1
        self.last_batch = batch
        return counts

    def eval_step(self, batch) -> dict:
        return self._eval_step(batch)

    # --- Per replica (compiled) ---------------------------------------------------------------

    def _counts(self, features, training=False, dropout_seed=None):
        targets, hp = features["targets"], self.hparams
        if hp.output_layer_chunk_rows:
            loss_sum, tokens, correct = output_layer_loss.loss_sum_tokens_and_correct(
                self.model.decoder_output(features, training, dropout_seed),
                self.model.softmax_weights, targets, hp.label_smoothing,
                hp.output_layer_chunk_rows, with_gradients=training,
                fixed_chunk_shape=self.jit_compile)
        else:
            logits = self.model(features, training=training, dropout_seed=dropout_seed)
            loss_sum, tokens = losses.loss_sum_and_tokens(logits, targets, hp.label_smoothing)
            correct = losses.correct_tokens(logits, targets)
        padded = real = 0.0
        for ids in (features["inputs"], features["targets"]):
            padded += tf.cast(tf.size(ids), tf.float32)
            real += tf.reduce_sum(losses.target_weights(ids))
        return {"loss_sum": loss_sum, "target_tokens": tokens, "correct_tokens": correct,
                "padded_tokens": padded, "real_tokens": real}

    def _loss_and_gradients(self, features, global_tokens, batch_number=None):
        with tf.GradientTape() as tape:
            counts = self._counts(features, training=True, dropout_seed=batch_number)
            loss = self.optimizer.scale_loss(counts["loss_sum"] / tf.maximum(global_tokens, 1.0))
        return counts, tape.gradient(loss, self.model.trainable_variables)

    # --- Across replicas ------------------------------------------------------------------------

    def _distributed_train_step(self, batch, batch_number):
        strategy = self.strategy
        tokens = strategy.run(lambda features: tf.reduce_sum(
            losses.target_weights(features["targets"])), args=(batch,))
        global_tokens = self._sum_over_replicas(tokens)
        # A Python function around the compiled one: strategy.run of the XLA function itself
        # fails to reach the second device's variables.
        counts, gradients = strategy.run(
            lambda features, tokens: self.replica_gradients(features, tokens, batch_number),
            args=(batch, global_tokens))
        gradients = self._sum_over_replicas(gradients)
        if self.hparams.clip_grad_norm:
            gradients, _ = tf.clip_by_global_norm(gradients, self.hparams.clip_grad_norm)
        self.optimizer.apply(gradients, self.model.trainable_variables)
        return self._sum_over_replicas(counts)

    def _distributed_eval_step(self, batch):
        counts = self.strategy.run(lambda features: self.replica_counts(features),
                                   args=(batch,))
        return self._sum_over_replicas(counts)

    def _sum_over_replicas(self, values):
        """Sums a nest of per-replica tensors over all replicas (of all workers) in one batched
        all-reduce; the result is the first local replica's copy."""
        if self.strategy.num_replicas_in_sync == 1:
            return tf.nest.map_structure(
                lambda value: self.strategy.experimental_local_results(value)[0], values)
        flat = tf.nest.flatten(values)
        summed = self.strategy.extended.batch_reduce_to(SUM, [(value, value) for value in flat])
        return tf.nest.pack_sequence_as(
            values, [self.strategy.experimental_local_results(value)[0] for value in summed])
