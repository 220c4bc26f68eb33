"""Token embeddings and the pre-softmax projection (paper §3.4, t2t's symbol modality).

"We use learned embeddings to convert the input tokens and output tokens to vectors of dimension
d_model ... we share the same weight matrix between the two embedding layers and the pre-softmax
linear transformation ... In the embedding layers, we multiply those weights by sqrt(d_model)."
"""
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_lite")
class TokenEmbedding(keras.layers.Layer):
    """A [vocab_size, hidden_size] matrix used as an embedding and, reversed, as the softmax.

    Forward (`reverse=False`), as t2t's symbol modality bottom:
        embedding[ids] * sqrt(hidden_size), zeroed where ids == pad_id.
    Reversed (`reverse=True`), the pre-softmax linear transformation, computed in float32:
        logits = x @ embedding^T.

    The weights start as N(0, hidden_size^-0.5), so the scaled embeddings have unit variance.

    Args:
        vocab_size: number of token ids.
        hidden_size: d_model.
        pad_id: the vocabulary's padding id, whose embedding is zero (t2t's modality compares
            with 0, text_encoder's PAD_ID; the model passes data.vocab.PAD_ID).
        dtype: the dtype policy (default Keras' global one): its compute dtype is that of the
            embeddings; the matrix is float32 under any policy.

    Call arguments:
        inputs: int ids [...] (forward) or float activations [..., hidden_size] (reverse).
        reverse: False to embed, True to project to vocabulary logits.
    """

    def __init__(self, vocab_size, hidden_size, pad_id, **kwargs):
        # The matrix stays float32 (build), so the logits never go through half precision.
        super().__init__(autocast=False, **kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.pad_id = pad_id

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=self.hidden_size**-0.5),
            # float32 also under half-precision weights (an inference model: models/building.py)
            # and never autocast: a mixed-policy layer called from outside any layer (as
            # decode_step and decoder_output call it) gets its variables cast by Keras even
            # with autocast=False, which rounded the softmax matrix to bfloat16, and cast all
            # of it twice per decoding step.
            dtype="float32", autocast=False,
        )

    def call(self, inputs, reverse=False):
        if reverse:
            return ops.matmul(ops.cast(inputs, "float32"), ops.transpose(self.embeddings))
        ids = ops.cast(inputs, "int32")
        vectors = ops.take(self.embeddings, ids, axis=0) * (self.hidden_size**0.5)
        not_pad = ops.cast(ops.not_equal(ids, self.pad_id), vectors.dtype)[..., None]
        return ops.cast(vectors * not_pad, self.compute_dtype)

    def compute_output_shape(self, input_shape, reverse=False):
        if reverse:
            return tuple(input_shape[:-1]) + (self.vocab_size,)
        return tuple(input_shape) + (self.hidden_size,)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size,
                "hidden_size": self.hidden_size, "pad_id": self.pad_id}


def make_embeddings(vocab_size, hidden_size, pad_id, shared, dtype=None):
    """The (source, target, softmax) embeddings of a sequence-to-sequence model.

    With `shared` (hparams.shared_embedding_and_softmax_weights, paper §3.4) the three are one
    TokenEmbedding, so one matrix embeds source and target tokens and projects to the softmax;
    otherwise each role gets its own matrix. Each zeroes the embedding of `pad_id`; `dtype`: their
    dtype policy.
    """
    if shared:
        embedding = TokenEmbedding(vocab_size, hidden_size, pad_id, name="shared_embedding",
                                   dtype=dtype)
        return embedding, embedding, embedding
    return tuple(TokenEmbedding(vocab_size, hidden_size, pad_id, name=f"{role}_embedding",
                                dtype=dtype)
                 for role in ("source", "target", "softmax"))
