"""Multi-head scaled dot-product attention (paper §3.2.1-3.2.2) and its masks.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + bias) V

Masks are additive biases, as in t2t's common_attention: 0 where attending is allowed and -1e9
where it is not, broadcast against the logits [batch, heads, queries, keys].
"""
import warnings

import keras
from keras import ops

from t2t_lite.layers.dense import Dense
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
        query: [batch, queries, d].
        memory: [batch, keys, d] or None for self-attention.
        bias: float additive bias broadcastable to [batch, heads, queries, keys], e.g.
            `padding_bias(...)` or `causal_bias(...)`; None for no mask.
        training: enables dropout.
        return_attention_scores: also return the weights [batch, heads, queries, keys] (float32,
            before dropout).

    Returns:
        [batch, queries, d], or (output, weights) with `return_attention_scores`.
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
            return Dense(
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

    def split_heads(self, x):
        """[batch, length, d] -> [batch, heads, length, d / heads]."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads, self.depth_per_head))
        return ops.transpose(x, (0, 2, 1, 3))

    def combine_heads(self, x):
        """[batch, heads, length, d / heads] -> [batch, length, d]."""
        batch, length = ops.shape(x)[0], ops.shape(x)[2]
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (batch, length, self.num_heads * self.depth_per_head))

    def call(self, query, memory=None, bias=None, training=False,
             return_attention_scores=False):
        memory = query if memory is None else memory
        q = self.split_heads(self.query_dense(query)) * (self.depth_per_head**-0.5)
        k = self.split_heads(self.key_dense(memory))
        v = self.split_heads(self.value_dense(memory))
        return self.attend(q, k, v, bias, training, return_attention_scores)

    def project_memory(self, memory):
        """Keys and values of `memory` [batch, keys, d] split into heads: the encoder-decoder
        attention computes them once per sentence when decoding (t2t's cached k/v_encdec)."""
        return {"key": self.split_heads(self.key_dense(memory)),
                "value": self.split_heads(self.value_dense(memory))}

    def attend_to_memory(self, query, memory_cache, bias=None):
        """`call` for one decoding position per row, with the memory's keys and values from
        `project_memory`: query [rows, d] -> [rows, d].

        The memory may have fewer rows than the query, rows = n * memory rows: each memory row
        then serves n consecutive query rows (beam search's n beams of a sentence share its
        encoder output), whose queries attend together as n query positions of one row. A
        head's product is then one [n, depth] x [depth, keys], reading the keys and values
        once for n beams (t2t and CTranslate2 tile them per beam instead); `bias` has one row
        per memory row."""
        key, value = memory_cache["key"], memory_cache["value"]
        memory_rows = ops.shape(key)[0]
        queries_per_row = ops.shape(query)[0] // ops.maximum(memory_rows, 1)  # 0 rows: 0
        q = ops.reshape(self.query_dense(query),
                        (memory_rows, queries_per_row, self.num_heads, self.depth_per_head))
        q = ops.transpose(q, (0, 2, 1, 3)) * (self.depth_per_head**-0.5)
        context = ops.matmul(ops.cast(self.attention_weights(q, key, bias), value.dtype), value)
        return self.output_dense(ops.reshape(ops.transpose(context, (0, 2, 1, 3)),
                                             (-1, self.num_heads * self.depth_per_head)))

    def empty_cache(self, batch_size, max_length=None):
        """The keys and values of no position yet, [batch, heads, length, depth / heads] each.
        With `max_length`, room for that many positions (fixed shapes, so that a decoding loop
        compiles with XLA; `self_attention_step(..., fixed_length=True)` writes into it);
        without, length 0, and each step appends its position (TensorFlow without XLA: a step
        then reads and writes only the positions decoded so far)."""
        length = 0 if max_length is None else max_length
        zeros = ops.zeros((batch_size, self.num_heads, length, self.depth_per_head),
                          dtype=self.compute_dtype)
        return {"key": zeros, "value": zeros}

    def self_attention_step(self, query, cache, position, fixed_length=False):
        """One step of causal self-attention when decoding (t2t's fast decoding): `query`
        [batch, d] is the input at `position`, and it attends over positions 0..position.
        Its key and value are appended to the cache (which holds positions 0..position - 1),
        or with `fixed_length` written into the fixed-size cache at `position`, the later
        positions masked. Returns the output [batch, d] and the updated cache; the output
        equals row `position` of `call` with a causal bias over the whole prefix."""
        q = self.heads_of_one_position(self.query_dense(query)) * (self.depth_per_head**-0.5)
        key = self.heads_of_one_position(self.key_dense(query))
        value = self.heads_of_one_position(self.value_dense(query))
        if not fixed_length:
            cache = {"key": ops.concatenate([cache["key"], key], axis=2),
                     "value": ops.concatenate([cache["value"], value], axis=2)}
            return self.attend_one_position(q, cache["key"], cache["value"]), cache
        # A masked write rather than a dynamic slice update: plain TensorFlow ops, so that an
        # exported search needs no XLA in the server.
        cache_positions = ops.arange(ops.shape(cache["key"])[2])
        here = ops.equal(cache_positions, position)[None, None, :, None]
        cache = {"key": ops.where(here, key, cache["key"]),
                 "value": ops.where(here, value, cache["value"])}
        later = ops.greater(cache_positions, position)
        bias = ops.cast(later, "float32")[None, None, None, :] * NEG_INF
        return self.attend_one_position(q, cache["key"], cache["value"], bias), cache

    def heads_of_one_position(self, x):
        """[batch, d] -> [batch, heads, 1, d / heads]: split_heads of a length-1 sequence, a
        reshape without split_heads' transpose (decoding steps are two-dimensional, so that
        their dense layers are plain matmuls)."""
        return ops.reshape(x, (-1, self.num_heads, 1, self.depth_per_head))

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

    def attend(self, q, k, v, bias=None, training=False, return_attention_scores=False):
        """§3.2.1 Scaled Dot-Product Attention on split heads (q already scaled), then the
        output projection. Kept apart from `call` so cached keys/values can be fed in."""
        weights = self.attention_weights(q, k, bias)
        dropped = ops.cast(self.weights_dropout(weights, training=training), v.dtype)
        output = self.output_dense(self.combine_heads(ops.matmul(dropped, v)))
        return (output, weights) if return_attention_scores else output

    def attend_one_position(self, q, k, v, bias=None):
        """`attend` at inference for one query per row, q [batch, heads, 1, d / heads] ->
        [batch, d]: the heads combined by a reshape, without combine_heads' transpose."""
        context = ops.matmul(ops.cast(self.attention_weights(q, k, bias), v.dtype), v)
        return self.output_dense(
            ops.reshape(context, (-1, self.num_heads * self.depth_per_head)))

    def compute_output_shape(self, query_shape, memory_shape=None):
        return query_shape

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads}
