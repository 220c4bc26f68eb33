"""The dense projection of the attention and feed-forward layers: `keras.layers.Dense`, with
another way to compute its product in decoding steps that gives the same values.

y = x W + b over the last axis, as Keras computes it (the same variables, names and config).

- Decoding steps: within `decoding_layout.transposed_for_decoding(...)`, a call on one position
  per row (x of rank 2) multiplies a square or widening kernel as x (W^T)^T, from the W^T
  made there (layers/decoding_layout.py says why).
"""
import keras
import tensorflow as tf

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
        return super().call(inputs, training=training)

    def _bias_and_activation(self, outputs):
        if self.bias is not None:
            # bias_add, not +: grappler fuses MatMul, BiasAdd and Relu into one oneDNN op.
            outputs = tf.nn.bias_add(outputs, tf.cast(self.bias, outputs.dtype))
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs
