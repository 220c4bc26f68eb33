"""The dense projection of the attention and feed-forward layers: `keras.layers.Dense`, with two
other ways to compute its products that give the same values.

y = x W + b over the last axis, as Keras computes it (the same variables, names and config).

- Training: when the training step allows the BLAS op (`t2t_lite.blas.matmul`), the gradient
  with respect to W, x^T dy summed over every position of the batch, is computed through it:
  TensorFlow's own CPU matmul runs that product, long in its inner dimension, at about half the
  rate of its forward product (benchmarks/README.md, "blas_speed.py").
- Decoding steps: within `decoding_layout.transposed_for_decoding(...)`, a call on one position
  per row (x of rank 2) multiplies a square or widening kernel as x (W^T)^T, from the W^T
  made there (layers/decoding_layout.py says why).
"""
import keras
import tensorflow as tf

from t2t_lite.blas import matmul as blas
from t2t_lite.layers import decoding_layout


@keras.saving.register_keras_serializable(package="t2t_lite")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` (same arguments), computed as described above."""

    def call(self, inputs, training=None):
        inputs = tf.convert_to_tensor(inputs)
        transposed = decoding_layout.transposed(self.kernel)
        if transposed is not None and inputs.shape.rank == 2:
            outputs = tf.matmul(inputs, tf.cast(transposed, inputs.dtype), transpose_b=True)
            return self._bias_and_activation(outputs)
        if not blas.in_use(inputs):  # (the kernel, cast to the inputs' dtype, follows them)
            return super().call(inputs, training=training)
        kernel = tf.convert_to_tensor(self.kernel)
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
