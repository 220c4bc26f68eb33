"""Learning-rate schedules as products of named factors (t2t_lite/learning_rate_factors.py), as
tensor2tensor's `learning_rate.py`.

    transformer_base_v1:  constant * noam
        = 1.0 * d^-0.5 * min(step^-0.5, step * warmup^-1.5)            (paper §5.3, eq. 3)
    transformer_base:     constant * linear_warmup * rsqrt_decay * rsqrt_hidden_size
        = 2.0 * min(1, step / warmup) * rsqrt(max(step, warmup)) * d^-0.5

`step` counts from 1 at the first update: the optimizer's update k (0-based) uses step k + 1, so
no update is wasted on a learning rate of 0. With gradient accumulation over K batches the step
advances once per applied update, not once per batch.
"""
import keras
import tensorflow as tf

from t2t_lite.hparams_lib import HParams
from t2t_lite.learning_rate_factors import LEARNING_RATE_FACTORS


def learning_rate(step, hparams):
    """The product of the factors in hparams.learning_rate_schedule at `step` (>= 1)."""
    step = tf.cast(step, tf.float32)
    rate = tf.constant(1.0, tf.float32)
    for name in hparams.learning_rate_schedule:
        rate *= LEARNING_RATE_FACTORS[name](step, hparams)
    return rate


@keras.saving.register_keras_serializable(package="t2t_lite")
class LearningRateSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The hparams' schedule for a Keras optimizer, called with its 0-based count of batches
    (Keras counts batches, not updates, when it accumulates gradients)."""

    def __init__(self, hparams):
        self.hparams = hparams

    def __call__(self, iterations):
        batches_per_update = max(1, self.hparams.optimizer_multistep_accumulate_steps)
        updates = tf.math.floordiv(tf.cast(iterations, tf.int64), batches_per_update)
        return learning_rate(tf.cast(updates, tf.float32) + 1.0, self.hparams)

    def get_config(self):
        return {"hparams": self.hparams.to_dict()}

    @classmethod
    def from_config(cls, config):
        return cls(HParams.from_dict(config["hparams"]))
