"""Multi-head scaled dot-product attention (§3.2), its padding and causal masks, and its decoding
caches."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers.attention import (FixedLengthCache, MemoryCache, MultiHeadAttention,
                                       SlicedCache, causal_bias, padding_bias)

RNG = np.random.default_rng(0)


def _random(*shape):
    return RNG.normal(size=shape).astype("float32")


def _softmax(logits):
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def _numpy_attention(layer, query, memory, num_heads):
    """The §3.2.2 equations written out with the layer's kernels."""
    kernel = {name: np.asarray(getattr(layer, f"{name}_dense").kernel)
              for name in ("query", "key", "value", "output")}
    depth = query.shape[-1] // num_heads
    q, k, v = query @ kernel["query"], memory @ kernel["key"], memory @ kernel["value"]
    heads, weights = [], []
    for h in range(num_heads):
        part = slice(h * depth, (h + 1) * depth)
        w = _softmax(q[..., part] @ np.swapaxes(k[..., part], -1, -2) / np.sqrt(depth))
        heads.append(w @ v[..., part])
        weights.append(w)
    return np.concatenate(heads, axis=-1) @ kernel["output"], np.stack(weights, axis=1)


def test_one_head_scales_by_inverse_sqrt_depth():
    layer = MultiHeadAttention(num_heads=1)
    query, memory = _random(2, 3, 4), _random(2, 5, 4)
    output, weights = layer(query, memory, return_attention_scores=True)
    # One head of depth 4: logits are q.k / 2.
    expected_output, expected_weights = _numpy_attention(layer, query, memory, num_heads=1)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(output, expected_output, rtol=1e-5, atol=1e-5)


def test_two_heads_split_and_combine_like_the_equations():
    layer = MultiHeadAttention(num_heads=2)
    x = _random(2, 4, 8)
    output, weights = layer(x, return_attention_scores=True)  # self-attention
    assert tuple(weights.shape) == (2, 2, 4, 4)
    expected_output, expected_weights = _numpy_attention(layer, x, x, num_heads=2)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(output, expected_output, rtol=1e-5, atol=1e-5)


def test_projections_have_no_bias():
    layer = MultiHeadAttention(num_heads=2)
    layer(_random(1, 2, 4))
    assert len(layer.weights) == 4


def test_padded_keys_get_no_weight():
    padding = np.array([[False, False, True, True], [False, False, False, True]])
    bias = padding_bias(padding)
    assert tuple(bias.shape) == (2, 1, 1, 4)
    layer = MultiHeadAttention(num_heads=2)
    _, weights = layer(_random(2, 3, 8), _random(2, 4, 8), bias=bias,
                       return_attention_scores=True)
    weights = np.asarray(weights)
    assert np.all(weights[0, :, :, 2:] < 1e-9) and np.all(weights[1, :, :, 3] < 1e-9)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)


def test_causal_mask_hides_the_future():
    bias = np.asarray(causal_bias(4))[0, 0]
    assert bias[1, 0] == 0 and bias[1, 1] == 0 and bias[1, 2] == pytest.approx(-1e9)
    layer = MultiHeadAttention(num_heads=2)
    _, weights = layer(_random(2, 4, 8), bias=causal_bias(4), return_attention_scores=True)
    above_diagonal = np.triu(np.ones((4, 4), bool), k=1)
    assert np.all(np.asarray(weights)[..., above_diagonal] < 1e-9)
    assert np.asarray(weights)[0, 0, 0, 0] == pytest.approx(1.0)  # position 0 sees only itself


@pytest.mark.parametrize("dtype", ["float32", "mixed_float16"])
def test_all_masked_row_stays_finite(dtype):
    # float16 turns -1e9 into -inf; a source of nothing but PAD must not give NaN.
    layer = MultiHeadAttention(num_heads=2, dtype=dtype)
    output, weights = layer(_random(1, 2, 8), _random(1, 3, 8),
                            bias=padding_bias(np.array([[True, True, True]])),
                            return_attention_scores=True)
    assert np.all(np.isfinite(np.asarray(output, "float32")))
    np.testing.assert_allclose(weights, 1 / 3, rtol=1e-6)


def test_dropout_on_weights_only_in_training():
    layer = MultiHeadAttention(num_heads=2, dropout=0.5)
    x = _random(2, 6, 8)
    np.testing.assert_allclose(layer(x), layer(x, training=False))
    assert not np.allclose(layer(x, training=True), layer(x))


def test_masked_attention_with_dropout_compiles_with_xla():
    layer = MultiHeadAttention(num_heads=2, dropout=0.5)
    x = _random(2, 4, 8)

    @tf.function(jit_compile=True, input_signature=[tf.TensorSpec([None, None, 8])])
    def forward(x):
        bias = causal_bias(tf.shape(x)[1])
        return layer(x, bias=bias), layer(x, bias=bias, training=True)

    inference, training = forward(x)
    np.testing.assert_allclose(inference, layer(x, bias=causal_bias(4)), rtol=1e-5, atol=1e-6)
    assert not np.allclose(training, inference)


def test_config_round_trip():
    layer = MultiHeadAttention(num_heads=4, dropout=0.25, name="att")
    clone = MultiHeadAttention.from_config(layer.get_config())
    assert (clone.num_heads, clone.dropout, clone.name) == (4, 0.25, "att")
    assert clone.kernel_initializer.get_config() == layer.kernel_initializer.get_config()


def test_the_four_projections_start_from_independent_draws():
    """One Keras initializer instance gives the same values at every call; each projection
    must draw its own (t2t's did), also from a seeded initializer, reproducibly."""
    x = tf.constant(RNG.normal(size=(1, 3, 8)), tf.float32)
    layer = MultiHeadAttention(num_heads=2)
    layer(x, x)
    kernels = [weight.numpy() for weight in layer.weights]
    assert len(kernels) == 4
    for i in range(4):
        for j in range(i):
            assert not np.allclose(kernels[i], kernels[j]), (i, j)
    seeded = [MultiHeadAttention(num_heads=2, kernel_initializer=keras.initializers.GlorotUniform(
        seed=7)) for _ in range(2)]
    for layer in seeded:
        layer(x, x)
    first, second = ([weight.numpy() for weight in layer.weights] for layer in seeded)
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
    assert not np.allclose(first[0], first[1])


@pytest.mark.parametrize("queries_per_row", [1, 3])
def test_beams_share_their_sentence_memory(queries_per_row):
    """A MemoryCache with one memory row per n query rows (beam search's n beams of one
    sentence): each query row attends over its own sentence's keys, as the §3.2.2 equations
    with the memory repeated per beam, padded keys masked."""
    layer = MultiHeadAttention(num_heads=2)
    memory = _random(2, 5, 8)
    queries = _random(2 * queries_per_row, 8)
    padding = np.array([[False] * 5, [False, False, False, True, True]])
    layer(queries[:2, None, :], memory)  # builds the projections
    cache = layer.project_memory(memory)
    assert isinstance(cache, MemoryCache) and tuple(cache.key.shape) == (2, 2, 5, 4)
    output, returned = layer.call(queries, bias=padding_bias(padding), cache=cache)
    assert returned is cache  # a memory's keys and values do not change
    repeated = np.repeat(memory, queries_per_row, axis=0)
    kept = np.repeat(~padding, queries_per_row, axis=0)
    expected = np.stack([
        _numpy_attention(layer, queries[row, None], repeated[row][kept[row]], num_heads=2)[0][0]
        for row in range(len(queries))])
    assert tuple(output.shape) == (2 * queries_per_row, 8)
    np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("room", [4, 6])
def test_one_call_a_position_with_a_cache_equals_the_causal_call(room):
    """Self-attention one position at a time, each call with the cache of the earlier ones
    (with room for 4 or 6 positions), gives row by row what one causal call over the whole
    sequence gives; the cache holds every position's keys and values."""
    layer = MultiHeadAttention(num_heads=2)
    x = _random(3, 4, 8)
    whole = np.asarray(layer(x, bias=causal_bias(4)))
    cache = layer.empty_cache(3, room)
    assert isinstance(cache, FixedLengthCache)
    for position in range(4):
        output, cache = layer(x[:, position], cache=cache, position=position)
        assert tuple(output.shape) == (3, 8)
        np.testing.assert_allclose(output, whole[:, position], rtol=1e-5, atol=1e-5)
        assert tuple(cache.key.shape) == tuple(cache.value.shape) == (3, 2, room, 4)
    keys = np.asarray(layer.split_heads(layer.key_dense(x)))
    np.testing.assert_allclose(np.asarray(cache.key)[:, :, :4], keys, rtol=1e-6, atol=1e-6)


def test_a_fixed_length_cache_writes_one_position_and_hides_the_later_ones():
    cache = FixedLengthCache(np.zeros((1, 1, 3, 2), np.float32), np.zeros((1, 1, 3, 2), np.float32))
    key, value = np.ones((1, 1, 1, 2), np.float32), np.full((1, 1, 1, 2), 2, np.float32)
    cache, bias = cache.add(key, value, 1)
    np.testing.assert_array_equal(np.asarray(cache.key)[0, 0, :, 0], [0, 1, 0])
    np.testing.assert_array_equal(np.asarray(cache.value)[0, 0, :, 0], [0, 2, 0])
    np.testing.assert_array_equal(np.asarray(bias)[0, 0, 0], [0, 0, -1e9])


def test_a_sliced_cache_writes_what_a_fixed_length_cache_writes():
    """SlicedCache (a room that may grow, without XLA) writes the position by slicing around
    it: the keys and values of FixedLengthCache's masked write, and the bias it is given."""
    key, value, new_key, new_value = _random(2, 3, 5, 4), _random(2, 3, 5, 4), \
        _random(2, 3, 1, 4), _random(2, 3, 1, 4)
    fixed, bias = FixedLengthCache(key, value).add(new_key, new_value, 2)
    sliced, given = SlicedCache(key, value, bias).add(new_key, new_value, 2)
    assert isinstance(sliced, FixedLengthCache) and given is bias
    np.testing.assert_array_equal(np.asarray(sliced.key), np.asarray(fixed.key))
    np.testing.assert_array_equal(np.asarray(sliced.value), np.asarray(fixed.value))
