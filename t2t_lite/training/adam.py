"""Adam (paper §5.3; Kingma and Ba, 2015) with each variable's update in one TensorFlow op.

keras.optimizers.Adam writes the update of a variable as a dozen separate operations (the
moments' differences, products and assignments, a square, a square root, a division), each a
pass over the whole variable, its moments or its gradient. TensorFlow's ResourceApplyAdam, the
op its own Adam used, computes the same update in one pass:

    alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
    m += (g - m) * (1 - beta_1)
    v += (g^2 - v) * (1 - beta_2)
    variable -= alpha * m / (sqrt(v) + epsilon)

the formula, and the order of its operations, of Keras's `Adam.update_step`. `Adam` here is
Keras's Adam with that one op per variable (tests/training/test_adam.py checks it against
Keras's on the same gradients); amsgrad, and variables that are not TensorFlow resource
variables, keep Keras's update.
"""
import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="t2t_lite")
class Adam(keras.optimizers.Adam):
    """keras.optimizers.Adam (same arguments, variables and config), one op per update."""

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or not hasattr(variable, "handle"):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].handle,
            v=self._velocities[index].handle,
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step),
            beta2_power=tf.pow(tf.cast(self.beta_2, dtype), step),
            lr=tf.cast(learning_rate, dtype), beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype), epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype))
