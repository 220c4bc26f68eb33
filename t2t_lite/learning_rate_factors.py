"""The named factors of a learning-rate schedule (paper §5.3, tensor2tensor's learning_rate.py).

hparams.learning_rate_schedule lists factor names; the learning rate at a step is the product of
those factors (training/schedules.py). Each factor maps (step, hparams) to a float32 scalar,
`step` a float32 scalar counted from 1. HParams checks the names against LEARNING_RATE_FACTORS,
so the table lives here, below hparams_lib, rather than in training/.
"""
import tensorflow as tf


def _warmup(hparams):
    return tf.cast(hparams.learning_rate_warmup_steps, tf.float32)


def constant(step, hparams):
    """learning_rate_constant."""
    return tf.constant(hparams.learning_rate_constant, tf.float32)


def linear_warmup(step, hparams):
    """min(1, step / warmup)."""
    return tf.minimum(1.0, step / _warmup(hparams))


def rsqrt_decay(step, hparams):
    """rsqrt(max(step, warmup))."""
    return tf.math.rsqrt(tf.maximum(step, _warmup(hparams)))


def rsqrt_hidden_size(step, hparams):
    """hidden_size ** -0.5."""
    return tf.constant(hparams.hidden_size ** -0.5, tf.float32)


def noam(step, hparams):
    """The paper's eq. 3: d^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    return hparams.hidden_size ** -0.5 * tf.minimum(tf.math.rsqrt(step),
                                                    step * _warmup(hparams) ** -1.5)


LEARNING_RATE_FACTORS = {factor.__name__: factor for factor in (
    constant, linear_warmup, rsqrt_decay, rsqrt_hidden_size, noam)}
