"""The Transformer of "Attention Is All You Need" (paper §3, Figure 1), as tensor2tensor built it.

    encode: source ids -> embedding * sqrt(d) + timing signal -> dropout -> N encoder layers
            -> final preprocess (the last layer norm of pre-norm)
    decode: shifted target ids -> the same embedding steps -> N decoder layers -> final
            preprocess -> pre-softmax projection (float32 logits)

Sublayer connections follow hparams.layer_preprocess_sequence / layer_postprocess_sequence, so
`transformer_base_v1` is the paper's post-norm model and `transformer_base` t2t's pre-norm one.
"""
from typing import Any, NamedTuple

import keras
from keras import ops

from t2t_lite.data.vocab import PAD_ID
from t2t_lite.hparams_lib import HParams
from t2t_lite.layers.attention import (NEG_INF, FixedLengthCache, MemoryCache, MultiHeadAttention,
                                       SlicedCache, causal_bias, padding_bias)
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.embedding import make_embeddings
from t2t_lite.layers.feed_forward import FeedForward
from t2t_lite.layers.kernels import default_kernel_initializer
from t2t_lite.layers.sublayer import LayerProcess, SublayerConnection
from t2t_lite.layers.timing_signal import AddTimingSignal
from t2t_lite.registry import register_model


def shift_right(targets):
    """t2t's shift_right: the decoder input is the targets moved one step right, PAD (0) first."""
    return ops.pad(targets, [[0, 0], [1, 0]])[:, :-1]


class _TransformerLayer(keras.layers.Layer):
    """What the encoder and decoder layers share: their arguments (EncoderLayer's docstring),
    config and sublayer factories."""

    def __init__(self, filter_size, num_heads, dropout=0.0, attention_dropout=0.0,
                 relu_dropout=0.0, preprocess="n", postprocess="da", epsilon=1e-6,
                 initializer_gain=1.0, **kwargs):
        super().__init__(**kwargs)
        self.filter_size = filter_size
        self.num_heads = num_heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.preprocess = preprocess
        self.postprocess = postprocess
        self.epsilon = epsilon
        self.initializer_gain = initializer_gain

    def _kernel_initializer(self):
        # A new initializer per sublayer: an unseeded Keras initializer draws its seed when it
        # is made, so sublayers sharing one would start from the same values.
        return default_kernel_initializer(self.initializer_gain)

    def _attention(self, name):
        return MultiHeadAttention(self.num_heads, self.attention_dropout, name=name,
                                  kernel_initializer=self._kernel_initializer(),
                                  dtype=self.dtype_policy)

    def _feed_forward(self):
        return FeedForward(self.filter_size, self.relu_dropout, name="feed_forward",
                           kernel_initializer=self._kernel_initializer(),
                           dtype=self.dtype_policy)

    def _connection(self, name):
        return SublayerConnection(self.preprocess, self.postprocess, self.dropout, self.epsilon,
                                  name=name, dtype=self.dtype_policy)

    def compute_output_shape(self, x_shape, *unused_shapes):
        return x_shape

    def get_config(self):
        return {**super().get_config(), "filter_size": self.filter_size,
                "num_heads": self.num_heads, "dropout": self.dropout,
                "attention_dropout": self.attention_dropout, "relu_dropout": self.relu_dropout,
                "preprocess": self.preprocess, "postprocess": self.postprocess,
                "epsilon": self.epsilon, "initializer_gain": self.initializer_gain}


@keras.saving.register_keras_serializable(package="t2t_lite")
class EncoderLayer(_TransformerLayer):
    """§3.1 Encoder layer (Figure 1, left): multi-head self-attention, then the position-wise
    feed-forward network, each inside a residual SublayerConnection.

    The depth d of the layer is its input's; the sublayers are made in `build`.

    Args:
        filter_size: d_ff, the inner depth of the feed-forward network (paper §3.3).
        num_heads: h, the attention heads (§3.2.2); d must be divisible by it.
        dropout: layer_prepostprocess_dropout, the rate of every "d" of the sublayer
            connections (the residual dropout of §5.4). Default 0.
        attention_dropout: the rate applied to the attention weights. Default 0.
        relu_dropout: the rate applied inside the feed-forward network. Default 0.
        preprocess: layer_preprocess_sequence, applied before each sublayer. Default "n".
        postprocess: layer_postprocess_sequence, applied after each sublayer. Default "da"
            (with "n", t2t's pre-norm; "none" / "dan" is the paper's post-norm).
        epsilon: norm_epsilon, the epsilon of every layer norm. Default 1e-6.
        initializer_gain: the scale of the Glorot-uniform initializer of every kernel (t2t's
            uniform_unit_scaling). Default 1.

    Call arguments:
        x: [batch, length, d]; bias: padding_bias of the source; training: enables dropout;
        dropout_seed: None, or the int64 number every Dropout folds into its seed (the trainer's
        batch number: layers.dropout); return_attention_scores: also return
        {"self_attention": [batch, heads, length, length]}.
    """

    def build(self, x_shape):
        self.self_attention = self._attention("self_attention")
        self.feed_forward = self._feed_forward()
        self.self_attention_connection = self._connection("self_attention_connection")
        self.feed_forward_connection = self._connection("feed_forward_connection")
        for layer in (self.self_attention, self.feed_forward, self.self_attention_connection,
                      self.feed_forward_connection):
            layer.build(x_shape)

    def call(self, x, bias=None, training=False, dropout_seed=None,
             return_attention_scores=False):
        def self_attention(y):
            return self.self_attention(y, bias=bias, training=training,
                                       dropout_seed=dropout_seed, return_attention_scores=True)

        def feed_forward(y):
            return self.feed_forward(y, training=training, dropout_seed=dropout_seed)

        x, weights = self.self_attention_connection(x, sublayer=self_attention,
                                                    training=training, dropout_seed=dropout_seed)
        x = self.feed_forward_connection(x, sublayer=feed_forward, training=training,
                                         dropout_seed=dropout_seed)
        return (x, {"self_attention": weights}) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="t2t_lite")
class DecoderLayer(_TransformerLayer):
    """§3.1 Decoder layer (Figure 1, right): causal self-attention, attention over the encoder
    output, then the feed-forward network, each inside a residual SublayerConnection.

    Args: those of EncoderLayer.

    Call arguments:
        x: [batch, target_length, d]; encoder_output: [batch, source_length, d];
        self_attention_bias: causal_bias; encoder_decoder_bias: padding_bias of the source;
        training, dropout_seed: as EncoderLayer's; return_attention_scores: also return the
        weights of both attentions as {"self_attention": ..., "encoder_decoder": ...}.
    """

    def build(self, x_shape, encoder_output_shape=None):
        self.self_attention = self._attention("self_attention")
        self.encoder_decoder_attention = self._attention("encoder_decoder_attention")
        self.feed_forward = self._feed_forward()
        self.self_attention_connection = self._connection("self_attention_connection")
        self.encoder_decoder_connection = self._connection("encoder_decoder_connection")
        self.feed_forward_connection = self._connection("feed_forward_connection")
        self.encoder_decoder_attention.build(x_shape, encoder_output_shape or x_shape)
        for layer in (self.self_attention, self.feed_forward, self.self_attention_connection,
                      self.encoder_decoder_connection, self.feed_forward_connection):
            layer.build(x_shape)

    def call(self, x, encoder_output, self_attention_bias=None, encoder_decoder_bias=None,
             training=False, dropout_seed=None, return_attention_scores=False):
        def self_attention(y):
            return self.self_attention(y, bias=self_attention_bias, training=training,
                                       dropout_seed=dropout_seed, return_attention_scores=True)

        def encoder_decoder_attention(y):
            return self.encoder_decoder_attention(y, encoder_output, bias=encoder_decoder_bias,
                                                  training=training, dropout_seed=dropout_seed,
                                                  return_attention_scores=True)

        x, self_weights, cross_weights = self._sublayers(
            x, self_attention, encoder_decoder_attention, training, dropout_seed)
        if return_attention_scores:
            return x, {"self_attention": self_weights, "encoder_decoder": cross_weights}
        return x

    def step(self, x, self_attention_cache, memory_cache, position, encoder_decoder_bias=None):
        """The layer at one decoding position: x [rows, d] is the input at `position`, one row
        per decoded sequence; `self_attention_cache` holds the keys and values of its earlier
        positions (a FixedLengthCache), `memory_cache` the encoder output's (a MemoryCache,
        shared by a sentence's rows). Returns (output [rows, d], the self-attention cache with
        `position` added).

        The attentions are called through `call`, not the layer: Keras would cast the float32
        bias to a half-precision layer's dtype at every step."""
        def self_attention(y):
            return self.self_attention.call(y, cache=self_attention_cache, position=position)

        def encoder_decoder_attention(y):
            return self.encoder_decoder_attention.call(y, bias=encoder_decoder_bias,
                                                       cache=memory_cache)

        x, self_attention_cache, _ = self._sublayers(x, self_attention,
                                                     encoder_decoder_attention, training=False)
        return x, self_attention_cache

    def _sublayers(self, x, self_attention, encoder_decoder_attention, training,
                   dropout_seed=None):
        """The three sublayers in their connections (Figure 1, right); each attention returns
        (output, what the caller wants of it: weights or a cache), which this returns after x."""
        def feed_forward(y):
            return self.feed_forward(y, training=training, dropout_seed=dropout_seed)

        x, self_extra = self.self_attention_connection(x, sublayer=self_attention,
                                                       training=training, dropout_seed=dropout_seed)
        x, cross_extra = self.encoder_decoder_connection(x, sublayer=encoder_decoder_attention,
                                                         training=training,
                                                         dropout_seed=dropout_seed)
        x = self.feed_forward_connection(x, sublayer=feed_forward, training=training,
                                         dropout_seed=dropout_seed)
        return x, self_extra, cross_extra


class DecodingCache(NamedTuple):
    """What incremental decoding keeps between steps, t2t's fast decoding's cache:

    self_attention: per decoder layer, the keys and values of the positions decoded so far
        (FixedLengthCache), one row per decoded sequence;
    memory: per decoder layer, the encoder output's keys and values (MemoryCache), one row per
        sentence, computed once and shared by the sentence's decoded sequences (beam search's
        beams);
    encoder_decoder_bias: the source padding's bias (padding_bias), one row per sentence, as
        t2t's cache kept its encoder_decoder_attention_bias.
    """
    self_attention: list
    memory: list
    encoder_decoder_bias: Any


class DecodingSteps:
    """The Transformer as a search calls it (t2t's symbols_to_logits_fn): `initial_state` runs
    the encoder once, `__call__(ids, position, state) -> (logits, state)` one decoder step; the
    state is the DecodingCache. `time_axes`: the self-attention keys and values have a row per
    decoded sequence and grow along axis 2; the rest has a row per sentence.

    fixed_shapes: the room never changes (XLA), each step writing its position with a mask
    (FixedLengthCache); else by slicing, the mask of the later positions made once a step."""

    def __init__(self, model, fixed_shapes):
        self.model, self.fixed_shapes = model, fixed_shapes
        self.vocab_size = model.vocab_size

    def initial_state(self, inputs, room):
        """The DecodingCache of source ids [B, S], with room for `room` positions."""
        encoder_output, inputs_padding = self.model.encode(inputs, training=False)
        return self.model.initial_cache(encoder_output, inputs_padding, room)

    def time_axes(self, state):
        return DecodingCache([FixedLengthCache(2, 2) for _ in state.self_attention],
                             [MemoryCache(None, None) for _ in state.memory], None)

    def __call__(self, ids, position, state):
        if not self.fixed_shapes:
            later = ops.arange(ops.shape(state.self_attention[0].key)[2]) > position
            bias = ops.where(later, NEG_INF, 0.0)[None, None, None, :]
            state = state._replace(self_attention=[SlicedCache(*layer, bias)
                                                   for layer in state.self_attention])
        return self.model.decode_step(ids, position, state)


def _layer_arguments(hparams):
    """The arguments of EncoderLayer and DecoderLayer that hparams set."""
    return dict(filter_size=hparams.filter_size, num_heads=hparams.num_heads,
                dropout=hparams.layer_prepostprocess_dropout,
                attention_dropout=hparams.attention_dropout, relu_dropout=hparams.relu_dropout,
                preprocess=hparams.layer_preprocess_sequence,
                postprocess=hparams.layer_postprocess_sequence, epsilon=hparams.norm_epsilon,
                initializer_gain=hparams.initializer_gain)


@register_model("transformer")
@keras.saving.register_keras_serializable(package="t2t_lite")
class Transformer(keras.Model):
    """§3 The Transformer: an encoder-decoder of stacked attention and feed-forward layers.

    Args:
        hparams: HParams (sizes, layer counts, dropout, sublayer sequences, timing signal form).
        vocab_size: size of the vocabulary shared by source and target (PAD = 0, EOS = 1).

    Call arguments:
        features: {"inputs": int [batch, source_length], "targets": int [batch, target_length]}.
        training: enables dropout.
        dropout_seed: None (each Dropout's next seed, as Keras'), or an int64 number (the
            trainer's batch number) that every Dropout folds into its own seed.

    Returns float32 logits [batch, target_length, vocab_size]; position i predicts targets[:, i]
    from targets[:, :i] and the inputs.
    """

    def __init__(self, hparams: HParams, vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        hp = self.hparams = hparams
        self.vocab_size = vocab_size
        dtype = self.dtype_policy  # the model's (`dtype=`), passed to every layer
        self.source_embedding, self.target_embedding, self.softmax_embedding = make_embeddings(
            vocab_size, hp.hidden_size, PAD_ID, hp.shared_embedding_and_softmax_weights, dtype)
        self.add_timing_signal = AddTimingSignal(hp.timing_signal, name="timing_signal",
                                                 dtype=dtype)
        self.embedding_dropout = Dropout(hp.layer_prepostprocess_dropout,
                                         name="embedding_dropout", dtype=dtype)
        self.encoder_stack = [EncoderLayer(**_layer_arguments(hp), name=f"encoder_layer_{i}",
                                           dtype=dtype) for i in range(hp.encoder_layers)]
        self.decoder_stack = [DecoderLayer(**_layer_arguments(hp), name=f"decoder_layer_{i}",
                                           dtype=dtype) for i in range(hp.decoder_layers)]
        # t2t ends each stack with the preprocess sequence: the final layer norm of pre-norm.
        self.encoder_final = self._final_process("encoder_final")
        self.decoder_final = self._final_process("decoder_final")

    def _final_process(self, name):
        hp = self.hparams
        return LayerProcess(hp.layer_preprocess_sequence, hp.layer_prepostprocess_dropout,
                            hp.norm_epsilon, name=name, dtype=self.dtype_policy)

    def _embed(self, embedding, ids, training, start_position=0, dropout_seed=None):
        """§3.4-3.5: embedding * sqrt(d) (zero at PAD) + timing signal, then dropout (§5.4)."""
        x = self.add_timing_signal(embedding(ids), start_position=start_position)
        return self.embedding_dropout(x, training=training, seed=dropout_seed)

    def call(self, features, training=False, dropout_seed=None):
        return self.softmax_embedding(self.decoder_output(features, training, dropout_seed),
                                      reverse=True)

    def decoder_output(self, features, training=False, dropout_seed=None):
        """The decoder's final activations [batch, target_length, d], before the pre-softmax
        projection (for losses that project them themselves: training/output_layer_loss.py)."""
        encoder_output, inputs_padding = self._encode(features["inputs"], training,
                                                      dropout_seed=dropout_seed)
        decoder_input = shift_right(ops.cast(features["targets"], "int32"))
        return self._decode(decoder_input, encoder_output, inputs_padding, training,
                            project=False, dropout_seed=dropout_seed)

    @property
    def softmax_weights(self):
        """The pre-softmax projection [vocab_size, d]: logits = decoder_output @ weights^T."""
        return self.softmax_embedding.embeddings

    def encode(self, inputs, training=False):
        """Source ids [batch, S] -> (encoder_output [batch, S, d], inputs_padding bool [batch, S]
        True at PAD)."""
        return self._encode(inputs, training)

    def decode(self, decoder_input, encoder_output, inputs_padding, training=False):
        """Shifted target ids [batch, T] (position 0 is PAD) -> float32 logits [batch, T, V]."""
        return self._decode(decoder_input, encoder_output, inputs_padding, training)

    def initial_cache(self, encoder_output, inputs_padding, room):
        """The DecodingCache before the first step, for one decoded sequence per sentence
        (`encode`'s outputs): the self-attention caches of no position yet, with room for
        `room` positions, and the encoder output's keys and values and the padding's bias
        (computed here, once)."""
        batch_size = ops.shape(encoder_output)[0]
        return DecodingCache(
            self_attention=[layer.self_attention.empty_cache(batch_size, room)
                            for layer in self.decoder_stack],
            memory=[layer.encoder_decoder_attention.project_memory(encoder_output)
                    for layer in self.decoder_stack],
            encoder_decoder_bias=padding_bias(inputs_padding))

    def decode_step(self, ids, position, cache):
        """One step of incremental decoding: `ids` [rows] are the decoder inputs at `position`
        (PAD at 0, then the previous outputs), one row per decoded sequence; `cache` is the
        DecodingCache (initial_cache, then this method's), whose self-attention caches have room
        for `position`. Returns (float32 logits [rows, V] for the output at `position`, the
        updated cache); the logits equal `decode(...)[:, position]` over the whole prefix."""
        x = self._embed(self.target_embedding, ops.cast(ids, "int32")[:, None], False,
                        start_position=position)
        # [rows, d] from here: the step's dense layers are then plain matmuls, without the
        # reshapes and shape arithmetic that a [rows, 1, d] input costs at every step.
        x = ops.reshape(x, (-1, self.hparams.hidden_size))
        self_attention = []
        for layer, layer_cache, memory in zip(self.decoder_stack, cache.self_attention,
                                              cache.memory):
            x, layer_cache = layer.step(x, layer_cache, memory, position,
                                        cache.encoder_decoder_bias)
            self_attention.append(layer_cache)
        x = self.decoder_final(x, training=False)
        return (self.softmax_embedding(x, reverse=True),
                cache._replace(self_attention=self_attention))

    def decoding_steps(self, fixed_shapes=False):
        """The model as a search calls it: DecodingSteps."""
        return DecodingSteps(self, fixed_shapes)

    def attention_weights(self, features):
        """The attention weights of every layer (inference mode), for pictures:
        {"encoder": [{"self_attention": [batch, heads, S, S]}, ...],
         "decoder": [{"self_attention": [batch, heads, T, T],
                      "encoder_decoder": [batch, heads, T, S]}, ...]}."""
        scores = {"encoder": [], "decoder": []}
        encoder_output, inputs_padding = self._encode(features["inputs"], False, scores["encoder"])
        decoder_input = shift_right(ops.cast(features["targets"], "int32"))
        self._decode(decoder_input, encoder_output, inputs_padding, False, scores["decoder"])
        return scores

    def _encode(self, inputs, training, scores=None, dropout_seed=None):
        inputs = ops.cast(inputs, "int32")
        inputs_padding = ops.equal(inputs, PAD_ID)
        bias = padding_bias(inputs_padding)
        x = self._embed(self.source_embedding, inputs, training, dropout_seed=dropout_seed)
        for layer in self.encoder_stack:
            x = self._collect(layer(x, bias, training=training, dropout_seed=dropout_seed,
                                    return_attention_scores=scores is not None), scores)
        return self.encoder_final(x, training=training), inputs_padding

    def _decode(self, decoder_input, encoder_output, inputs_padding, training, scores=None,
                project=True, dropout_seed=None):
        decoder_input = ops.cast(decoder_input, "int32")
        self_attention_bias = causal_bias(ops.shape(decoder_input)[1])
        encoder_decoder_bias = padding_bias(inputs_padding)
        # The embedding's dropout draws a second mask in the batch: a second number folded in.
        x = self._embed(self.target_embedding, decoder_input, training,
                        dropout_seed=None if dropout_seed is None
                        else (dropout_seed, ops.convert_to_tensor(1, "int32")))
        for layer in self.decoder_stack:
            x = self._collect(layer(x, encoder_output, self_attention_bias, encoder_decoder_bias,
                                    training=training, dropout_seed=dropout_seed,
                                    return_attention_scores=scores is not None), scores)
        x = self.decoder_final(x, training=training)
        return self.softmax_embedding(x, reverse=True) if project else x

    @staticmethod
    def _collect(output, scores):
        """Layer output -> activations; with a `scores` list, keeps the layer's weights there."""
        if scores is None:
            return output
        x, weights = output
        scores.append(weights)
        return x

    def get_config(self):
        return {**super().get_config(), "hparams": self.hparams.to_dict(),
                "vocab_size": self.vocab_size}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        hparams = HParams.from_dict(config.pop("hparams"))
        return cls(hparams, config.pop("vocab_size"), **config)
