"""Dropout with a 16-bit mask (§5.4): the rate, the inverted scale, its gradient, seeds."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers.dropout import Dropout, random_uint16, threshold_and_scale


def test_threshold_and_scale_by_hand():
    # 0.1 * 65536 = 6553.6 -> 6554 dropped values of 65536; kept ones scaled by 65536 / 58982.
    assert threshold_and_scale(0.1) == (6554, 65536 / 58982)
    assert threshold_and_scale(0.5) == (32768, 2.0)


@pytest.mark.parametrize("shape", [(64, 40, 32), (3, 7, 1001)])  # even and odd last axis
def test_drops_at_the_rate_and_keeps_the_expected_value(shape):
    layer = Dropout(0.1, seed=3)
    x = np.random.default_rng(0).uniform(1, 2, size=shape).astype("float32")
    y = np.asarray(layer(x, training=True))
    dropped = y == 0
    # 81,920 and 21,021 Bernoulli(0.1) draws: 5 standard deviations around 0.1.
    sigma = np.sqrt(0.1 * 0.9 / x.size)
    assert abs(dropped.mean() - 0.1) < 5 * sigma
    np.testing.assert_allclose(y[~dropped], x[~dropped] * 65536 / 58982, rtol=1e-6)


def test_sixteen_bit_values_are_uniform():
    bits = np.asarray(random_uint16(tf.constant([200_000, 3]), tf.constant([1, 2], tf.int64)))
    assert bits.shape == (200_000, 3) and bits.min() >= 0 and bits.max() < 65536
    counts = np.bincount(bits.ravel() >> 12, minlength=16)  # 16 bins of the top 4 bits
    expected = bits.size / 16
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))


def test_gradient_is_the_mask_and_inference_is_the_identity():
    layer = Dropout(0.3, seed=1)
    x = tf.constant(np.full((8, 50), 2.0, "float32"))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    gradient = tape.gradient(y, x)
    np.testing.assert_allclose(gradient * 2.0, y)
    np.testing.assert_array_equal(layer(x, training=False), x)


def test_new_mask_each_call_reproducible_from_the_seed():
    x = np.ones((16, 64), "float32")
    first, second = Dropout(0.5, seed=7), Dropout(0.5, seed=7)
    a = np.asarray(first(x, training=True))
    assert not np.array_equal(a, np.asarray(first(x, training=True)))
    np.testing.assert_array_equal(a, second(x, training=True))


def test_same_mask_with_and_without_xla():
    x = tf.ones((4, 9, 33))
    eager = Dropout(0.2, seed=5)(x, training=True)
    layer = Dropout(0.2, seed=5)
    compiled = tf.function(lambda t: layer(t, training=True), jit_compile=True)(x)
    np.testing.assert_array_equal(eager, compiled)


def test_noise_shape_is_refused():
    with pytest.raises(ValueError, match="noise_shape"):
        Dropout(0.1, noise_shape=(1, None))
