"""Residual sublayer connections with t2t's pre/post-process sequences (§3.1, §5.4)."""
import numpy as np
import pytest

from t2t_lite.layers.sublayer import LayerProcess, SublayerConnection

EPSILON = 1e-6
X = np.random.default_rng(0).normal(2.0, 3.0, size=(2, 3, 8)).astype("float32")


def _layer_norm(x):
    """LayerNorm at initialisation (scale 1, bias 0)."""
    mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + EPSILON)


def _f(y):
    return 2.0 * y + 1.0


def test_pre_norm_is_x_plus_f_of_norm_x():
    connection = SublayerConnection("n", "da", dropout=0.0, epsilon=EPSILON)
    np.testing.assert_allclose(connection(X, sublayer=_f), X + _f(_layer_norm(X)), rtol=1e-5,
                               atol=1e-5)


def test_post_norm_is_norm_of_x_plus_f_x():
    connection = SublayerConnection("none", "dan", dropout=0.0, epsilon=EPSILON)
    np.testing.assert_allclose(connection(X, sublayer=_f), _layer_norm(X + _f(X)), rtol=1e-5,
                               atol=1e-5)


def test_each_norm_has_its_own_weights():
    connection = SublayerConnection("n", "dan")
    connection(X, sublayer=_f)
    assert len(connection.weights) == 4  # scale and bias of the pre norm and the post norm


def test_extra_sublayer_outputs_pass_through():
    connection = SublayerConnection("none", "da", dropout=0.0)
    output, extra = connection(X, sublayer=lambda y: (_f(y), "weights"))
    np.testing.assert_allclose(output, X + _f(X), rtol=1e-6)
    assert extra == "weights"


def test_dropout_letter_only_in_training():
    process = LayerProcess("d", dropout=0.5)
    np.testing.assert_array_equal(process(X), X)
    assert not np.allclose(process(X, training=True), X)


def test_none_is_identity_and_final_norm_is_a_layer_norm():
    np.testing.assert_array_equal(LayerProcess("none")(X), X)
    np.testing.assert_allclose(LayerProcess("n", epsilon=EPSILON)(X), _layer_norm(X),
                               rtol=1e-5, atol=1e-5)


def test_bad_sequences_are_rejected():
    with pytest.raises(ValueError, match="sequence='nx': use 'none' or letters of 'nda'"):
        LayerProcess("nx")
    with pytest.raises(ValueError, match="postprocess='': use 'none'"):
        SublayerConnection("n", "")
    with pytest.raises(ValueError, match="residual"):
        SublayerConnection("a", "d")
    with pytest.raises(ValueError, match="residual"):
        LayerProcess("a")(X)


def test_config_round_trip():
    config = SublayerConnection("none", "dan", dropout=0.2, epsilon=1e-5).get_config()
    clone = SublayerConnection.from_config(config)
    assert (clone.preprocess, clone.postprocess, clone.dropout, clone.epsilon) == (
        "none", "dan", 0.2, 1e-5)
