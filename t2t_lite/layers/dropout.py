"""Dropout (paper §5.4, Srivastava et al. 2014) with a cheaper mask than Keras's: 16 random
bits per element (one Philox uint32 gives two), the mask made in one select of two scalars and
the output x * mask, whose gradient is g * mask (Keras's stateless_dropout draws a float32 per
element, then a zeros_like and a select, each a pass over the attention weights on a CPU).

An element is kept when its bits are at least round(rate * 65536) (the rate applied is that
count / 65536) and scaled by 65536 / (kept count), so that E[output] = x. Under several
replicas each folds its id into the seed (Keras's SeedGenerator gives all the same one). Called
with a `seed` (in training, the batch's number), a layer's mask is a function of its own seed
and that number, not of the generator's running state, which checkpoints do not hold.
"""
import keras
import tensorflow as tf

RANDOM_BITS = 16
LEVELS = 1 << RANDOM_BITS


def threshold_and_scale(rate: float) -> tuple:
    """The smallest 16-bit value that is kept, and the scale of the kept elements."""
    threshold = min(round(rate * LEVELS), LEVELS - 1)
    return threshold, LEVELS / (LEVELS - threshold)


def random_uint16(shape, seed):
    """Uniform uint16 values of `shape`: the two halves of each Philox uint32 (the last axis
    drawn rounded up to even, then cut back)."""
    shape = tf.convert_to_tensor(shape, tf.int32)
    last = shape[-1]
    pairs = tf.concat([shape[:-1], [(last + 1) // 2]], axis=0)
    words = tf.random.stateless_uniform(pairs, seed, minval=None, maxval=None, dtype=tf.uint32)
    halves = tf.bitcast(words, tf.uint16)  # [..., (last + 1) // 2, 2]
    return tf.reshape(halves, tf.concat([shape[:-1], [-1]], axis=0))[..., :last]


def replica_seed(seed):
    """`seed` [2] with this replica's id folded in, when the current tf.distribute replica
    context has several replicas (ids are global across workers); `seed` itself otherwise."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return seed
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    return tf.random.experimental.stateless_fold_in(seed, replica, alg="philox")


def folded_seed(layer_seed, numbers) -> tf.Tensor:
    """[2]: [layer_seed, 0] (int64) with each of `numbers` (a scalar or a tuple of them) folded
    in, in turn (Philox; the result takes the dtype of the last number folded)."""
    seed = tf.stack([tf.cast(layer_seed, tf.int64), tf.constant(0, tf.int64)])
    for number in numbers if isinstance(numbers, tuple) else (numbers,):
        seed = tf.random.experimental.stateless_fold_in(seed, number, alg="philox")
    return seed


@keras.saving.register_keras_serializable(package="t2t_lite")
class Dropout(keras.layers.Dropout):
    """Inverted dropout with a 16-bit mask: zeroes each element with probability `rate` (to
    1/65536) and scales the others so that the expected output is the input.

    Same arguments, seed handling (a Keras SeedGenerator: a new mask on every call,
    reproducible from `seed`) and config as keras.layers.Dropout, without noise_shape.

    Call arguments:
        inputs; training: enables dropout.
        seed: None, or an int64 scalar (or a tuple of them) folded into the layer's seed (the
            first half of its SeedGenerator's state, which `next` leaves as it is): the mask
            is then a function of the two (folded_seed), whatever was drawn before.
    """

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        if noise_shape is not None:
            raise ValueError("t2t_lite Dropout: noise_shape is not supported")
        super().__init__(rate, seed=seed, **kwargs)

    def call(self, inputs, training=False, seed=None):
        if not training or self.rate <= 0:
            return inputs
        if self.rate >= 1:
            return tf.zeros_like(inputs)
        threshold, scale = threshold_and_scale(self.rate)
        if seed is None:
            seed = tf.cast(self.seed_generator.next(), tf.int64)
        else:
            seed = folded_seed(self.seed_generator.state.value[0], seed)
        seed = replica_seed(seed)
        bits = random_uint16(tf.shape(inputs), seed)
        mask = tf.where(bits >= tf.constant(threshold, tf.uint16),
                        tf.constant(scale, inputs.dtype), tf.constant(0, inputs.dtype))
        return inputs * tf.stop_gradient(mask)
