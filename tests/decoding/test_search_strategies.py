"""The search's strategies over its one loop (decoding/loop.py, strategies/): n-best lists
(t2t's return_beams), target prefixes on every strategy, and sampling (CTranslate2's
sampling_topk, sampling_temperature and sampling_topp), against the model's teacher-forced log
probabilities, an exhaustive enumeration and the sampled distribution."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding import search, strategies
from t2t_lite.errors import UserError
from test_search import (TinyVocabularyModel, every_finished_sequence, inputs,  # noqa: F401
                         model)  # (inputs and model: fixtures)

EXTRA = 6


def hparams(**overrides):
    """SearchHParams with extra_length EXTRA and `overrides`."""
    return search.SearchHParams(extra_length=EXTRA, **overrides)


def searcher(model, search_hparams, fixed_shapes=False, seed=None, traced=False,
             jit_compile=False):
    """A function (inputs, prefixes=None) -> Hypotheses of numpy arrays: search_hypotheses
    run eagerly (tf.while_loop then runs its body in Python: quicker than a trace for these
    tiny models), or `traced` in a tf.function of [None, None] inputs and prefixes, as the
    SavedModel calls it."""
    def run(ids, prefixes):
        return search.search_hypotheses(model, ids, search_hparams, fixed_shapes=fixed_shapes,
                                        prefixes=prefixes, seed=seed)
    if traced:
        run = tf.function(run, jit_compile=jit_compile, input_signature=[
            tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32)])

    def call(ids, prefixes=None):
        ids = np.asarray(ids, np.int32)
        if prefixes is None:
            prefixes = np.zeros([len(ids), 0], np.int32)
        return search.Hypotheses(*(tensor.numpy() for tensor in run(ids, prefixes)))
    return call


def pieces(row, limit=None):
    """The pieces of an output row up to EOS (included), or, if it has none, its first `limit`
    (the length limit that cut it; None: all)."""
    row = list(row)
    return row[:row.index(EOS_ID) + 1] if EOS_ID in row else row[:limit]


def teacher_forced_log_probs(model, inputs, ids):
    """[B, N]: the sum of log-softmax(model(features)) at the pieces of each output ids
    [B, N, W] (up to EOS, included, or the length limit), its source inputs [B, S]."""
    batch, count, width = ids.shape
    targets = np.zeros([batch * count, width], np.int32)
    lengths = []
    limits = np.repeat(np.count_nonzero(inputs, axis=1) + EXTRA, count)
    for row, output in enumerate(ids.reshape(batch * count, width)):
        sequence = pieces(output, limits[row])
        targets[row, :len(sequence)] = sequence
        lengths.append(len(sequence))
    logits = model({"inputs": np.repeat(inputs, count, axis=0), "targets": targets})
    log_probs = tf.gather(tf.nn.log_softmax(logits), targets, batch_dims=2).numpy()
    mask = np.arange(width)[np.newaxis, :] < np.array(lengths)[:, np.newaxis]
    return (log_probs * mask).sum(axis=1).reshape(batch, count)


def assert_well_formed(found, log_probs_want):
    """Each input's hypotheses are distinct, best first, and their log_probs those wanted."""
    for row in range(found.ids.shape[0]):
        sequences = [tuple(pieces(output)) for output in found.ids[row]]
        assert len(set(sequences)) == len(sequences), row
        assert list(found.scores[row]) == sorted(found.scores[row], reverse=True), row
    np.testing.assert_allclose(found.log_probs, log_probs_want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_n_best_are_distinct_in_score_order_first_is_search_s(model, inputs, fixed_shapes):
    """num_hypotheses 3 of beam 4: the first hypothesis is `search`'s output and score, the
    three are distinct and in score order, each score its log probability over t2t's length
    penalty, and each log probability the teacher-forced one of the model."""
    search_hparams = hparams(beam_size=4, num_hypotheses=3)
    found = searcher(model, search_hparams, fixed_shapes)(inputs)
    assert found.ids.shape == (3, 3, inputs.shape[1] + EXTRA)
    ids, scores = search.search(model, inputs, search_hparams, fixed_shapes=fixed_shapes)
    np.testing.assert_array_equal(found.ids[:, 0], ids.numpy())
    np.testing.assert_allclose(found.scores[:, 0], scores.numpy(), rtol=1e-6)
    assert_well_formed(found, teacher_forced_log_probs(model, inputs, found.ids))
    limits = np.count_nonzero(inputs, axis=1) + EXTRA
    lengths = np.array([[len(pieces(output, limit)) for output in row]
                        for row, limit in zip(found.ids, limits)])
    np.testing.assert_allclose(found.scores, found.log_probs / ((5 + lengths) / 6) ** 0.6,
                               rtol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_n_best_are_the_best_of_every_sequence(seed):
    """With a beam wider than the number of prefixes, beam search is exhaustive: its 4 best
    are the 4 best scored of every finished sequence (ended by EOS, or cut at the length limit)
    listed out. A beam of 4 over the same 5 tokens, where the first step's copies of the start
    beam (NEG_INF) and NEG_INF candidates fill the 2K, returns 4 real sequences: distinct,
    with their model log probabilities."""
    model = TinyVocabularyModel(seed)
    alpha, max_length = 0.6, 3  # input length 1 + extra_length 2
    finished = every_finished_sequence(max_length)
    scored = sorted(((model.log_prob(sequence) / ((5 + len(sequence)) / 6) ** alpha, sequence)
                     for sequence in finished), reverse=True)
    found = search.search_hypotheses(model, [[EOS_ID]], search.SearchHParams(
        beam_size=64, alpha=alpha, extra_length=2, num_hypotheses=4))
    assert [pieces(row) for row in found.ids.numpy()[0]] == [want for _, want in scored[:4]]
    np.testing.assert_allclose(found.scores.numpy()[0], [score for score, _ in scored[:4]],
                               rtol=1e-5)
    narrow = search.search_hypotheses(model, [[EOS_ID]], search.SearchHParams(
        beam_size=4, alpha=alpha, extra_length=2, num_hypotheses=4))
    sequences = [pieces(row) for row in narrow.ids.numpy()[0]]
    assert_well_formed(
        search.Hypotheses(*(tensor.numpy() for tensor in narrow)),
        [[model.log_prob(sequence) for sequence in sequences]])


@pytest.mark.parametrize("beam_size", [1, 4])
def test_outputs_begin_with_their_prefix(model, inputs, beam_size):
    """Greedy and beam search with prefixes of 3, 1 and 0 pieces: every hypothesis begins with
    its row's prefix, its log probability (prefix included) the model's teacher-forced one; the
    row without a prefix, and a batch of empty prefixes (none wide, or all PAD), gives the
    output without prefixes; after its prefix, greedy search continues with the most probable
    piece, as the search from the same pieces would. Beam search runs in a tf.function of
    [None, None] inputs and prefixes, as the SavedModel calls it."""
    search_hparams = hparams(beam_size=beam_size, num_hypotheses=min(beam_size, 2))
    run = searcher(model, search_hparams, traced=beam_size > 1)
    prefixes = np.array([[5, 6, 7], [8, 0, 0], [0, 0, 0]], np.int32)
    found = run(inputs, prefixes)
    plain = run(inputs)
    for row, prefix in enumerate(prefixes):
        prefix = [piece for piece in prefix if piece]
        for output in found.ids[row]:
            assert list(output[:len(prefix)]) == prefix, row
    assert_well_formed(found, teacher_forced_log_probs(model, inputs, found.ids))
    for empty in (np.zeros([3, 4], np.int32), None):
        unprefixed = run(inputs, empty)
        np.testing.assert_array_equal(unprefixed.ids, plain.ids)
        np.testing.assert_allclose(unprefixed.scores, plain.scores, rtol=1e-6)
    np.testing.assert_array_equal(found.ids[2], plain.ids[2])
    if beam_size == 1:  # the step after the prefix picks the model's most probable piece
        targets = found.ids[:1, 0, :3]
        logits = model({"inputs": inputs[:1], "targets": np.pad(targets, [[0, 0], [0, 1]])})
        assert found.ids[0, 0, 3] == int(np.argmax(logits[0, 3]))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_prefix_longer_than_the_limit_is_cut_at_it(model, inputs, beam_size):
    """Row 1's limit is its 4 tokens + extra_length; a prefix of 12 pieces is cut there: the
    output is the prefix's first 10 pieces (no EOS), as any hypothesis cut by the limit."""
    limit = int(np.count_nonzero(inputs[1])) + EXTRA
    prefixes = np.zeros([3, 12], np.int32)
    prefixes[1] = np.arange(12) % 17 + 2
    found = searcher(model, hparams(beam_size=beam_size))(inputs, prefixes)
    assert found.ids[1, 0].tolist() == prefixes[1, :limit].tolist() + [0] * (
        inputs.shape[1] + EXTRA - limit)
    np.testing.assert_allclose(found.log_probs, teacher_forced_log_probs(model, inputs,
                                                                         found.ids), atol=1e-4)


def test_slots_of_no_possible_sequence_stay_empty():
    """A prefix of 2 pieces at a limit of 2 leaves one possible sequence, the prefix: beam 4's
    other 3 slots of num_hypotheses 4 are empty (ids 0, score and log probability NEG_INF),
    none of the impossible (NEG_INF) candidates that ended there among them."""
    model = TinyVocabularyModel(0)
    found = search.search_hypotheses(
        model, [[EOS_ID]], search.SearchHParams(beam_size=4, extra_length=1, num_hypotheses=4),
        prefixes=[[2, 3]])
    assert found.ids.numpy()[0].tolist() == [[2, 3], [0, 0], [0, 0], [0, 0]]
    assert float(found.log_probs[0, 0]) == pytest.approx(model.log_prob([2, 3]), abs=1e-5)
    assert found.scores.numpy()[0, 1:].tolist() == [search.NEG_INF] * 3
    assert found.log_probs.numpy()[0, 1:].tolist() == [search.NEG_INF] * 3


def test_prefixes_and_n_best_with_fixed_shapes(model, inputs):
    """With fixed shapes (every row to the end of the batch), beam search with prefixes and
    num_hypotheses 2 gives the outputs of the shrinking batch."""
    search_hparams = hparams(beam_size=3, num_hypotheses=2)
    prefixes = np.array([[5, 6], [0, 0], [9, 0]], np.int32)
    fixed = searcher(model, search_hparams, fixed_shapes=True)(inputs, prefixes)
    shrinking = searcher(model, search_hparams)(inputs, prefixes)
    np.testing.assert_array_equal(fixed.ids, shrinking.ids)
    np.testing.assert_allclose(fixed.scores, shrinking.scores, rtol=1e-5)
    np.testing.assert_allclose(fixed.log_probs, shrinking.log_probs, rtol=1e-5)


def sample(model, inputs, seed, fixed_shapes=False, **overrides):
    """search_hypotheses' samples (beam_size 1) with `seed` [2], as numpy Hypotheses."""
    run = searcher(model, hparams(beam_size=1, **overrides), fixed_shapes,
                   seed=tf.constant(seed, tf.int32))
    return run(inputs)


def test_one_seed_one_output(model, inputs):
    """Sampling from the whole distribution, 4 samples per input: the same seed gives the same
    samples, with fixed shapes (no row leaving the batch) as without; another seed other
    samples; every sample's log probability is the model's teacher-forced one, untempered."""
    settings = dict(sampling_topk=0, sampling_temperature=1.5, num_hypotheses=4)
    first = sample(model, inputs, [1, 2], **settings)
    assert first.ids.shape == (3, 4, inputs.shape[1] + EXTRA)
    again = sample(model, inputs, [1, 2], fixed_shapes=True, **settings)
    np.testing.assert_array_equal(again.ids, first.ids)
    other = sample(model, inputs, [1, 3], **settings)
    assert not np.array_equal(other.ids, first.ids)
    np.testing.assert_allclose(first.log_probs, teacher_forced_log_probs(model, inputs,
                                                                         first.ids), atol=1e-4)
    np.testing.assert_array_equal(first.scores, first.log_probs)
    assert (np.diff(first.scores, axis=1) <= 0).all()


def test_a_tiny_temperature_is_greedy(model, inputs):
    """At temperature 1e-4 the most probable piece outweighs any noise: greedy's output."""
    tiny = sample(model, inputs, [4, 5], sampling_topk=0, sampling_temperature=1e-4)
    greedy = searcher(model, hparams(beam_size=1))(inputs)
    np.testing.assert_array_equal(tiny.ids, greedy.ids)


def test_top_k_samples_among_the_k_most_probable():
    """sampling_topk 2 over 5 tokens: at every step of 300 samples, the token drawn is one of
    the 2 most probable after the sequence so far; both are drawn."""
    model = TinyVocabularyModel(1, positions=1 + EXTRA)
    found = sample(model, np.array([[EOS_ID]], np.int32), [7, 8], sampling_topk=2,
                   num_hypotheses=300)
    drawn_second = False
    for output in found.ids[0]:
        sequence = pieces(output)
        for length, token in enumerate(sequence):
            ranking = np.argsort(-model.next_log_probs(tuple(sequence[:length])))
            assert token in ranking[:2], sequence
            drawn_second |= token == ranking[1]
    assert drawn_second


# The chi-square distribution's 0.999 quantile with 3 degrees of freedom (the 4 tokens other
# than PAD, which is never drawn): a sampler of the right distribution exceeds it once in 1,000
# seeds.
CHI_SQUARE_3_AT_0_999 = 16.266


# The same quantile with 1 and 2 degrees of freedom (top-p keeping 2 or 3 of the 4 tokens).
CHI_SQUARE_1_AT_0_999, CHI_SQUARE_2_AT_0_999 = 10.828, 13.816


def first_piece_chi_square(temperature, probabilities, samples=2000, **settings):
    """Pearson's chi-square of the first pieces of `samples` samples of TinyVocabularyModel(0)
    at `temperature` (and `settings`) against `probabilities` [5]: no sample may be a piece of
    probability 0 (PAD's; those top-p leaves out), whose counts the statistic then leaves out."""
    model = TinyVocabularyModel(0, positions=1 + EXTRA)
    found = sample(model, np.array([[EOS_ID]], np.int32), [11, 12],
                   **{"sampling_topk": 0, **settings}, sampling_temperature=temperature,
                   num_hypotheses=samples)
    counts = np.bincount(found.ids[0, :, 0], minlength=5)
    assert counts[PAD_ID] == 0
    possible = np.asarray(probabilities) > 0
    assert not counts[~possible].any()
    expected = samples * np.asarray(probabilities)
    counts, expected = counts[possible], expected[possible]
    assert expected.min() >= 5  # the statistic's approximation holds
    return float(((counts - expected) ** 2 / expected).sum())


def softmax_without_pad(values):
    """softmax(values) over the pieces other than PAD, PAD's probability 0."""
    values = np.array(values, float)
    values[PAD_ID] = -np.inf
    return np.exp(values - values.max()) / np.exp(values - values.max()).sum()


def test_first_pieces_follow_the_softmax():
    """2,000 samples of a 5-token toy model's first piece (sampling_topk 0): their counts fit
    softmax(logits) (over the pieces but PAD) at temperature 1 and softmax(logits / 2) at
    temperature 2 (chi-square below its 0.999 quantile), and the temperature-2 counts do not
    fit softmax(logits)."""
    logits = TinyVocabularyModel(0, positions=1 + EXTRA).table[0, 0].numpy().astype(float)
    assert first_piece_chi_square(1.0, softmax_without_pad(logits)) < CHI_SQUARE_3_AT_0_999
    assert first_piece_chi_square(2.0, softmax_without_pad(logits / 2)) < CHI_SQUARE_3_AT_0_999
    assert first_piece_chi_square(2.0, softmax_without_pad(logits)) > CHI_SQUARE_3_AT_0_999


def nucleus(probabilities, p):
    """Top-p written out: the fewest most probable pieces whose probability reaches p, their
    probabilities renormalised, the others' 0."""
    kept, total = np.zeros(len(probabilities)), 0.0
    for piece in np.argsort(-np.asarray(probabilities), kind="stable"):
        if total >= p:
            break
        kept[piece], total = probabilities[piece], total + probabilities[piece]
    return kept / kept.sum()


def test_first_pieces_follow_the_renormalised_nucleus():
    """sampling_topp (nucleus sampling, CTranslate2's): 2,000 first pieces fit the fewest most
    probable pieces whose probability reaches p, renormalised (chi-square below its 0.999
    quantile), none of the others drawn; with sampling_topk and a temperature in CTranslate2's
    order: the k most probable, their logits / T, then the nucleus of that. By hand, the toy
    model's first-piece probabilities are about 0.606, 0.208, 0.129 and 0.058 (pieces 2, 3, 1,
    4): p = 0.9 keeps three (0.813 < 0.9 before the third); over the 3 best at T = 2 they are
    about 0.489, 0.285 and 0.226, and p = 0.7 keeps two."""
    logits = TinyVocabularyModel(0, positions=1 + EXTRA).table[0, 0].numpy().astype(float)
    whole = nucleus(softmax_without_pad(logits), 0.9)
    assert np.flatnonzero(whole).tolist() == [1, 2, 3]
    assert first_piece_chi_square(1.0, whole, sampling_topp=0.9) < CHI_SQUARE_2_AT_0_999
    best_three = np.where(np.isin(np.arange(5), [1, 2, 3]), logits, -np.inf)
    tempered = nucleus(softmax_without_pad(best_three / 2), 0.7)
    assert np.flatnonzero(tempered).tolist() == [2, 3]
    assert first_piece_chi_square(2.0, tempered, sampling_topk=3,
                                  sampling_topp=0.7) < CHI_SQUARE_1_AT_0_999


def test_a_tiny_nucleus_is_greedy(model, inputs):
    """sampling_topp 1e-6 keeps the most probable piece alone: greedy's output."""
    tiny = sample(model, inputs, [4, 5], sampling_topk=0, sampling_topp=1e-6)
    greedy = searcher(model, hparams(beam_size=1))(inputs)
    np.testing.assert_array_equal(tiny.ids, greedy.ids)


@pytest.mark.parametrize("overrides, named", [
    (dict(beam_size=1, sampling_topk=0, sampling_topp=0.0), "sampling_topp=0.0"),
    (dict(beam_size=1, sampling_topk=0, sampling_topp=1.5), "sampling_topp=1.5"),
    (dict(beam_size=1, sampling_topp=0.9), "sampling_topp=0.9 samples with a sampling_topk"),
    (dict(beam_size=4, num_hypotheses=5), "num_hypotheses=5"),
    (dict(beam_size=4, sampling_topk=0), "sampling_topk=0"),
    (dict(beam_size=1, sampling_topk=-1), "sampling_topk=-1"),
    (dict(beam_size=1, sampling_topk=0, sampling_temperature=0.0), "sampling_temperature=0.0"),
    (dict(beam_size=4, num_hypotheses=3, stop_after_finished=2), "stop_after_finished=2"),
    (dict(num_hypotheses=0), "num_hypotheses=0")])
def test_settings_that_cannot_go_together_are_refused(overrides, named):
    """A user's search hparams that cannot go together: a UserError (and ValueError) naming
    --decode_hparams and the value, where the SearchHParams are made, before any search."""
    with pytest.raises(search.SearchSettingError, match=f"--decode_hparams: {named}") as raised:
        hparams(**overrides)
    assert isinstance(raised.value, UserError) and isinstance(raised.value, ValueError)


def test_sampling_without_a_seed_is_refused(model, inputs):
    with pytest.raises(ValueError, match="seed"):
        search.search_hypotheses(model, inputs, hparams(beam_size=1, sampling_topk=0))


@pytest.mark.parametrize("overrides, name", [
    (dict(), "beam"), (dict(beam_size=1), "greedy"),
    (dict(beam_size=1, sampling_topk=0), "sampling"),
    (dict(beam_size=1, sampling_topk=5, sampling_topp=0.9), "sampling")])
def test_the_settings_choose_a_registered_strategy_of_settings_that_exist(overrides, name):
    """strategies.STRATEGIES: each strategy's settings are SearchHParams fields, and the
    settings choose one by name; sampling alone draws (needs a seed)."""
    fields = {field.name for field in dataclasses.fields(search.SearchHParams)}
    assert all(set(strategy.settings) <= fields for strategy in strategies.STRATEGIES.values())
    assert strategies.chosen(hparams(**overrides)).name == name
    assert strategies.samples(hparams(**overrides)) == (name == "sampling")
