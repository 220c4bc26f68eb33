"""Residual connections around sublayers (paper §3.1, §5.4), as t2t's layer_preprocess and
layer_postprocess sequences.

A sequence is a string of operations applied left to right, or "none" for no operation:
    n: layer normalization (epsilon = norm_epsilon)
    d: dropout (rate = layer_prepostprocess_dropout)
    a: add the residual, the sublayer's input

    post-norm, the paper ("none" / "dan"):   LayerNorm(x + Dropout(f(x)))
    pre-norm, t2t v2+ ("n" / "da"):          x + Dropout(f(LayerNorm(x)))

The layers read and check a sequence themselves, as t2t's layer_prepostprocess did; hparams_lib
checks a user's layer_preprocess_sequence and layer_postprocess_sequence first, naming the hparam.
"""
import keras

from t2t_lite.layers.dropout import Dropout

OPERATIONS = "nda"  # the letters above; hparams_lib.SUBLAYER_OPERATIONS repeats them


def _operations(sequence, name="sequence"):
    """The operations of a sequence in order: its letters, "" for "none"; ValueError naming
    `name` for any other text."""
    if sequence == "none":
        return ""
    if not sequence or set(sequence) - set(OPERATIONS):
        raise ValueError(f"{name}={sequence!r}: use 'none' or letters of {OPERATIONS!r}")
    return sequence


def _float32_weights(policy):
    """`policy` with float32 variables. Keras computes a layer norm in float32 and never
    autocasts its scale and offset, so they stay float32 also in a model whose other weights
    are half precision (an inference model, models/building.py), computing what it computes
    under mixed precision."""
    if policy.variable_dtype == "float32":
        return policy
    return keras.dtype_policies.get(f"mixed_{policy.compute_dtype}")


@keras.saving.register_keras_serializable(package="t2t_lite")
class LayerProcess(keras.layers.Layer):
    """Applies a t2t process sequence such as "n", "da" or "dan" to x.

    Also the final layer norm of a pre-norm stack: t2t applies the preprocess sequence once more
    after the last layer of the encoder and of the decoder.

    Args:
        sequence: letters of "nda" applied in order, or "none".
        dropout: rate of every "d". Default 0.
        epsilon: epsilon of every "n". Default 1e-6 (t2t's norm_epsilon).

    Call arguments:
        x: [..., d].
        residual: the tensor "a" adds; required when the sequence contains "a".
        training: enables dropout; dropout_seed: Dropout's `seed` (layers.dropout).
    """

    def __init__(self, sequence="none", dropout=0.0, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.sequence = sequence
        self.operations = _operations(sequence)
        self.dropout = dropout
        self.epsilon = epsilon

    def build(self, input_shape):
        # One LayerNormalization (own scale and bias) per "n"; dropout has no weights.
        self.norms = []
        for _ in range(self.operations.count("n")):
            norm = keras.layers.LayerNormalization(
                epsilon=self.epsilon, dtype=_float32_weights(self.dtype_policy),
                name=f"norm_{len(self.norms)}")
            norm.build(input_shape)
            self.norms.append(norm)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)

    def call(self, x, residual=None, training=False, dropout_seed=None):
        norms = iter(self.norms)
        for operation in self.operations:
            if operation == "n":
                x = next(norms)(x)
            elif operation == "d":
                x = self.dropout_layer(x, training=training, seed=dropout_seed)
            else:
                if residual is None:
                    raise ValueError(f"sequence {self.sequence!r} adds a residual: pass one")
                x = x + residual
        return x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "sequence": self.sequence, "dropout": self.dropout,
                "epsilon": self.epsilon}


@keras.saving.register_keras_serializable(package="t2t_lite")
class SublayerConnection(keras.layers.Layer):
    """§3.1 "residual connection around each of the two sub-layers": y = post(f(pre(x)), x).

    Args:
        preprocess: sequence applied to x before the sublayer (layer_preprocess_sequence).
        postprocess: sequence applied to the sublayer's output, "a" adding x
            (layer_postprocess_sequence).
        dropout: layer_prepostprocess_dropout, the rate of every "d".
        epsilon: norm_epsilon, the epsilon of every "n".

    Call arguments:
        x: [batch, length, d], the sublayer's input and the residual.
        sublayer: a callable [batch, length, d] -> [batch, length, d], passed by keyword
            (Keras takes only tensors positionally), e.g.
            `connection(x, sublayer=lambda y: attention(y, bias=bias), training=training)`.
            It may return a tuple
            (output, *extras), e.g. with attention weights or an updated cache; the connection
            then returns (processed output, *extras).
        training: enables dropout; dropout_seed: Dropout's `seed` (layers.dropout).
    """

    def __init__(self, preprocess="n", postprocess="da", dropout=0.0, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        if "a" in _operations(preprocess, "preprocess"):
            raise ValueError(f"preprocess {preprocess!r}: there is no residual to add before "
                             "the sublayer")
        self.preprocess = preprocess
        _operations(postprocess, "postprocess")  # fail early on a bad sequence
        self.postprocess = postprocess
        self.dropout = dropout
        self.epsilon = epsilon

    def build(self, input_shape):
        self.pre = LayerProcess(self.preprocess, self.dropout, self.epsilon, name="pre",
                                dtype=self.dtype_policy)
        self.post = LayerProcess(self.postprocess, self.dropout, self.epsilon, name="post",
                                 dtype=self.dtype_policy)
        self.pre.build(input_shape)
        self.post.build(input_shape)

    def call(self, x, sublayer, training=False, dropout_seed=None):
        y = sublayer(self.pre(x, training=training, dropout_seed=dropout_seed))
        if isinstance(y, tuple):
            return (self.post(y[0], residual=x, training=training,
                              dropout_seed=dropout_seed),) + y[1:]
        return self.post(y, residual=x, training=training, dropout_seed=dropout_seed)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "preprocess": self.preprocess,
                "postprocess": self.postprocess, "dropout": self.dropout,
                "epsilon": self.epsilon}
