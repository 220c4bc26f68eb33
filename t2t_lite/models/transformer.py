"""The Transformer of "Attention Is All You Need" (paper §3, Figure 1), as tensor2tensor built it.

    encode: source ids -> embedding * sqrt(d) + timing signal -> dropout -> N encoder layers
            -> final preprocess (the last layer norm of pre-norm)
    decode: shifted target ids -> the same embedding steps -> N decoder layers -> final
            preprocess -> pre-softmax projection (float32 logits)

Sublayer connections follow hparams.layer_preprocess_sequence / layer_postprocess_sequence, so
`transformer_base_v1` is the paper's post-norm model and `transformer_base` t2t's pre-norm one.
"""
import keras
from keras import ops

from t2t_lite.hparams_lib import HParams
from t2t_lite.layers.attention import MultiHeadAttention, causal_bias, padding_bias
from t2t_lite.layers.decoding_kernels import transposed_for_steps
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.embedding import PAD_ID, make_embeddings
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
        return_attention_scores: also return {"self_attention": [batch, heads, length, length]}.
    """

    def build(self, x_shape):
        self.self_attention = self._attention("self_attention")
        self.feed_forward = self._feed_forward()
        self.self_attention_connection = self._connection("self_attention_connection")
        self.feed_forward_connection = self._connection("feed_forward_connection")
        for layer in (self.self_attention, self.feed_forward, self.self_attention_connection,
                      self.feed_forward_connection):
            layer.build(x_shape)

    def call(self, x, bias=None, training=False, return_attention_scores=False):
        def self_attention(y):
            return self.self_attention(y, bias=bias, training=training,
                                       return_attention_scores=True)

        def feed_forward(y):
            return self.feed_forward(y, training=training)

        x, weights = self.self_attention_connection(x, sublayer=self_attention,
                                                    training=training)
        x = self.feed_forward_connection(x, sublayer=feed_forward, training=training)
        return (x, {"self_attention": weights}) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="t2t_lite")
class DecoderLayer(_TransformerLayer):
    """§3.1 Decoder layer (Figure 1, right): causal self-attention, attention over the encoder
    output, then the feed-forward network, each inside a residual SublayerConnection.

    Args: those of EncoderLayer.

    Call arguments:
        x: [batch, target_length, d]; encoder_output: [batch, source_length, d];
        self_attention_bias: causal_bias; encoder_decoder_bias: padding_bias of the source;
        training: enables dropout; return_attention_scores: also return the weights of both
        attentions as {"self_attention": ..., "encoder_decoder": ...}.
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
             training=False, return_attention_scores=False):
        def self_attention(y):
            return self.self_attention(y, bias=self_attention_bias, training=training,
                                       return_attention_scores=True)

        def encoder_decoder_attention(y):
            return self.encoder_decoder_attention(y, encoder_output, bias=encoder_decoder_bias,
                                                  training=training,
                                                  return_attention_scores=True)

        def feed_forward(y):
            return self.feed_forward(y, training=training)

        x, self_weights = self.self_attention_connection(x, sublayer=self_attention,
                                                         training=training)
        x, cross_weights = self.encoder_decoder_connection(x, sublayer=encoder_decoder_attention,
                                                           training=training)
        x = self.feed_forward_connection(x, sublayer=feed_forward, training=training)
        if return_attention_scores:
            return x, {"self_attention": self_weights, "encoder_decoder": cross_weights}
        return x

    def step_kernels(self):
        """The kernels `step` multiplies its rows by (the encoder-decoder attention's keys and
        values are projected from the encoder output instead, once per sentence)."""
        projections = [self.self_attention.query_dense, self.self_attention.key_dense,
                       self.self_attention.value_dense, self.self_attention.output_dense,
                       self.encoder_decoder_attention.query_dense,
                       self.encoder_decoder_attention.output_dense,
                       self.feed_forward.filter_dense, self.feed_forward.output_dense]
        return [projection.kernel for projection in projections]

    def step(self, x, cache, position, encoder_decoder_bias=None, fixed_length=False):
        """The layer at one decoding position: x [batch, d] is the input at `position`;
        `cache` holds {"self_attention": keys/values of the earlier positions,
        "encoder_decoder": the encoder output's keys/values}. Returns (output, updated cache).
        fixed_length: the self-attention cache has fixed size (MultiHeadAttention.empty_cache)."""
        def self_attention(y):
            return self.self_attention.self_attention_step(y, cache["self_attention"], position,
                                                           fixed_length)

        def encoder_decoder_attention(y):
            return self.encoder_decoder_attention.attend_to_memory(
                y, cache["encoder_decoder"], encoder_decoder_bias)

        x, self_attention_cache = self.self_attention_connection(x, sublayer=self_attention)
        x = self.encoder_decoder_connection(x, sublayer=encoder_decoder_attention)
        x = self.feed_forward_connection(x, sublayer=self.feed_forward)
        return x, {**cache, "self_attention": self_attention_cache}


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

    Returns float32 logits [batch, target_length, vocab_size]; position i predicts targets[:, i]
    from targets[:, :i] and the inputs.
    """

    def __init__(self, hparams: HParams, vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        hp = self.hparams = hparams
        self.vocab_size = vocab_size
        self.source_embedding, self.target_embedding, self.softmax_embedding = make_embeddings(
            vocab_size, hp.hidden_size, hp.shared_embedding_and_softmax_weights)
        self.add_timing_signal = AddTimingSignal(hp.timing_signal, name="timing_signal")
        self.embedding_dropout = Dropout(hp.layer_prepostprocess_dropout,
                                         name="embedding_dropout")
        self.encoder_stack = [EncoderLayer(**_layer_arguments(hp), name=f"encoder_layer_{i}")
                               for i in range(hp.encoder_layers)]
        self.decoder_stack = [DecoderLayer(**_layer_arguments(hp), name=f"decoder_layer_{i}")
                               for i in range(hp.decoder_layers)]
        # t2t ends each stack with the preprocess sequence: the final layer norm of pre-norm.
        self.encoder_final = self._final_process("encoder_final")
        self.decoder_final = self._final_process("decoder_final")

    def _final_process(self, name):
        hp = self.hparams
        return LayerProcess(hp.layer_preprocess_sequence, hp.layer_prepostprocess_dropout,
                            hp.norm_epsilon, name=name)

    def _embed(self, embedding, ids, training, start_position=0):
        """§3.4-3.5: embedding * sqrt(d) (zero at PAD) + timing signal, then dropout (§5.4)."""
        x = self.add_timing_signal(embedding(ids), start_position=start_position)
        return self.embedding_dropout(x, training=training)

    def call(self, features, training=False):
        return self.softmax_embedding(self.decoder_output(features, training), reverse=True)

    def decoder_output(self, features, training=False):
        """The decoder's final activations [batch, target_length, d], before the pre-softmax
        projection (for losses that project them themselves: training/output_layer_loss.py)."""
        encoder_output, inputs_padding = self.encode(features["inputs"], training=training)
        decoder_input = shift_right(ops.cast(features["targets"], "int32"))
        return self._decode(decoder_input, encoder_output, inputs_padding, training,
                            project=False)

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

    def initial_cache(self, encoder_output, max_length=None):
        """What incremental decoding keeps per decoder layer: the self-attention keys and values
        of no position yet (with `max_length`, fixed-size room for that many, as XLA needs), and
        the encoder output's keys and values for the encoder-decoder attention (computed here,
        once)."""
        batch_size = ops.shape(encoder_output)[0]
        return [{"self_attention": layer.self_attention.empty_cache(batch_size, max_length),
                 "encoder_decoder": layer.encoder_decoder_attention.project_memory(
                     encoder_output)}
                for layer in self.decoder_stack]

    def step_kernels(self):
        """A context for building a decoding loop: within it, the decoder layers' projections
        multiply `decode_step`'s rows by kernels laid out for them, made once on entry
        (layers.decoding_kernels; the same values)."""
        return transposed_for_steps(
            [kernel for layer in self.decoder_stack for kernel in layer.step_kernels()])

    def decode_step(self, ids, position, cache, inputs_padding, fixed_length=False):
        """One step of incremental decoding: `ids` [batch] are the decoder inputs at `position`
        (PAD at 0, then the previous outputs). Returns (float32 logits [batch, V] for the output
        at `position`, the updated cache); the logits equal `decode(...)[:, position]` over the
        whole prefix. fixed_length: the cache came from `initial_cache` with a max_length."""
        encoder_decoder_bias = padding_bias(inputs_padding)
        x = self._embed(self.target_embedding, ops.cast(ids, "int32")[:, None], False,
                        start_position=position)
        # [batch, d] from here: the step's dense layers are then plain matmuls, without the
        # reshapes and shape arithmetic that a [batch, 1, d] input costs at every step.
        x = ops.reshape(x, (-1, self.hparams.hidden_size))
        updated = []
        for layer, layer_cache in zip(self.decoder_stack, cache):
            x, layer_cache = layer.step(x, layer_cache, position, encoder_decoder_bias,
                                        fixed_length)
            updated.append(layer_cache)
        x = self.decoder_final(x, training=False)
        return self.softmax_embedding(x, reverse=True), updated

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

    def _encode(self, inputs, training, scores=None):
        inputs = ops.cast(inputs, "int32")
        inputs_padding = ops.equal(inputs, PAD_ID)
        bias = padding_bias(inputs_padding)
        x = self._embed(self.source_embedding, inputs, training)
        for layer in self.encoder_stack:
            x = self._collect(layer(x, bias, training=training,
                                    return_attention_scores=scores is not None), scores)
        return self.encoder_final(x, training=training), inputs_padding

    def _decode(self, decoder_input, encoder_output, inputs_padding, training, scores=None,
                project=True):
        decoder_input = ops.cast(decoder_input, "int32")
        self_attention_bias = causal_bias(ops.shape(decoder_input)[1])
        encoder_decoder_bias = padding_bias(inputs_padding)
        x = self._embed(self.target_embedding, decoder_input, training)
        for layer in self.decoder_stack:
            x = self._collect(layer(x, encoder_output, self_attention_bias, encoder_decoder_bias,
                                    training=training,
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
