"""Incremental decoding and beam search (paper §6.1; t2t's fast decoding and beam_search.py),
against t2t's searches written out in Python over the whole prefix."""
import functools
import itertools
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding import search
from t2t_lite.layers.attention import FixedLengthCache, MemoryCache
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


def test_one_step_with_the_cache_equals_the_whole_prefix(model, inputs):
    """decode_step position by position gives decode's logits over the whole prefix (causal
    masking hides the later positions), its cache holding every position's keys and values."""
    encoder_output, inputs_padding = model.encode(inputs)
    targets = np.random.default_rng(1).integers(2, VOCAB_SIZE, size=(3, 9)).astype(np.int32)
    decoder_input = np.concatenate([np.zeros((3, 1), np.int32), targets[:, :-1]], axis=1)
    whole = model.decode(decoder_input, encoder_output, inputs_padding).numpy()
    cache = model.initial_cache(encoder_output, inputs_padding, 9)
    assert all(isinstance(layer, FixedLengthCache) for layer in cache.self_attention)
    assert all(isinstance(memory, MemoryCache) for memory in cache.memory)
    for position in range(9):
        logits, cache = model.decode_step(decoder_input[:, position], position, cache)
        np.testing.assert_allclose(logits.numpy(), whole[:, position], rtol=1e-4, atol=1e-4)
        assert cache.self_attention[0].key.shape[2] == 9
    assert not np.any(np.all(cache.self_attention[0].key.numpy() == 0, axis=-1))


@functools.lru_cache(maxsize=None)
def traced_decode(model):
    """model.decode traced once for every length (the reference searches call it often)."""
    return tf.function(model.decode, input_signature=[
        tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None, None], tf.float32),
        tf.TensorSpec([None, None], tf.bool)])


def whole_prefix_log_probs(model, source):
    """The `next_log_probs` of `model` for one input, its ids `source`, encoded alone: the
    log-softmax of `decode` over the whole prefix, the start symbol (PAD) first."""
    encoder_output, inputs_padding = model.encode(np.array([source], np.int32))

    @functools.lru_cache(maxsize=None)
    def next_log_probs(sequence):
        logits = traced_decode(model)(tf.constant([(0,) + sequence], tf.int32),
                                      encoder_output, inputs_padding)[0, -1]
        return without_pad(tf.nn.log_softmax(logits).numpy().astype(float))
    return next_log_probs


def without_pad(log_probs):
    """Log probabilities of the next piece as the search sees them: PAD's -inf (it is never an
    output piece), the others' unchanged."""
    log_probs = np.array(log_probs, float)
    log_probs[PAD_ID] = -math.inf
    return log_probs


def greedy_search_by_the_rule(next_log_probs, max_length):
    """Greedy search written out in Python: (the sequence of the most probable token at each
    step until EOS or `max_length` tokens, its log probability)."""
    sequence, log_prob = (), 0.0
    while not sequence or (sequence[-1] != EOS_ID and len(sequence) < max_length):
        log_probs = next_log_probs(sequence)
        sequence += (int(np.argmax(log_probs)),)
        log_prob += log_probs[sequence[-1]]
    return list(sequence), log_prob


def beam_search_by_the_rule(next_log_probs, beam_size, alpha, max_length, stop_after_finished=0,
                            max_steps=None):
    """Beam search written out in Python for one input (`next_log_probs(sequence)`: the log
    probabilities of the token after `sequence`, a tuple of ids): each step's 2K best
    candidates (by log probability) of the alive beams, those that end (EOS, or the length
    limit) scored log probability / length penalty into the K best finished, the K best others
    alive; done when no alive sequence can beat the best finished (t2t's bound), or once
    `stop_after_finished` (> 0) candidates have ended among each step's K best; or after
    `max_steps` steps. Returns (best finished sequence, its score, steps run)."""
    alive = [((), 0.0)]
    finished, ended = [], 0
    for step in range(min(max_length, max_steps or max_length)):
        candidates = []
        for sequence, log_prob in alive:
            log_probs = next_log_probs(sequence)
            candidates += [(sequence + (token,), log_prob + log_probs[token])
                           for token in range(len(log_probs))]
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


def assert_outputs_of_the_rule(model, inputs, beam_size, extra_length, ids, scores):
    """ids [B, S + extra_length] and scores [B] are, row by row, those of the search written
    out in Python over the whole prefix, each input searched alone, without its padding at the
    end (its limit: its tokens but PAD + extra_length)."""
    assert ids.shape == (len(inputs), inputs.shape[1] + extra_length)
    for row, source in enumerate(inputs):
        limit = int(np.count_nonzero(source)) + extra_length
        source = np.trim_zeros(source, "b").tolist()
        next_log_probs = whole_prefix_log_probs(model, source)
        if beam_size == 1:
            want, want_score = greedy_search_by_the_rule(next_log_probs, limit)
        else:
            want, want_score, _ = beam_search_by_the_rule(next_log_probs, beam_size, 0.6, limit)
        assert ids[row, :len(want)].tolist() == want, row
        assert not ids[row, len(want):].any(), row
        assert scores[row] == pytest.approx(want_score, rel=1e-5, abs=1e-5), row


# How each search runs: the growing cache without XLA, the fixed-size one with it.
COMPILATIONS = {"growing cache": dict(fixed_shapes=False, jit_compile=False),
                "fixed cache, XLA": dict(fixed_shapes=True, jit_compile=True)}


def run_search(model, inputs, beam_size, fixed_shapes=False, jit_compile=False,
               stop_after_finished=0):
    """(ids, scores) of the search with extra_length 6, traced by tf.function."""
    def run():
        if beam_size == 1:
            return search.greedy_search(model, inputs, extra_length=6, fixed_shapes=fixed_shapes)
        return search.beam_search(model, inputs, beam_size, extra_length=6,
                                  fixed_shapes=fixed_shapes,
                                  stop_after_finished=stop_after_finished)
    ids, scores = tf.function(run, jit_compile=jit_compile)()
    return ids.numpy(), scores.numpy()


@pytest.mark.parametrize("fixed_shapes", [False, True])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_an_empty_batch_gives_no_outputs(model, beam_size, fixed_shapes):
    """No sentences (a server's empty request): ids [0, S + extra_length] and no scores,
    where the beams' shared rows would divide by zero rows."""
    ids, scores = run_search(model, np.zeros([0, 7], np.int32), beam_size,
                             fixed_shapes=fixed_shapes)
    assert ids.shape == (0, 7 + 6) and scores.shape == (0,)


@pytest.mark.parametrize("compilation", list(COMPILATIONS))
@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_search_gives_the_outputs_of_the_rule_over_the_whole_prefix(model, inputs,
                                                                        beam_size, compilation):
    """The incremental search of the batch, with the growing caches or the fixed-size ones
    under XLA, returns what the search written out in Python returns for each input alone,
    unpadded, rerunning the decoder over the whole prefix at each step."""
    ids, scores = run_search(model, inputs, beam_size, **COMPILATIONS[compilation])
    assert_outputs_of_the_rule(model, inputs, beam_size, 6, ids, scores)


def test_beam_of_one_without_penalty_is_greedy(model, inputs):
    greedy_ids, greedy_scores = search.greedy_search(model, inputs, extra_length=6)
    beam_ids, beam_scores = search.beam_search(model, inputs, beam_size=1, alpha=0.0,
                                               extra_length=6)
    np.testing.assert_array_equal(beam_ids.numpy(), greedy_ids.numpy())
    np.testing.assert_allclose(beam_scores.numpy(), greedy_scores.numpy(), rtol=1e-5)


def test_length_penalty_is_t2t_s():
    assert float(search.length_penalty(7, 0.6)) == pytest.approx(((5 + 7) / 6) ** 0.6)
    assert float(search.length_penalty(7, 0.0)) == 1.0


class StandInModel:
    """A model as the search calls it (keras-hub's beam test's stand-in): its state is each
    sentence's encoder output (a row per sentence, shared by its beams), and its logits at a
    position depend on the position, the token there and that output only (`logits`)."""

    def decoding_steps(self, fixed_shapes):
        return self

    def initial_state(self, inputs, room):
        return {"memory": self.encode(inputs)[0]}

    def time_axes(self, state):
        return {"memory": None}

    def __call__(self, ids, position, state):
        rows, sentences = tf.shape(ids)[0], tf.shape(state["memory"])[0]
        sentence_of_row = tf.range(rows) * sentences // tf.maximum(rows, 1)
        return self.logits(position, ids, tf.gather(state["memory"], sentence_of_row)), state


class TinyVocabularyModel(StandInModel):
    """A stand-in model over 5 tokens whose next-token distribution depends on the prefix
    through fixed random tables, so that every output sequence's probability can be listed."""
    vocab_size = 5

    def __init__(self, seed, positions=6):
        self.table = tf.constant(np.random.default_rng(seed).normal(size=(positions, 5, 5)) * 2,
                                 tf.float32)

    def encode(self, inputs, training=False):
        return tf.zeros(tf.concat([tf.shape(inputs), [1]], 0)), tf.equal(inputs, 0)

    def logits(self, position, previous, memory):
        """[N, 5] of the tokens `previous` [N] at `position`, whatever the input."""
        return tf.gather(self.table[position], previous)

    def next_log_probs(self, sequence):
        """Log probabilities [5] of the token after `sequence` (a tuple)."""
        logits = self.table[len(sequence), sequence[-1] if sequence else 0].numpy().astype(float)
        return without_pad(logits - math.log(np.exp(logits).sum()))

    def log_prob(self, sequence):
        return sum(self.next_log_probs(tuple(sequence[:length]))[token]
                   for length, token in enumerate(sequence))


def every_finished_sequence(max_length: int) -> list:
    """Every sequence TinyVocabularyModel's search can return within max_length: ended by EOS,
    or cut at the limit, of its other tokens (not PAD)."""
    others = [2, 3, 4]
    finished = [list(prefix) + [EOS_ID] for length in range(1, max_length + 1)
                for prefix in itertools.product(others, repeat=length - 1)]
    return finished + [list(cut) for cut in itertools.product(others, repeat=max_length)]


@pytest.mark.parametrize("seed", range(4))
def test_a_wide_beam_finds_the_best_scored_sequence(seed):
    """With a beam wider than the number of prefixes, beam search is exhaustive: it must return
    the finished sequence (ended by EOS, or cut at the length limit) of the highest log
    probability / length penalty."""
    model = TinyVocabularyModel(seed)
    alpha, max_length = 0.6, 3  # input length 1 + extra_length 2
    finished = every_finished_sequence(max_length)
    best, best_score = None, -math.inf
    for sequence in finished:
        score = model.log_prob(sequence) / ((5 + len(sequence)) / 6) ** alpha
        if score > best_score:
            best, best_score = sequence, score
    ids, scores = search.beam_search(model, [[EOS_ID]], beam_size=64, alpha=alpha,
                                     extra_length=2)
    assert ids.numpy()[0, :len(best)].tolist() == best
    assert float(scores[0]) == pytest.approx(best_score, rel=1e-5)


class RowCountingModel:
    """The model, recording how many rows each decoding step runs on (one step call a step
    when the search runs eagerly, as tf.while_loop then runs its body in Python)."""
    model_steps = None

    def __init__(self, model):
        self.model, self.rows_per_step = model, []

    def decoding_steps(self, fixed_shapes):
        self.model_steps = self.model.decoding_steps(fixed_shapes)
        return self

    def __getattr__(self, name):  # the model's steps' vocab_size, initial_state, time_axes
        return getattr(self.model_steps, name)

    def __call__(self, ids, position, state):
        self.record(ids, position, state)
        return self.model_steps(ids, position, state)

    def record(self, ids, position, state):
        self.rows_per_step.append(int(ids.shape[0]))


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
                                             extra_length, stop_after_finished=n)
            want, want_score, steps = beam_search_by_the_rule(
                model.next_log_probs, beam_size, alpha, 1 + extra_length, n)
            assert ids.numpy()[0, :len(want)].tolist() == want, (seed, n)
            assert not ids.numpy()[0, len(want):].any()
            assert float(scores[0]) == pytest.approx(want_score, rel=1e-5)
            assert len(counting.rows_per_step) == steps, (seed, n)
            results[n] = (want, steps)
        assert results[1][1] <= results[2][1] <= results[3][1] <= results[0][1]
        fewer_steps |= results[1][1] < results[0][1]
        other_output |= results[1][0] != results[0][0]
    assert fewer_steps and other_output


class TablePerInputModel(StandInModel):
    """TinyVocabularyModel's tables, one per input: input i (its first token i + 2) decodes
    with the table of seeds[i]."""
    vocab_size = 5

    def __init__(self, seeds, positions):
        self.models = [TinyVocabularyModel(seed, positions) for seed in seeds]
        self.tables = tf.stack([model.table for model in self.models])

    def encode(self, inputs, training=False):
        table = tf.cast(inputs[:, :1, tf.newaxis], tf.float32) - 2.0
        return tf.broadcast_to(table, tf.concat([tf.shape(inputs), [1]], 0)), tf.equal(inputs, 0)

    def logits(self, position, previous, memory):
        tables = tf.cast(memory[:, 0, 0], tf.int32)  # [N]
        return tf.gather_nd(self.tables, tf.stack(
            [tables, tf.broadcast_to(position, tf.shape(previous)), previous], axis=-1))


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
            model, inputs, beam_size, alpha, extra_length, fixed_shapes=fixed_shapes,
            stop_after_finished=1), jit_compile=jit_compile)
        ids, scores = function()
        outputs[fixed_shapes, jit_compile] = ids.numpy()
    np.testing.assert_array_equal(outputs[True, False], outputs[False, False])
    np.testing.assert_array_equal(outputs[True, True], outputs[False, False])
    rules = [(beam_search_by_the_rule(single.next_log_probs, beam_size, alpha,
                                      2 + extra_length, 1),
              beam_search_by_the_rule(single.next_log_probs, beam_size, alpha,
                                      2 + extra_length, 0))
             for single in model.models]
    for row, ((want, _, _), _) in enumerate(rules):
        assert outputs[False, False][row, :len(want)].tolist() == want
    batch_steps = max(steps for (_, _, steps), _ in rules)
    went_on = [beam_search_by_the_rule(single.next_log_probs, beam_size, alpha,
                                       2 + extra_length, 0, max_steps=batch_steps)[0]
               for single in model.models]
    assert any(later != want for ((want, _, _), _), later in zip(rules, went_on))


class ShapeRecordingModel(RowCountingModel):
    """The model, recording what each decoding step meets (the search run eagerly, as
    tf.while_loop then runs its body in Python): (position, the self-attention caches' room,
    the source length)."""

    def __init__(self, model):
        super().__init__(model)
        self.steps = []

    def record(self, ids, position, state):
        self.steps.append((int(position), int(state.self_attention[0].key.shape[2]),
                           int(state.encoder_decoder_bias.shape[-1])))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_search_meets_few_shapes_and_gives_the_same_output(model, inputs, beam_size):
    """Without XLA the self-attention caches grow search.CACHE_CHUNK positions at a time and
    the source is padded to a multiple of search.SOURCE_MULTIPLE tokens (so that TensorFlow's
    oneDNN makes kernels for few shapes): each step's room is the multiple of CACHE_CHUNK above
    its position, every step reads the 7-token inputs padded to SOURCE_MULTIPLE, and the
    outputs, [3, 7 + extra_length], are those of the search written out in Python over the
    whole prefix of each input alone, unpadded."""
    extra_length, chunk = 20, search.CACHE_CHUNK
    recording = ShapeRecordingModel(model)
    ids, scores = search.search(recording, inputs, search.SearchHParams(
        beam_size=beam_size, extra_length=extra_length))
    positions = [position for position, _, _ in recording.steps]
    assert max(positions) >= chunk  # the room grew
    assert [room for _, room, _ in recording.steps] == [
        (position // chunk + 1) * chunk for position in positions]
    assert {length for _, _, length in recording.steps} == {search.SOURCE_MULTIPLE}
    assert_outputs_of_the_rule(model, inputs, beam_size, extra_length, ids.numpy(),
                               scores.numpy())


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_batch_shrinks_through_multiples_of_row_multiple_sentences(model, beam_size):
    """Six inputs of 2 to 7 tokens reach their limits one step after the other: the rows go
    from 6 sentences' to 4 sentences' (search.ROW_MULTIPLE; never 5, the done sentence staying
    with its results), then to 3, 2 and 1 as each is done, and every output is that of the
    fixed-shape search, where every row stays, and of the search written out in Python."""
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
    want_ids, want_scores = run_search(model, inputs, beam_size,
                                       **COMPILATIONS["fixed cache, XLA"])
    np.testing.assert_array_equal(ids.numpy(), want_ids)
    np.testing.assert_allclose(scores.numpy(), want_scores, rtol=1e-5)
    assert_outputs_of_the_rule(model, inputs, beam_size, 6, ids.numpy(), scores.numpy())
