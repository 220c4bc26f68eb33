"""Alignments from the encoder-decoder attention (OpenNMT-tf's hard alignments, fairseq's
--print-alignment): on the trained copy model, whose translation is its input, piece j comes
from source piece j; and the weights' sums, padding and the text form."""
import os

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data.vocab import EOS_ID
from t2t_lite.models import restoring
from t2t_lite.decoding.alignments import alignment_text, attention_to_source, hard_alignment

SENTENCES = 40


def padded(rows, width=None):
    width = width or max(map(len, rows))
    return np.array([row + [0] * (width - len(row)) for row in rows], np.int32)


@pytest.fixture(scope="module")
def copy_model(trained_copy_model):
    """(model, source rows, target rows) of conftest's copy model and the first SENTENCES test
    pairs, ids with EOS."""
    data_dir, output_dir, hparams = trained_copy_model
    problem = registry.problem("algorithmic_copy")
    model = restoring.load_model("transformer", hparams, problem.vocab_size(data_dir), output_dir)
    encoders = problem.feature_encoders(data_dir)
    sides = {}
    for side in ("inputs", "targets"):
        path = os.path.join(data_dir, f"algorithmic_copy-test.{side}.txt")
        with open(path) as handle:
            lines = handle.read().splitlines()[:SENTENCES]
        sides[side] = [encoders[side].encode(line) + [EOS_ID] for line in lines]
    return model, sides["inputs"], sides["targets"]


@pytest.fixture(scope="module")
def weights(copy_model):
    model, sources, targets = copy_model
    return attention_to_source(model, padded(sources), padded(targets)).numpy()


def test_the_copy_model_aligns_each_piece_with_its_source_piece(copy_model, weights):
    _, sources, targets = copy_model
    pairs = [hard_alignment(weights[k], len(source), len(target))
             for k, (source, target) in enumerate(zip(sources, targets))]
    assert [len(sentence) for sentence in pairs] == [len(target) - 1 for target in targets]
    assert all([j for _, j in sentence] == list(range(len(sentence))) for sentence in pairs)
    diagonal = sum(i == j for sentence in pairs for i, j in sentence)
    assert diagonal >= 0.95 * sum(map(len, pairs)), pairs


def test_the_weights_sum_to_one_over_the_real_source_positions(copy_model, weights):
    _, sources, targets = copy_model
    assert weights.dtype == np.float32
    assert weights.shape == (SENTENCES, max(map(len, targets)), max(map(len, sources)))
    for row, source in zip(weights, sources):
        np.testing.assert_allclose(row[:, :len(source)].sum(axis=1), 1.0, atol=1e-5)
        assert np.all(row[:, len(source):] == 0)


def test_more_padding_changes_no_weight(copy_model, weights):
    model, sources, targets = copy_model
    width_s, width_t = weights.shape[2] + 6, weights.shape[1] + 4
    more = attention_to_source(model, padded(sources, width_s), padded(targets, width_t))
    np.testing.assert_allclose(more.numpy()[:, :weights.shape[1], :weights.shape[2]], weights,
                               atol=1e-5)


def test_each_layer_can_be_chosen(copy_model):
    model, sources, targets = copy_model
    features = {"inputs": padded(sources[:3]), "targets": padded(targets[:3])}
    per_head = model.attention_weights(features)["decoder"][0]["encoder_decoder"].numpy()
    np.testing.assert_allclose(attention_to_source(model, features["inputs"],
                                                   features["targets"], layer=0).numpy(),
                               per_head.mean(axis=1), atol=1e-6)


def test_eos_of_neither_side_is_aligned():
    """Target position 2 (EOS) and source position 2 (EOS) take the largest weights, and are
    left out; target piece 1 looks most at source piece 0."""
    weights = np.array([[0.1, 0.3, 0.6, 0.0],
                        [0.5, 0.1, 0.4, 0.0],
                        [0.0, 0.0, 1.0, 0.0]])
    assert hard_alignment(weights, 3, 3) == ((1, 0), (0, 1))
    assert hard_alignment(weights, 3, 1) == ()  # only EOS on the target side
    assert hard_alignment(weights, 1, 3) == ()  # only EOS on the source side
    assert hard_alignment(tf.constant(weights), 3, 3) == ((1, 0), (0, 1))


def test_the_text_is_source_dash_target_pairs():
    assert alignment_text(((1, 0), (0, 1), (12, 2))) == "1-0 0-1 12-2"
    assert alignment_text(()) == ""
