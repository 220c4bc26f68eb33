"""The projection layer is keras.layers.Dense: the same variables, config, values and
gradients."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers.dense import Dense

INPUT_SHAPE = (3, 5, 8)


def twin_layers(**arguments):
    """A t2t_lite Dense and a keras Dense with the same weights, built for INPUT_SHAPE."""
    ours, theirs = Dense(6, name="ours", **arguments), keras.layers.Dense(6, **arguments)
    ours.build(INPUT_SHAPE)
    theirs.build(INPUT_SHAPE)
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in theirs.weights]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    return ours, theirs


def values_and_gradients(layer, x):
    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * tf.cos(y))  # a non-uniform upstream gradient
        return y, tape.gradient(loss, [x] + layer.trainable_weights)
    return run(x)


@pytest.mark.parametrize("arguments", [dict(activation="relu"), dict(use_bias=False)])
def test_same_values_and_gradients_as_keras_dense(arguments):
    ours, theirs = twin_layers(**arguments)
    x = tf.constant(np.random.default_rng(1).normal(size=INPUT_SHAPE).astype(np.float32))
    want, want_gradients = values_and_gradients(theirs, x)
    got, got_gradients = values_and_gradients(ours, x)
    assert got.shape == want.shape == (3, 5, 6)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    for got_gradient, want_gradient in zip(got_gradients, want_gradients):
        np.testing.assert_allclose(got_gradient.numpy(), want_gradient.numpy(), rtol=1e-5,
                                   atol=1e-5)


def test_it_keeps_keras_dense_variables_and_config():
    ours, theirs = twin_layers(activation="relu")
    assert [w.path.split("/")[-1] for w in ours.weights] == ["kernel", "bias"]
    config = ours.get_config()
    assert {k: v for k, v in config.items() if k != "name"} == {
        k: v for k, v in theirs.get_config().items() if k != "name"}
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(ours))
    assert isinstance(restored, Dense)
