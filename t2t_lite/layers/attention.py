"""Multi-head scaled dot-product attention (paper §3.2.1-3.2.2), its masks and its decoding caches.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + bias) V

Masks are additive biases, as in t2t's common_attention: 0 where attending is allowed and -1e9
where it is not, broadcast against the logits [batch, heads, queries, keys].

Incremental decoding (t2t's fast decoding) goes through the same `MultiHeadAttention.call`, with
a cache of keys and values as its argument (as OpenNMT-tf's attention takes one) and one query
position per row, [rows, d]:

- `FixedLengthCache`: a self-attention's keys and values of the positions decoded so far, one
  row per decoded sequence, with room for more; each step writes its own position.
- `MemoryCache`: the keys and values of the memory (the encoder output), projected once per
  sentence and shared by the query rows of that sentence (beam search's beams).
"""
import warnings
from typing import Any, NamedTuple

import keras
from keras import ops

from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.kernels import LayerWithKernels

NEG_INF = -1e9


def padding_bias(padding):
    """t2t's attention_bias_ignore_padding: bool padding [batch, keys] (True at PAD) ->
    float32 bias [batch, 1, 1, keys] that hides the padded keys from every query."""
    return ops.cast(padding, "float32")[:, None, None, :] * NEG_INF


def causal_bias(length):
    """t2t's attention_bias_lower_triangle: float32 [1, 1, length, length] letting query i see
    keys 0..i only (decoder self-attention, §3.2.3 "prevent leftward information flow")."""
    positions = ops.arange(length)
    future = ops.greater(positions[None, :], positions[:, None])
    return ops.cast(future, "float32")[None, None] * NEG_INF


class FixedLengthCache(NamedTuple):
    """A self-attention's keys and values of the positions decoded so far, [rows, heads, room,
    depth / heads] each, one row per decoded sequence, with room for the later positions
    (`MultiHeadAttention.empty_cache`): a step writes its position and reads the whole room,
    the later positions masked, so that the room's shape need not change at every step (XLA
    compiles fixed shapes only; without XLA the search grows the room a few positions at a
    time, decoding.search)."""
    key: Any
    value: Any

    def add(self, key, value, position):
        """The cache with the keys and values [rows, heads, 1, depth / heads] of `position`
        written at `position`, and the float32 bias [1, 1, 1, max_length] that hides the later
        positions (not decoded yet) from it."""
        # A masked write rather than a dynamic slice update: plain TensorFlow ops, so that an
        # exported search needs no XLA in the server.
        cache_positions = ops.arange(ops.shape(self.key)[2])
        here = ops.equal(cache_positions, position)[None, None, :, None]
        cache = FixedLengthCache(ops.where(here, key, self.key), ops.where(here, value, self.value))
        later = ops.greater(cache_positions, position)
        return cache, ops.cast(later, "float32")[None, None, None, :] * NEG_INF


class SlicedCache(NamedTuple):
    """A FixedLengthCache whose room may change between steps (without XLA): `add` writes the
    position by slicing around it, no masked select over the whole room, and returns `bias`,
    the step's [1, 1, 1, room] mask of the later positions, made once for every layer."""
    key: Any
    value: Any
    bias: Any

    def add(self, key, value, position):
        def written(cache, new):
            return ops.concatenate([cache[:, :, :position], new, cache[:, :, position + 1:]], 2)
        return FixedLengthCache(written(self.key, key), written(self.value, value)), self.bias


class MemoryCache(NamedTuple):
    """The keys and values of a memory (the encoder output), [sentences, heads, keys,
    depth / heads] each, projected once per sentence (t2t's cached k/v_encdec:
    `MultiHeadAttention.project_memory`).

    Query rows may outnumber its rows, rows = n x sentences: each sentence's row then serves n
    consecutive query rows (beam search's n beams of a sentence, in the order of its
    [sentences, beams] flattened), and they attend together as n query positions of one row.
    A head's product is then one [n, depth] x [depth, keys], reading the keys and values once
    for the n beams (t2t and CTranslate2 tile them per beam instead); the bias has one row per
    sentence."""
    key: Any
    value: Any


@keras.saving.register_keras_serializable(package="t2t_lite")
class MultiHeadAttention(LayerWithKernels):
    """§3.2.2 Multi-Head Attention: h heads of scaled dot-product attention over projections.

    Queries come from `query`; keys and values from `memory` (self-attention when it is None).
    As in t2t: separate q, k, v and output projections without bias; queries scaled by
    depth_per_head^-0.5; logits, bias and softmax in float32; dropout on the attention weights.

    Args:
        num_heads: h; the input depth must be divisible by it.
        dropout: attention_dropout, the rate applied to the attention weights. Default 0.
        kernel_initializer: initializer of the four projections. Default Glorot-uniform.

    Call arguments:
        query: [batch, queries, d]; or, decoding, [rows, d]: one position per row.
        memory: [batch, keys, d] or None for self-attention (and with a MemoryCache).
        bias: float additive bias broadcastable to [batch, heads, queries, keys], e.g.
            `padding_bias(...)` or `causal_bias(...)`; None for no mask. A self-attention
            cache makes its own (hiding the positions not decoded yet).
        cache: decoding: the FixedLengthCache of this self-attention's earlier positions (the
            query rows' own position is added), or the MemoryCache of `memory`.
        position: decoding with a self-attention cache: the query rows' position.
        training: enables dropout; dropout_seed: Dropout's `seed` (layers.dropout).
        return_attention_scores: also return the weights [batch, heads, queries, keys] (float32,
            before dropout).

    Returns:
        output (the query's shape); then the weights with `return_attention_scores`; then,
        with a cache, the cache updated.
    """

    def __init__(self, num_heads, dropout=0.0, kernel_initializer=None, **kwargs):
        super().__init__(dropout, kernel_initializer, **kwargs)
        self.num_heads = num_heads

    def build(self, query_shape, memory_shape=None):
        memory_shape = memory_shape or query_shape
        depth = query_shape[-1]
        if depth % self.num_heads:
            raise ValueError(f"depth {depth} is not divisible by num_heads={self.num_heads}")
        self.depth_per_head = depth // self.num_heads

        def projection(name, index):
            return keras.layers.Dense(
                depth, use_bias=False, name=name, dtype=self.dtype_policy,
                kernel_initializer=self.kernel_initializer_of(index))

        self.query_dense = projection("query", 0)
        self.key_dense = projection("key", 1)
        self.value_dense = projection("value", 2)
        self.output_dense = projection("output", 3)
        self.query_dense.build(query_shape)
        self.key_dense.build(memory_shape)
        self.value_dense.build(memory_shape)
        self.output_dense.build(tuple(query_shape[:-1]) + (depth,))
        self.weights_dropout = Dropout(self.dropout, dtype=self.dtype_policy)

    def call(self, query, memory=None, bias=None, cache=None, position=None, training=False,
             dropout_seed=None, return_attention_scores=False):
        memory_rows = None
        if isinstance(cache, MemoryCache):
            key, value = cache
            memory_rows = ops.shape(key)[0]  # a row per sentence, for the query rows of its beams
        else:
            source = query if memory is None else memory
            key = self.split_heads(self.key_dense(source))
            value = self.split_heads(self.value_dense(source))
            if cache is not None:
                cache, bias = cache.add(key, value, position)
                key, value = cache
        q = self.split_heads(self.query_dense(query), memory_rows)
        q = q * (self.depth_per_head**-0.5)
        # §3.2.1 Scaled Dot-Product Attention on the heads, then the output projection.
        weights = self.attention_weights(q, key, bias)
        dropped = ops.cast(self.weights_dropout(weights, training=training, seed=dropout_seed),
                           value.dtype)
        output = self.output_dense(
            self.combine_heads(ops.matmul(dropped, value), rows=len(query.shape) == 2))
        extras = (((weights,) if return_attention_scores else ())
                  + (() if cache is None else (cache,)))
        return (output,) + extras if extras else output

    def project_memory(self, memory):
        """The MemoryCache of `memory` [batch, keys, d]: its keys and values split into heads,
        computed once per sentence when decoding."""
        return MemoryCache(self.split_heads(self.key_dense(memory)),
                           self.split_heads(self.value_dense(memory)))

    def empty_cache(self, batch_size, room):
        """The self-attention cache of no position yet for `batch_size` rows, a FixedLengthCache
        with room for `room` positions."""
        zeros = ops.zeros((batch_size, self.num_heads, room, self.depth_per_head),
                          dtype=self.compute_dtype)
        return FixedLengthCache(zeros, zeros)

    def split_heads(self, x, rows=None):
        """[batch, length, d] -> [batch, heads, length, d / heads].

        Decoding's x [n, d], one position per row, is read as [rows, n / rows, d]: by default
        [n, 1, d]; with the `rows` of a MemoryCache (its sentences), the n / rows consecutive
        query rows of each sentence (its beams) as the positions of its row."""
        if len(x.shape) == 2 and rows is None:
            rows, length = -1, 1
        elif len(x.shape) == 2:
            length = ops.shape(x)[0] // ops.maximum(rows, 1)  # 0 rows: 0
        else:
            rows, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (rows, length, self.num_heads, self.depth_per_head))
        return ops.transpose(x, (0, 2, 1, 3))

    def combine_heads(self, x, rows=False):
        """[batch, heads, length, d / heads] -> [batch, length, d]; with `rows` (decoding's
        query rows, read as split_heads reads them), -> [batch * length, d]."""
        depth = self.num_heads * self.depth_per_head
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (-1, depth) if rows else (ops.shape(x)[0], ops.shape(x)[1], depth))

    def attention_weights(self, q, k, bias=None):
        """softmax(q k^T + bias) in float32 over the keys, q already scaled: [batch, heads,
        queries, keys]."""
        logits = ops.matmul(ops.cast(q, "float32"),
                            ops.transpose(ops.cast(k, "float32"), (0, 1, 3, 2)))
        if bias is not None:
            # Keras casts a float16 layer's inputs, turning -1e9 into -inf; clamping keeps a
            # row whose keys are all masked (an all-PAD source) finite instead of NaN.
            logits = logits + ops.maximum(ops.cast(bias, "float32"), NEG_INF)
        with warnings.catch_warnings():
            # One key is legitimate (the first decoding step, a one-token input); Keras warns
            # of a softmax over a length-1 axis when it sees one while tracing.
            warnings.filterwarnings("ignore", "You are using a softmax over axis",
                                    UserWarning)
            return ops.softmax(logits, axis=-1)

    def compute_output_shape(self, query_shape, memory_shape=None):
        return query_shape

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads}
