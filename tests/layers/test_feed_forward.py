"""The position-wise feed-forward network (§3.3)."""
import numpy as np

from t2t_lite.layers.feed_forward import FeedForward


def test_relu_between_two_linear_maps():
    layer = FeedForward(filter_size=12)
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32")
    output = layer(x)
    w1, b1 = np.asarray(layer.filter_dense.kernel), np.asarray(layer.filter_dense.bias)
    w2, b2 = np.asarray(layer.output_dense.kernel), np.asarray(layer.output_dense.bias)
    assert w1.shape == (4, 12) and w2.shape == (12, 4)
    np.testing.assert_allclose(output, np.maximum(x @ w1 + b1, 0) @ w2 + b2, rtol=1e-5,
                               atol=1e-6)


def test_relu_dropout_only_in_training():
    layer = FeedForward(filter_size=32, dropout=0.5)
    x = np.ones((2, 3, 8), "float32")
    np.testing.assert_allclose(layer(x), layer(x, training=False))
    assert not np.allclose(layer(x, training=True), layer(x))


def test_config_round_trip():
    clone = FeedForward.from_config(FeedForward(16, dropout=0.1).get_config())
    assert (clone.filter_size, clone.dropout) == (16, 0.1)
