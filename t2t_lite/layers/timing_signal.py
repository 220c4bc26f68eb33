"""Positional encoding: the sinusoidal timing signal of paper §3.5.

Two layouts of the same sines and cosines:

- "concat" (tensor2tensor's `get_timing_signal_1d`, the default): for channel pair i in [0, d/2),
  inv_timescale_i = exp(-i * ln(10000) / max(d/2 - 1, 1)) and the signal is
  concat[sin(pos * inv_timescale), cos(pos * inv_timescale)] along the channels (two halves).
- "interleaved" (the paper and the Annotated Transformer): PE(pos, 2i) = sin(pos / 10000^(2i/d)),
  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

Positions start at 0. An odd channel count gets one zero channel at the end, as in t2t.
"""
import math

import keras
from keras import ops

MAX_TIMESCALE = 1.0e4
FORMS = ("concat", "interleaved")  # hparams_lib.TIMING_SIGNALS repeats them for the hparam


def _check_form(form):
    if form not in FORMS:
        raise ValueError(f"timing signal form {form!r}: expected one of {FORMS}")


def _inverse_timescales(channels, form):
    """1 / timescale for each of the channels // 2 sine/cosine pairs."""
    num_timescales = channels // 2
    pair = ops.arange(num_timescales, dtype="float32")
    if form == "concat":
        # t2t spreads the timescales geometrically from 1 to 10000 over the pairs.
        log_increment = math.log(MAX_TIMESCALE) / max(num_timescales - 1, 1)
    else:
        # The paper: 10000^(-2i/d).
        log_increment = 2.0 * math.log(MAX_TIMESCALE) / channels
    return ops.exp(pair * -log_increment)


def timing_signal(length, channels, form="concat", start_position=0):
    """The timing signal of positions [start_position, start_position + length).

    Args:
        length: number of positions (int or scalar int tensor).
        channels: depth of the signal, the model's hidden_size (a Python int).
        form: "concat" (t2t) or "interleaved" (the paper).
        start_position: first position (int or scalar tensor); one-step decoding at step t asks
            for `timing_signal(1, d, form, start_position=t)`.

    Returns:
        float32 tensor [length, channels].
    """
    _check_form(form)
    positions = ops.cast(ops.arange(length), "float32") + ops.cast(start_position, "float32")
    scaled_time = positions[:, None] * _inverse_timescales(channels, form)[None, :]
    if form == "concat":
        signal = ops.concatenate([ops.sin(scaled_time), ops.cos(scaled_time)], axis=1)
    else:
        signal = ops.stack([ops.sin(scaled_time), ops.cos(scaled_time)], axis=2)
        signal = ops.reshape(signal, (-1, 2 * (channels // 2)))
    if channels % 2:
        signal = ops.pad(signal, [[0, 0], [0, 1]])
    return signal


@keras.saving.register_keras_serializable(package="t2t_lite")
class AddTimingSignal(keras.layers.Layer):
    """Adds the §3.5 timing signal to embeddings [batch, length, d].

    Args:
        form: "concat" (t2t's layout, default) or "interleaved" (the paper's).

    Call arguments:
        x: float tensor [batch, length, d].
        start_position: position of x[:, 0] (int or scalar tensor, default 0), for decoding one
            step at a time.
    """

    def __init__(self, form="concat", **kwargs):
        super().__init__(**kwargs)
        _check_form(form)
        self.form = form

    def call(self, x, start_position=0):
        signal = timing_signal(ops.shape(x)[1], x.shape[-1], self.form, start_position)
        return x + ops.cast(signal, x.dtype)[None]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "form": self.form}
