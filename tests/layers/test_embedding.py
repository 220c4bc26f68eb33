"""Token embeddings and the shared pre-softmax projection (§3.4)."""
import numpy as np
import pytest

from t2t_lite.data.vocab import PAD_ID
from t2t_lite.layers.embedding import TokenEmbedding, make_embeddings


def test_initial_weights_have_std_inverse_sqrt_depth():
    layer = TokenEmbedding(4000, 64, PAD_ID)
    layer.build()
    weights = np.asarray(layer.embeddings)
    assert weights.std() == pytest.approx(64**-0.5, rel=0.03)  # 0.125
    assert abs(weights.mean()) < 0.01


def test_embedding_is_scaled_by_sqrt_depth_and_zero_at_pad():
    layer = TokenEmbedding(10, 16, PAD_ID)
    ids = np.array([[3, 1, 0, 0], [0, 9, 2, 0]])
    vectors = np.asarray(layer(ids))
    weights = np.asarray(layer.embeddings)
    assert vectors.shape == (2, 4, 16)
    np.testing.assert_allclose(vectors[0, 0], weights[3] * 4.0, rtol=1e-6)  # sqrt(16) = 4
    np.testing.assert_allclose(vectors[1, 1], weights[9] * 4.0, rtol=1e-6)
    np.testing.assert_array_equal(vectors[ids == 0], 0.0)


def test_the_zero_embedding_is_that_of_the_pad_id_passed():
    layer = TokenEmbedding(10, 4, pad_id=3)
    ids = np.array([[3, 0, 5, 3]])
    vectors = np.asarray(layer(ids))
    np.testing.assert_array_equal(vectors[ids == 3], 0.0)
    assert np.all(vectors[ids != 3] != 0.0)


def test_reverse_is_the_transposed_matrix_in_float32():
    layer = TokenEmbedding(10, 16, PAD_ID)
    layer.build()
    x = np.random.default_rng(0).normal(size=(2, 3, 16)).astype("float32")
    logits = layer(x, reverse=True)
    assert logits.dtype == "float32" and tuple(logits.shape) == (2, 3, 10)
    np.testing.assert_allclose(logits, x @ np.asarray(layer.embeddings).T, rtol=1e-5, atol=1e-5)


def test_shared_embeddings_are_one_variable():
    source, target, softmax = make_embeddings(10, 8, PAD_ID, shared=True)
    assert source is target is softmax
    source(np.array([[1, 2]]))
    softmax(np.zeros((1, 2, 8), "float32"), reverse=True)
    assert len(source.weights) == 1


def test_unshared_embeddings_are_three_variables():
    layers = make_embeddings(10, 8, PAD_ID, shared=False)
    for layer in layers:
        layer.build()
    assert len({id(layer.embeddings) for layer in layers}) == 3
    assert [layer.name for layer in layers] == [
        "source_embedding", "target_embedding", "softmax_embedding"]


def test_config_round_trip():
    config = TokenEmbedding(12, 6, 3, name="e").get_config()
    clone = TokenEmbedding.from_config(config)
    assert (clone.vocab_size, clone.hidden_size, clone.pad_id, clone.name) == (12, 6, 3, "e")
