"""Scoring given translations (OpenNMT-tf's `onmt-main score`, fairseq's --score-reference):
the teacher-forced log-likelihood against the step-by-step decoder and against the searches'
own scores of their outputs, on a tiny untrained model."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding import search
from t2t_lite.decoding.scoring import target_log_likelihoods
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.models.building import build_model

VOCAB_SIZE = 64
SIGNATURE = [tf.TensorSpec([None, None], tf.int32)] * 2


@pytest.fixture(scope="module")
def model():
    hparams = registry.hparams("transformer_tiny").override_from_string(
        "hidden_size=32,filter_size=64,num_heads=4,num_hidden_layers=2")
    keras.utils.set_random_seed(5)
    model = build_model("transformer", hparams, VOCAB_SIZE)
    # PAD's logit at 0: the other logits are i.i.d. symmetric about 0 (random rows), so PAD is
    # practically never among the searches' candidates, and their outputs hold no PAD inside.
    weights = model.softmax_weights
    weights.assign(tf.tensor_scatter_nd_update(weights, [[PAD_ID]],
                                               tf.zeros([1, weights.shape[1]])))
    return model


@pytest.fixture(scope="module")
def scored(model):
    """target_log_likelihoods traced once for every shape, as callers trace it."""
    return tf.function(lambda inputs, targets: target_log_likelihoods(model, inputs, targets),
                       input_signature=SIGNATURE)


def padded_rows(lengths, width, seed):
    """int32 [len(lengths), width]: random pieces, EOS at position length - 1, then PAD."""
    ids = np.random.default_rng(seed).integers(2, VOCAB_SIZE, size=(len(lengths), width))
    for row, length in zip(ids, lengths):
        row[length - 1], row[length:] = EOS_ID, PAD_ID
    return ids.astype(np.int32)


@pytest.fixture(scope="module")
def pairs():
    """(inputs [4, 8], targets [4, 9]) of different lengths in each batch."""
    return padded_rows([8, 3, 5, 1], 8, seed=0), padded_rows([9, 2, 6, 4], 9, seed=1)


def step_by_step(model, inputs, targets):
    """The log-likelihood summed in Python over decode_step's log-softmax, one position at a
    time with the cache, until each target's EOS."""
    encoder_output, inputs_padding = model.encode(inputs)
    cache = model.initial_cache(encoder_output, inputs_padding, targets.shape[1])
    decoder_input = np.concatenate([np.zeros((len(targets), 1), np.int32), targets[:, :-1]], 1)
    totals = np.zeros(len(targets))
    for position in range(targets.shape[1]):
        logits, cache = model.decode_step(decoder_input[:, position], position, cache)
        log_probs = tf.nn.log_softmax(logits).numpy()
        for row, target in enumerate(targets):
            if target[position] != PAD_ID:
                totals[row] += log_probs[row, target[position]]
    return totals


def test_the_sum_equals_the_step_by_step_decoder(model, scored, pairs):
    inputs, targets = pairs
    log_likelihood, pieces = scored(inputs, targets)
    assert log_likelihood.dtype == tf.float32 and pieces.dtype == tf.int32
    np.testing.assert_allclose(log_likelihood.numpy(), step_by_step(model, inputs, targets),
                               atol=1e-4)
    assert pieces.numpy().tolist() == [9, 2, 6, 4]  # each target's pieces and its EOS
    assert np.all(log_likelihood.numpy() < 0)


def test_padding_changes_nothing(scored, pairs):
    inputs, targets = pairs
    log_likelihood, pieces = scored(inputs, targets)
    more_padding = scored(np.pad(inputs, [[0, 0], [0, 5]]), np.pad(targets, [[0, 0], [0, 7]]))
    np.testing.assert_allclose(more_padding[0].numpy(), log_likelihood.numpy(), atol=1e-5)
    assert more_padding[1].numpy().tolist() == pieces.numpy().tolist()


def test_a_row_does_not_depend_on_the_other_rows(scored, pairs):
    inputs, targets = pairs
    together = scored(inputs, targets)[0].numpy()
    alone = [scored(inputs[i:i + 1, :np.count_nonzero(inputs[i])],
                    targets[i:i + 1, :np.count_nonzero(targets[i])])[0].numpy()[0]
             for i in range(len(inputs))]
    np.testing.assert_allclose(together, alone, atol=1e-5)
    reversed_batch = scored(inputs[::-1], targets[::-1])[0].numpy()
    np.testing.assert_allclose(reversed_batch[::-1], together, atol=1e-5)


def searched(model, inputs, search_hparams):
    """(ids, scores) of search.search, with the precondition of comparing them to scoring:
    no PAD among a sequence's pieces (an untrained model could pick it), so that the non-PAD
    ids are the sequence searched."""
    ids, scores = tf.function(search.search)(model, tf.constant(inputs), search_hparams)
    ids = ids.numpy()
    for row in ids:
        length = np.max(np.nonzero(row)[0]) + 1
        assert np.all(row[:length] != PAD_ID), row
    return ids, scores.numpy()


def test_greedy_search_scores_its_output_with_its_log_probability(model, scored, pairs):
    inputs = pairs[0]
    ids, scores = searched(model, inputs, SearchHParams(beam_size=1, extra_length=4))
    log_likelihood, pieces = scored(inputs, ids)
    np.testing.assert_allclose(log_likelihood.numpy(), scores, atol=1e-4)
    assert pieces.numpy().tolist() == np.count_nonzero(ids, axis=1).tolist()


def test_beam_search_scores_are_log_likelihoods_over_the_length_penalty(model, scored, pairs):
    inputs = pairs[0]
    alpha = 0.6
    ids, scores = searched(model, inputs, SearchHParams(beam_size=3, alpha=alpha,
                                                        extra_length=4))
    log_likelihood, pieces = scored(inputs, ids)
    penalty = ((5.0 + pieces.numpy()) / 6.0) ** alpha
    np.testing.assert_allclose(log_likelihood.numpy(), scores * penalty, atol=1e-4)


def test_a_bfloat16_model_is_scored_in_float32(pairs):
    """Under mixed_precision=bfloat16 the sums are float32, and the step-by-step decoder's up to
    bfloat16's rounding of the activations (a pass and its steps round differently)."""
    hparams = registry.hparams("transformer_tiny").override_from_string(
        "hidden_size=32,filter_size=64,num_heads=4,num_hidden_layers=2,"
        "mixed_precision=bfloat16")
    keras.utils.set_random_seed(5)
    model = build_model("transformer", hparams, VOCAB_SIZE)
    assert model.decoder_stack[0].compute_dtype == "bfloat16"
    inputs, targets = pairs
    log_likelihood, pieces = target_log_likelihoods(model, inputs, targets)
    assert log_likelihood.dtype == tf.float32
    np.testing.assert_allclose(log_likelihood.numpy(), step_by_step(model, inputs, targets),
                               rtol=2e-2)
