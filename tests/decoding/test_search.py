"""Incremental decoding and beam search (paper §6.1; t2t's fast decoding and beam_search.py)."""
import itertools
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data.vocab import EOS_ID
from t2t_lite.decoding import search
from t2t_lite.layers.attention import FixedLengthCache, GrowingCache, MemoryCache
from t2t_lite.models.building import build_model

VOCAB_SIZE = 20


@pytest.fixture(scope="module")
def model():
    hparams = registry.hparams("transformer_tiny").override_from_string(
        "hidden_size=32,filter_size=64,num_heads=4,num_hidden_layers=2")
    keras.utils.set_random_seed(3)
    return build_model("transformer", hparams, VOCAB_SIZE)


@pytest.fixture(scope="module")
def inputs():
    ids = np.random.default_rng(0).integers(2, VOCAB_SIZE, size=(3, 7)).astype(np.int32)
    ids[1, 4:] = 0
    ids[1, 3] = ids[:, -1] = EOS_ID
    return ids


@pytest.mark.parametrize("fixed_length", [False, True])
def test_one_step_with_the_cache_equals_the_whole_prefix(model, inputs, fixed_length):
    encoder_output, inputs_padding = model.encode(inputs)
    targets = np.random.default_rng(1).integers(2, VOCAB_SIZE, size=(3, 9)).astype(np.int32)
    decoder_input = np.concatenate([np.zeros((3, 1), np.int32), targets[:, :-1]], axis=1)
    whole = model.decode(decoder_input, encoder_output, inputs_padding).numpy()
    cache = model.initial_cache(encoder_output, 9 if fixed_length else None)
    assert isinstance(cache.self_attention[0], FixedLengthCache if fixed_length else GrowingCache)
    assert all(isinstance(memory, MemoryCache) for memory in cache.memory)
    for position in range(9):
        logits, cache = model.decode_step(decoder_input[:, position], position, cache,
                                          inputs_padding)
        np.testing.assert_allclose(logits.numpy(), whole[:, position], rtol=1e-4, atol=1e-4)
        cached_length = 9 if fixed_length else position + 1
        assert cache.self_attention[0].key.shape[2] == cached_length


# How each search runs: the growing cache without XLA, the fixed-size one with it.
COMPILATIONS = {"growing cache": dict(fixed_shapes=False, jit_compile=False),
                "fixed cache, XLA": dict(fixed_shapes=True, jit_compile=True)}


def run_search(model, inputs, beam_size, use_cache=True, fixed_shapes=False, jit_compile=False,
               decoding_layout=False, traced=None, stop_after_finished=0):
    """(ids, scores) of the search; `traced`, a list, receives the traced function's graph."""
    def run():
        if decoding_layout:  # as search.search runs them
            with model.decoding_layout():
                return run_without()
        return run_without()

    def run_without():
        if beam_size == 1:
            return search.greedy_search(model, inputs, extra_length=6, use_cache=use_cache,
                                        fixed_shapes=fixed_shapes)
        return search.beam_search(model, inputs, beam_size, extra_length=6,
                                  use_cache=use_cache, fixed_shapes=fixed_shapes,
                                  stop_after_finished=stop_after_finished)
    function = tf.function(run, jit_compile=jit_compile)
    ids, scores = function()
    if traced is not None:
        traced.append(function.get_concrete_function().graph)
    return ids.numpy(), scores.numpy()


def matmuls_by_transposed_kernel(graph) -> int:
    """MatMul ops with transpose_b in the graph and the functions it calls (the loop's body)."""
    definition = graph.as_graph_def()
    nodes = list(definition.node) + [node for function in definition.library.function
                                     for node in function.node_def]
    return sum(node.op == "MatMul" and node.attr["transpose_b"].b for node in nodes)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("fixed_shapes", [False, True])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_an_empty_batch_gives_no_outputs(model, beam_size, fixed_shapes, use_cache):
    """No sentences (a server's empty request): ids [0, S + extra_length] and no scores,
    where the beams' shared rows would divide by zero rows."""
    ids, scores = run_search(model, np.zeros([0, 7], np.int32), beam_size, use_cache,
                             fixed_shapes)
    assert ids.shape == (0, 7 + 6) and scores.shape == (0,)


@pytest.mark.parametrize("compilation", list(COMPILATIONS))
@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_and_uncached_search_give_the_same_output(model, inputs, beam_size, compilation):
    cached_ids, cached_scores = run_search(model, inputs, beam_size, True,
                                           **COMPILATIONS[compilation])
    uncached_ids, uncached_scores = run_search(model, inputs, beam_size, False,
                                               **COMPILATIONS[compilation])
    assert cached_ids.shape == (3, 7 + 6)
    np.testing.assert_array_equal(cached_ids, uncached_ids)
    np.testing.assert_allclose(cached_scores, uncached_scores, rtol=1e-5)


@pytest.mark.parametrize("compilation", list(COMPILATIONS))
@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_decoding_layout_gives_the_same_output(model, inputs, beam_size, compilation):
    graphs = []
    want_ids, want_scores = run_search(model, inputs, beam_size, traced=graphs,
                                       **COMPILATIONS[compilation])
    got_ids, got_scores = run_search(model, inputs, beam_size, decoding_layout=True,
                                     traced=graphs, **COMPILATIONS[compilation])
    # The 2 decoder layers' 7 square or widening projections, in each traced step (the first
    # one and the loop's; the vocabulary projection is by the embedding transposed in both).
    added = matmuls_by_transposed_kernel(graphs[1]) - matmuls_by_transposed_kernel(graphs[0])
    assert added > 0 and added % (2 * 7) == 0
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5)


def test_beam_of_one_without_penalty_is_greedy(model, inputs):
    greedy_ids, greedy_scores = search.greedy_search(model, inputs, extra_length=6)
    beam_ids, beam_scores = search.beam_search(model, inputs, beam_size=1, alpha=0.0,
                                               extra_length=6)
    np.testing.assert_array_equal(beam_ids.numpy(), greedy_ids.numpy())
    np.testing.assert_allclose(beam_scores.numpy(), greedy_scores.numpy(), rtol=1e-5)


def test_length_penalty_is_t2t_s():
    assert float(search.length_penalty(7, 0.6)) == pytest.approx(((5 + 7) / 6) ** 0.6)
    assert float(search.length_penalty(7, 0.0)) == 1.0


class TinyVocabularyModel:
    """A stand-in model over 5 tokens whose next-token distribution depends on the prefix
    through fixed random tables, so that every output sequence's probability can be listed."""
    vocab_size = 5

    def __init__(self, seed, positions=6):
        self.table = tf.constant(np.random.default_rng(seed).normal(size=(positions, 5, 5)) * 2,
                                 tf.float32)

    def encode(self, inputs, training=False):
        return tf.zeros(tf.concat([tf.shape(inputs), [1]], 0)), tf.equal(inputs, 0)

    def decode(self, decoder_input, encoder_output, inputs_padding, training=False):
        previous = decoder_input  # [N, T]: logits at t depend on position t and the token there
        positions = tf.range(tf.shape(decoder_input)[1])
        return tf.gather_nd(self.table, tf.stack(
            [tf.broadcast_to(positions, tf.shape(previous)), previous], axis=-1))

    def next_log_probs(self, position, previous):
        """Log probabilities [5] of the token at `position` after token `previous`."""
        logits = self.table[position, previous].numpy().astype(float)
        return logits - math.log(np.exp(logits).sum())

    def log_prob(self, sequence):
        return sum(self.next_log_probs(position, previous)[token] for position, (previous, token)
                   in enumerate(zip([0] + list(sequence[:-1]), sequence)))


@pytest.mark.parametrize("seed", range(4))
def test_a_wide_beam_finds_the_best_scored_sequence(seed):
    """With a beam wider than the number of prefixes, beam search is exhaustive: it must return
    the finished sequence (ended by EOS, or cut at the length limit) of the highest log
    probability / length penalty."""
    model = TinyVocabularyModel(seed)
    alpha, max_length = 0.6, 3  # input length 1 + extra_length 2
    others = [0, 2, 3, 4]
    finished = [list(prefix) + [EOS_ID] for length in range(1, max_length + 1)
                for prefix in itertools.product(others, repeat=length - 1)]
    finished += [list(cut) for cut in itertools.product(others, repeat=max_length)]
    best, best_score = None, -math.inf
    for sequence in finished:
        score = model.log_prob(sequence) / ((5 + len(sequence)) / 6) ** alpha
        if score > best_score:
            best, best_score = sequence, score
    ids, scores = search.beam_search(model, [[EOS_ID]], beam_size=64, alpha=alpha,
                                     extra_length=2, use_cache=False)
    assert ids.numpy()[0, :len(best)].tolist() == best
    assert float(scores[0]) == pytest.approx(best_score, rel=1e-5)


class RowCountingModel:
    """The model, recording how many rows each decoding step runs on: its cached step, or the
    uncached search's whole decode (one call a step when the search runs eagerly, as
    tf.while_loop then runs its body in Python)."""

    def __init__(self, model):
        self.model, self.rows_per_step = model, []
        self.vocab_size = model.vocab_size

    def __getattr__(self, name):
        return getattr(self.model, name)

    def decode_step(self, ids, *args):
        self.rows_per_step.append(int(ids.shape[0]))
        return self.model.decode_step(ids, *args)

    def decode(self, decoder_input, *args, **kwargs):
        self.rows_per_step.append(int(decoder_input.shape[0]))
        return self.model.decode(decoder_input, *args, **kwargs)


def search_counting_rows(model, inputs, beam_size):
    """(ids, scores, the rows of every decoding step) of greedy (beam_size 1) or beam search
    with extra_length 6."""
    counting = RowCountingModel(model)
    if beam_size == 1:
        ids, scores = search.greedy_search(counting, inputs, extra_length=6)
    else:
        ids, scores = search.beam_search(counting, inputs, beam_size, extra_length=6)
    return ids, scores, counting.rows_per_step


@pytest.mark.parametrize("beam_size", [1, 3])
def test_done_sentences_leave_the_batch_without_changing_any_output(model, inputs, beam_size):
    """Row 1's input is 4 tokens to the others' 7, so its limit comes 3 steps earlier: the
    steps after run on the other sentences' rows only, and every output stays as in the
    fixed-shape search, where no row leaves. Beam search's first step runs on one row per
    sentence (the beams all start from the start symbol), the next on K per sentence."""
    ids, scores, rows_per_step = search_counting_rows(model, inputs, beam_size)
    if beam_size == 1:
        beam_rows = rows_per_step
    else:
        assert rows_per_step[0] == 3
        beam_rows = rows_per_step[1:]
    assert beam_rows[0] == 3 * beam_size
    assert min(beam_rows) <= 2 * beam_size
    assert beam_rows == sorted(beam_rows, reverse=True)
    fixed_ids, fixed_scores = run_search(model, inputs, beam_size,
                                         **COMPILATIONS["fixed cache, XLA"])
    np.testing.assert_array_equal(ids.numpy(), fixed_ids)
    np.testing.assert_allclose(scores.numpy(), fixed_scores, rtol=1e-5)


def beam_search_by_the_rule(model, beam_size, alpha, max_length, stop_after_finished,
                            max_steps=None):
    """The search of SearchHParams.stop_after_finished, written out in Python for one input of
    TinyVocabularyModel: each step's 2K best candidates (by log probability) of the alive
    beams, those that end (EOS, or the length limit) scored log probability / length penalty
    into the K best finished, the K best others alive; done when no alive sequence can beat
    the best finished (t2t's bound), or once `stop_after_finished` (> 0) candidates have ended
    among each step's K best; or after `max_steps` steps. Returns (best finished sequence, its
    score, steps run)."""
    alive = [((), 0.0)]
    finished, ended = [], 0
    for step in range(min(max_length, max_steps or max_length)):
        candidates = []
        for sequence, log_prob in alive:
            log_probs = model.next_log_probs(step, sequence[-1] if sequence else 0)
            candidates += [(sequence + (token,), log_prob + log_probs[token])
                           for token in range(model.vocab_size)]
        candidates = sorted(candidates, key=lambda item: -item[1])[:2 * beam_size]
        ends = [sequence[-1] == EOS_ID or len(sequence) == max_length
                for sequence, _ in candidates]
        finished = sorted(finished + [(sequence, log_prob / ((5 + len(sequence)) / 6) ** alpha)
                                      for (sequence, log_prob), end in zip(candidates, ends)
                                      if end], key=lambda item: -item[1])[:beam_size]
        alive = [candidate for candidate, end in zip(candidates, ends) if not end][:beam_size]
        ended += sum(ends[:beam_size])
        best_alive = alive[0][1] / ((5 + max_length) / 6) ** alpha if alive else -math.inf
        if (finished and finished[0][1] > best_alive) or (
                stop_after_finished and ended >= stop_after_finished):
            return list(finished[0][0]), finished[0][1], step + 1
    return list(finished[0][0]), finished[0][1], step + 1


def test_stopping_after_n_finished_hypotheses_is_ctranslate2_s_rule():
    """stop_after_finished=N returns what the rule written out in Python returns after as many
    steps, and with a larger N the search runs at least as many steps. Over these seeds the
    rule both stops earlier than t2t's exact bound and returns another sequence than it, so
    the comparison tells the rules apart."""
    beam_size, alpha, extra_length = 2, 0.6, 7
    fewer_steps = other_output = False
    for seed in range(6):
        model = TinyVocabularyModel(seed, positions=2 + extra_length)
        results = {}
        for n in (1, 2, 3, 0):
            counting = RowCountingModel(model)
            ids, scores = search.beam_search(counting, [[EOS_ID]], beam_size, alpha,
                                             extra_length, use_cache=False,
                                             stop_after_finished=n)
            want, want_score, steps = beam_search_by_the_rule(model, beam_size, alpha,
                                                              1 + extra_length, n)
            assert ids.numpy()[0, :len(want)].tolist() == want, (seed, n)
            assert not ids.numpy()[0, len(want):].any()
            assert float(scores[0]) == pytest.approx(want_score, rel=1e-5)
            assert len(counting.rows_per_step) == steps, (seed, n)
            results[n] = (want, steps)
        assert results[1][1] <= results[2][1] <= results[3][1] <= results[0][1]
        fewer_steps |= results[1][1] < results[0][1]
        other_output |= results[1][0] != results[0][0]
    assert fewer_steps and other_output


class TablePerInputModel:
    """TinyVocabularyModel's tables, one per input: input i (its first token i + 2) decodes
    with the table of seeds[i]."""
    vocab_size = 5

    def __init__(self, seeds, positions):
        self.models = [TinyVocabularyModel(seed, positions) for seed in seeds]
        self.tables = tf.stack([model.table for model in self.models])

    def encode(self, inputs, training=False):
        table = tf.cast(inputs[:, :1, tf.newaxis], tf.float32) - 2.0
        return tf.broadcast_to(table, tf.concat([tf.shape(inputs), [1]], 0)), tf.equal(inputs, 0)

    def decode(self, decoder_input, encoder_output, inputs_padding, training=False):
        tables = tf.cast(encoder_output[:, 0, 0], tf.int32)  # [N]
        positions = tf.broadcast_to(tf.range(tf.shape(decoder_input)[1]), tf.shape(decoder_input))
        tables = tf.broadcast_to(tables[:, tf.newaxis], tf.shape(decoder_input))
        return tf.gather_nd(self.tables, tf.stack([tables, positions, decoder_input], axis=-1))


def test_sentences_done_early_keep_their_results_while_others_go_on():
    """Sentences that stop after one finished hypothesis while their batchmates go on: with
    fixed shapes (every row runs to the end of the batch), compiled by XLA or not, their
    results stay those of the step they were done, as when they leave the batch, and as the
    rule written out in Python gives for each alone. Some of them would have found a better sequence
    later, before the batch ends (the exact bound's search cut at the batch's last step
    returns another sequence), so a result that went on changing would fail."""
    beam_size, alpha, extra_length = 2, 0.6, 7
    seeds = list(range(6))
    model = TablePerInputModel(seeds, positions=2 + extra_length)
    inputs = np.array([[seed + 2, EOS_ID] for seed in seeds], np.int32)
    outputs = {}
    for fixed_shapes, jit_compile in ((False, False), (True, False), (True, True)):
        function = tf.function(lambda: search.beam_search(
            model, inputs, beam_size, alpha, extra_length, use_cache=False,
            fixed_shapes=fixed_shapes, stop_after_finished=1), jit_compile=jit_compile)
        ids, scores = function()
        outputs[fixed_shapes, jit_compile] = ids.numpy()
    np.testing.assert_array_equal(outputs[True, False], outputs[False, False])
    np.testing.assert_array_equal(outputs[True, True], outputs[False, False])
    rules = [(beam_search_by_the_rule(single, beam_size, alpha, 2 + extra_length, 1),
              beam_search_by_the_rule(single, beam_size, alpha, 2 + extra_length, 0))
             for single in model.models]
    for row, ((want, _, _), _) in enumerate(rules):
        assert outputs[False, False][row, :len(want)].tolist() == want
    batch_steps = max(steps for (_, _, steps), _ in rules)
    went_on = [beam_search_by_the_rule(single, beam_size, alpha, 2 + extra_length, 0,
                                       max_steps=batch_steps)[0] for single in model.models]
    assert any(later != want for ((want, _, _), _), later in zip(rules, went_on))


class ShapeRecordingModel(RowCountingModel):
    """The model, recording what each cached decoding step meets (the search run eagerly, as
    tf.while_loop then runs its body in Python): (position, the self-attention caches' room,
    the source length)."""

    def __init__(self, model):
        super().__init__(model)
        self.steps = []

    def decode_step(self, ids, position, cache, inputs_padding):
        self.steps.append((int(position), int(cache.self_attention[0].key.shape[2]),
                           int(inputs_padding.shape[1])))
        return self.model.decode_step(ids, position, cache, inputs_padding)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_search_meets_few_shapes_and_gives_the_same_output(model, inputs, beam_size):
    """Without XLA the self-attention caches grow search.CACHE_CHUNK positions at a time and
    the source is padded to a multiple of search.SOURCE_MULTIPLE tokens (so that TensorFlow's
    oneDNN makes kernels for few shapes): each step's room is the multiple of CACHE_CHUNK above
    its position, every step reads the 7-token inputs padded to SOURCE_MULTIPLE, and the
    outputs, [3, 7 + extra_length], are those of the uncached search of the inputs as they
    are."""
    extra_length, chunk = 20, search.CACHE_CHUNK
    recording = ShapeRecordingModel(model)
    ids, scores = search.search(recording, inputs, search.SearchHParams(
        beam_size=beam_size, extra_length=extra_length))
    positions = [position for position, _, _ in recording.steps]
    assert max(positions) >= chunk  # the room grew
    assert [room for _, room, _ in recording.steps] == [
        (position // chunk + 1) * chunk for position in positions]
    assert {length for _, _, length in recording.steps} == {search.SOURCE_MULTIPLE}
    if beam_size == 1:
        want_ids, want_scores = search.greedy_search(model, inputs, extra_length,
                                                     use_cache=False)
    else:
        want_ids, want_scores = search.beam_search(model, inputs, beam_size,
                                                   extra_length=extra_length, use_cache=False)
    assert ids.shape == (3, 7 + extra_length)
    np.testing.assert_array_equal(ids.numpy(), want_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), want_scores.numpy(), rtol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_batch_shrinks_through_multiples_of_row_multiple_sentences(model, beam_size):
    """Six inputs of 2 to 7 tokens reach their limits one step after the other: the rows go
    from 6 sentences' to 4 sentences' (search.ROW_MULTIPLE; never 5, the done sentence staying
    with its results), then to 3, 2 and 1 as each is done, and every output is that of the
    fixed-shape search, where every row stays, and of the uncached one."""
    assert search.ROW_MULTIPLE == 4
    inputs = np.zeros((6, 7), np.int32)
    for row in range(6):
        inputs[row, :row + 1] = np.arange(2, row + 3) % VOCAB_SIZE
        inputs[row, row + 1] = EOS_ID
    ids, scores, rows_per_step = search_counting_rows(model, inputs, beam_size)
    rows = rows_per_step if beam_size == 1 else rows_per_step[1:]  # after the first beam step
    sentences = [count // beam_size for count in rows]
    assert 5 not in sentences and {6, 4, 1} <= set(sentences)
    assert sentences == sorted(sentences, reverse=True)
    for want_ids, want_scores in (
            run_search(model, inputs, beam_size, **COMPILATIONS["fixed cache, XLA"]),
            run_search(model, inputs, beam_size, use_cache=False)):
        np.testing.assert_array_equal(ids.numpy(), want_ids)
        np.testing.assert_allclose(scores.numpy(), want_scores, rtol=1e-5)
