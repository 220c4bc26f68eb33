"""The dense projection of the attention and feed-forward layers: `keras.layers.Dense`, with two
choices of CPU kernel that give the same values.

y = x W + b over the last axis, as Keras computes it (the same variables, names and config).

- Training: when the training step allows the BLAS kernels (`t2t_lite.blas.matmul`), the
  gradient with respect to W, x^T dy summed over every position of the batch, is computed
  through them: TensorFlow's CPU kernels run that product, long in its inner dimension, at
  about half the rate of its forward product (benchmarks/README.md, "blas_speed").
- Decoding steps: within `transposed_kernels(...)`, a call on one position per row (x of rank
  2) multiplies a square or widening kernel (d_out >= d_in) as x (W^T)^T, from W^T made once
  when the block is entered, outside the search loop: oneDNN runs that layout faster for the
  few hundred rows of a decoding step on one thread, and a narrowing one slower
  (benchmarks/README.md, "profile_decode").
"""
import contextlib
import contextvars

import keras
import tensorflow as tf

from t2t_lite.blas import matmul as blas

_transposed = contextvars.ContextVar("t2t_lite_transposed_kernels", default={})


@contextlib.contextmanager
def transposed_kernels(variables):
    """Within the block, Dense layers whose kernel is among `variables` and is square or
    widening multiply inputs of rank 2 by a transposed copy of it made here (enter the block
    where the copies should be made: before a decoding loop, inside the traced function)."""
    copies = {id(variable): tf.transpose(tf.convert_to_tensor(variable))
              for variable in variables
              if len(variable.shape) == 2 and variable.shape[1] >= variable.shape[0]}
    token = _transposed.set({**_transposed.get(), **copies})
    try:
        yield
    finally:
        _transposed.reset(token)


@keras.saving.register_keras_serializable(package="t2t_lite")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` (same arguments) with the kernels described above."""

    def call(self, inputs, training=None):
        inputs = tf.convert_to_tensor(inputs)
        transposed = _transposed.get().get(id(self.kernel))
        if transposed is not None and inputs.shape.rank == 2:
            outputs = tf.matmul(inputs, tf.cast(transposed, inputs.dtype), transpose_b=True)
            return self._bias_and_activation(outputs)
        kernel = tf.convert_to_tensor(self.kernel)
        if not blas.in_use(inputs, kernel):
            return super().call(inputs, training=training)
        rows = tf.reshape(inputs, [-1, inputs.shape[-1]])
        outputs = tf.reshape(_product_with_blas_kernel_gradient(rows, kernel),
                             tf.concat([tf.shape(inputs)[:-1], [self.units]], axis=0))
        outputs.set_shape(inputs.shape[:-1].concatenate([self.units]))
        return self._bias_and_activation(outputs)

    def _bias_and_activation(self, outputs):
        if self.bias is not None:
            # bias_add, not +: grappler fuses MatMul, BiasAdd and Relu into one oneDNN op.
            outputs = tf.nn.bias_add(outputs, tf.cast(self.bias, outputs.dtype))
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs


@tf.custom_gradient
def _product_with_blas_kernel_gradient(rows, kernel):
    """rows [n, d_in] @ kernel [d_in, d_out], with d/d kernel = rows^T dy through blas.matmul."""
    def gradient(upstream):
        return (tf.matmul(upstream, kernel, transpose_b=True),
                blas.matmul(rows, upstream, transpose_a=True))

    return tf.matmul(rows, kernel), gradient
