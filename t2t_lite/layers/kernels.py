"""What the layers with weight matrices share: t2t's default initializer, a kernel of its own
for each projection, and the dropout rate and initializer every such layer takes and saves.
"""
import keras


def default_kernel_initializer(gain=1.0):
    """Glorot-uniform scaled by `gain`: t2t's uniform_unit_scaling(initializer_gain)."""
    return keras.initializers.VarianceScaling(scale=gain, mode="fan_avg",
                                              distribution="uniform")


def independent_copy(initializer, index: int):
    """A copy of `initializer` that draws values of its own for the index-th kernel of a layer.

    A Keras 3 initializer instance returns the same values at every call of one shape (an
    unseeded one draws its seed once, when it is created), so kernels built from one instance
    would all start equal: the query, key, value and output projections of an attention layer
    would be one matrix. tensor2tensor drew every kernel independently. A copy of an unseeded
    initializer draws a new seed; a seeded one's copy gets seed + index, so a seeded run stays
    reproducible.
    """
    config = initializer.get_config()
    if isinstance(config.get("seed"), int):
        config["seed"] += index
    elif "seed" in config:
        config["seed"] = None
    return initializer.__class__.from_config(config)


class LayerWithKernels(keras.layers.Layer):
    """A layer of Dense projections with dropout inside (attention, feed-forward).

    Args:
        dropout: the layer's inner dropout rate. Default 0.
        kernel_initializer: initializer of every kernel, each drawn on its own
            (`kernel_initializer_of`). Default Glorot-uniform.
    """

    def __init__(self, dropout=0.0, kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or default_kernel_initializer())

    def kernel_initializer_of(self, index: int):
        """The initializer of the layer's index-th kernel (independent_copy)."""
        return independent_copy(self.kernel_initializer, index)

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}
