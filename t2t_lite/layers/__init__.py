"""Keras layers of the Transformer, one paper concept per module."""
from t2t_lite.layers.attention import (FixedLengthCache, MemoryCache, MultiHeadAttention,
                                       causal_bias, padding_bias)
from t2t_lite.layers.embedding import TokenEmbedding, make_embeddings
from t2t_lite.layers.feed_forward import FeedForward
from t2t_lite.layers.kernels import default_kernel_initializer
from t2t_lite.layers.sublayer import LayerProcess, SublayerConnection
from t2t_lite.layers.timing_signal import AddTimingSignal, timing_signal

__all__ = [
    "AddTimingSignal", "FeedForward", "FixedLengthCache", "LayerProcess", "MemoryCache",
    "MultiHeadAttention", "SublayerConnection", "TokenEmbedding", "causal_bias",
    "default_kernel_initializer", "make_embeddings", "padding_bias", "timing_signal",
]
