"""The §3.5 timing signal, both layouts, against the formulas evaluated by hand."""
import math

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers.timing_signal import AddTimingSignal, timing_signal


def test_concat_form_hand_computed_values():
    signal = np.asarray(timing_signal(10, 8, "concat"))
    assert signal.shape == (10, 8) and signal.dtype == np.float32
    # d = 8: 4 timescales, inv_1 = exp(-1 * ln(10000) / 3) = 0.0464159;
    # position 3: sin(3 * 0.0464159) = 0.1387981 (channel 1), cos(...) = 0.9903207 (channel 5).
    assert signal[3, 1] == pytest.approx(0.1387981, abs=1e-6)
    assert signal[3, 5] == pytest.approx(0.9903207, abs=1e-6)
    # Channel 0 has timescale 1: sin(pos); the cosine half starts at channel d/2.
    assert signal[7, 0] == pytest.approx(math.sin(7.0), abs=1e-6)
    assert signal[7, 4] == pytest.approx(math.cos(7.0), abs=1e-6)


def test_concat_form_matches_formula_everywhere():
    length, channels = 13, 12
    half = channels // 2
    inv = np.exp(-np.arange(half) * math.log(10000.0) / max(half - 1, 1))
    scaled = np.arange(length)[:, None] * inv[None, :]
    expected = np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)
    np.testing.assert_allclose(timing_signal(length, channels), expected, atol=1e-5)


def test_interleaved_form_is_the_papers_pe():
    signal = np.asarray(timing_signal(10, 8, "interleaved"))
    # PE(3, 2) = sin(3 / 10000^(2/8)) = sin(0.3) = 0.2955202; PE(3, 3) = cos(0.3) = 0.9553365.
    assert signal[3, 2] == pytest.approx(0.2955202, abs=1e-6)
    assert signal[3, 3] == pytest.approx(0.9553365, abs=1e-6)
    positions, i = np.arange(10)[:, None], np.arange(4)[None, :]
    angles = positions / 10000.0 ** (2 * i / 8)
    np.testing.assert_allclose(signal[:, 0::2], np.sin(angles), atol=1e-5)
    np.testing.assert_allclose(signal[:, 1::2], np.cos(angles), atol=1e-5)


def test_positions_start_at_zero():
    signal = np.asarray(timing_signal(1, 6))
    np.testing.assert_allclose(signal[0], [0, 0, 0, 1, 1, 1], atol=1e-7)


@pytest.mark.parametrize("form", ["concat", "interleaved"])
def test_start_position_offsets_the_signal(form):
    full = np.asarray(timing_signal(20, 16, form))
    np.testing.assert_allclose(timing_signal(1, 16, form, start_position=7), full[7:8],
                               atol=1e-6)
    np.testing.assert_allclose(timing_signal(5, 16, form, start_position=tf.constant(11)),
                               full[11:16], atol=1e-6)


def test_odd_channel_count_pads_one_zero_channel():
    signal = np.asarray(timing_signal(4, 7))
    assert signal.shape == (4, 7)
    np.testing.assert_array_equal(signal[:, 6], 0.0)


def test_layer_adds_signal_at_offset_and_round_trips_config():
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    layer = AddTimingSignal("interleaved")
    np.testing.assert_allclose(layer(x), x + np.asarray(timing_signal(5, 8, "interleaved")),
                               atol=1e-6)
    np.testing.assert_allclose(layer(x[:, :1], start_position=4),
                               x[:, :1] + np.asarray(timing_signal(5, 8, "interleaved"))[4],
                               atol=1e-6)
    assert AddTimingSignal.from_config(layer.get_config()).form == "interleaved"


def test_unknown_form_is_rejected():
    with pytest.raises(ValueError, match="interleaved"):
        timing_signal(3, 4, "sinusoid")
