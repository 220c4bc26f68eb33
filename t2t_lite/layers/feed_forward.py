"""Position-wise feed-forward network (paper §3.3), t2t's dense_relu_dense.

    FFN(x) = relu(x W1 + b1) W2 + b2, with relu_dropout on the hidden layer.
"""
import keras

from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.kernels import LayerWithKernels


@keras.saving.register_keras_serializable(package="t2t_lite")
class FeedForward(LayerWithKernels):
    """§3.3 Position-wise Feed-Forward Network: two linear maps with a relu between them,
    applied to each position separately; the output depth equals the input depth.

    Args:
        filter_size: d_ff, the inner depth (2048 in the base model).
        dropout: relu_dropout, the rate applied after the relu (t2t). Default 0.
        kernel_initializer: initializer of both kernels. Default Glorot-uniform. Biases start at 0.

    Call arguments:
        x: [batch, length, d].
        training: enables dropout; dropout_seed: Dropout's `seed` (layers.dropout).
    """

    def __init__(self, filter_size, dropout=0.0, kernel_initializer=None, **kwargs):
        super().__init__(dropout, kernel_initializer, **kwargs)
        self.filter_size = filter_size

    def build(self, input_shape):
        depth = input_shape[-1]
        self.filter_dense = keras.layers.Dense(
            self.filter_size, activation="relu", name="filter", dtype=self.dtype_policy,
            kernel_initializer=self.kernel_initializer_of(0))
        self.relu_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = keras.layers.Dense(
            depth, name="output", dtype=self.dtype_policy,
            kernel_initializer=self.kernel_initializer_of(1))
        self.filter_dense.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.filter_size,))

    def call(self, x, training=False, dropout_seed=None):
        hidden = self.relu_dropout(self.filter_dense(x), training=training, seed=dropout_seed)
        return self.output_dense(hidden)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "filter_size": self.filter_size}
