"""The decoder's weight matrices laid out for decoding steps: the same products, in the layout a
CPU runs faster for a step's rows.

A decoding step multiplies one position per row, a few hundred rows at most (32 sentences x 4
beams), on one thread when several batches are searched at once. For those shapes oneDNN runs
x (W^T)^T, with W^T stored, faster than x W when W is square or widening (d_out >= d_in) and
slower when it narrows (benchmarks/README.md, "profile_decode.py"). `transposed_for_decoding`
makes W^T once, where it is entered (before the search loop, inside the traced function), and
the dense layers (layers.dense) multiply their rank-2 inputs by it while the block lasts.

Which matrices: every one of the layers given (`weight_matrices`), so that a projection added to
a layer is laid out too. A copy that no step multiplies by (the encoder-decoder attention's key
and value matrices, applied to the encoder output once per search) costs at most one transpose
per search.
"""
import contextlib
import contextvars

import tensorflow as tf

_transposed = contextvars.ContextVar("t2t_lite_transposed_weight_matrices", default={})


def weight_matrices(layers):
    """Every 2-D weight of `layers` (Keras layers): the kernels [d_in, d_out] of their Dense
    projections (biases and layer norms' scales and offsets are 1-D)."""
    return [weight for layer in layers for weight in layer.weights if len(weight.shape) == 2]


@contextlib.contextmanager
def transposed_for_decoding(kernels):
    """Within the block, `transposed(kernel)` is a transposed copy of each square or widening
    kernel of `kernels` (2-D variables [d_in, d_out]), made here; of others, None."""
    copies = {id(kernel): tf.transpose(tf.convert_to_tensor(kernel)) for kernel in kernels
              if len(kernel.shape) == 2 and kernel.shape[1] >= kernel.shape[0]}
    token = _transposed.set({**_transposed.get(), **copies})
    try:
        yield
    finally:
        _transposed.reset(token)


def transposed(kernel):
    """The transposed copy of `kernel` made by the enclosing `transposed_for_decoding`, or None."""
    return _transposed.get().get(id(kernel))
