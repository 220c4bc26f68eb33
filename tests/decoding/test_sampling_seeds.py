"""Sampling with one seed: a run's lines draw samples of their own, each decided by the seed and
the line's index in the run alone, so that a rerun gives them again in any batches, and a line
decoded alone (interactively, or a call of the Python API at a time) draws as in a file
(docs/decoding.md, sampling)."""
import io

import numpy as np
import tensorflow as tf

import t2t_lite
from t2t_lite.decoding.decoder import Translator, TranslatorHParams, decode_interactively
from t2t_lite.keyed_random import hashed_uniform
from t2t_lite.decoding.trained_model import decode_hparams

# Hot enough that the copy model's samples of one line differ.
SAMPLING = dict(sampling_topk=0, sampling_temperature=3.0)


def first_test_line(data_dir) -> str:
    with open(f"{data_dir}/algorithmic_copy-test.inputs.txt", encoding="utf-8") as handle:
        return handle.readline().strip()


def texts(translations) -> list:
    return [translation.hypotheses[0].text for translation in translations]


def sampled(translator, lines, first_line) -> list:
    """The Translator's sample of each line, lines[0] being line `first_line` of the run."""
    return [line_texts[0] for _, results in translator.translate_in_order(
        lines, False, first_line=first_line) for line_texts in translator.texts(results)]


def test_one_seed_gives_each_line_its_own_samples_in_any_batch(trained_copy_model, capsys):
    """200 copies of one line: at least 150 distinct samples; the same 200 again from the
    same seed with 40 of them decoded a line at a time, then the rest in batches of 7
    searched two at a time, and interactively; the N samples of one line differ too."""
    data_dir, output_dir, _ = trained_copy_model
    line = first_test_line(data_dir)
    model = t2t_lite.load(output_dir, seed=5)
    together = texts(model.translate([line] * 200, **SAMPLING))
    assert len(set(together)) >= 150

    # A rerun of the same seed, with the same engine (its search traced once).
    translator = model.translator(*decode_hparams(SAMPLING))
    rerun = Translator(model.model, model.encoders, translator.search_hparams,
                       translator_hparams=TranslatorHParams(batch_size=7, parallel_batches=2),
                       engine=translator.engine, seed=5)
    alone = [text for i in range(40) for text in sampled(rerun, [line], i)]
    assert alone + sampled(rerun, [line] * 160, 40) == together
    decode_interactively(rerun, io.BytesIO(f"{line}\n".encode() * 20))
    assert capsys.readouterr().out.splitlines() == together[:20]
    # A call of the Python API goes on counting the run's lines.
    assert texts(model.translate([line] * 3, **SAMPLING)) != together[:3]

    samples = model.translate([line], num_hypotheses=50, **SAMPLING)[0].hypotheses
    assert len({sample.text for sample in samples}) >= 40


def python_uniform(keys, column) -> float:
    """hashed_uniform's value of one row's `keys` and `column`, in Python's integers:
    splitmix64 over the keys, then the low 32 bits xor the column times the 32-bit golden
    ratio through MurmurHash3's finalizer, its top 24 bits."""
    mask64, mask32 = 2 ** 64 - 1, 2 ** 32 - 1
    state = 0
    for value in keys:
        x = state ^ ((value + 0x9E3779B97F4A7C15) & mask64)
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask64
        state = x ^ (x >> 31)
    h = (state & mask32) ^ ((column * 0x9E3779B9) & mask32)
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & mask32
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & mask32
    h ^= h >> 16
    return ((h >> 8) + 0.5) / 2 ** 24


def test_the_noise_is_a_hash_of_the_keys_and_the_column():
    """Each uniform is a function of its row's keys (negative ones as two's complement) and
    its column alone: the row [5, 7, ...] draws the same beside any other row."""
    keys = [[5, 7, 0, 3], [5, 8, 0, 3], [-1, 2 ** 31 - 1, 1, 0]]
    drawn = hashed_uniform(tf.constant(keys, tf.int32), 4).numpy()
    expected = [[python_uniform(row, column) for column in range(4)] for row in keys]
    np.testing.assert_allclose(drawn, expected, rtol=1e-7)
    np.testing.assert_array_equal(hashed_uniform(tf.constant(keys[:1], tf.int32), 4).numpy(),
                                  drawn[:1])
