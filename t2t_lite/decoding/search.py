"""Search for the most probable output sequence, one step per new token (paper §6.1).

The encoder runs once per batch, and each step runs the decoder on the newest token only (t2t's
fast decoding): the encoder-decoder attention keys and values are computed once, and each
decoder self-attention keeps the keys and values of the earlier positions in a cache
(models.transformer.DecodingCache, the model's `initial_cache` and `decode_step`).
The searches run inside `tf.function`; the decoder, BLEU during training and the exported
model call these same functions.

Two ways to run, with the same outputs (tests/decoding/test_search.py):
- Without XLA (the default: faster on a CPU, no compile per shape, and what any TensorFlow
  Serving runs): the self-attention caches grow with the output, CACHE_CHUNK positions at a
  time (`_with_room`; each step writes its position into the room, the positions after it
  masked, as with fixed shapes), and the sentences whose search is done leave the batch, so
  later steps run on fewer rows (as CTranslate2 does, which drops each at once): the rows of
  a multiple of ROW_MULTIPLE sentences stay, done ones among them keeping their results, or
  of the sentences not done when fewer than ROW_MULTIPLE.
- `fixed_shapes`, for XLA, which compiles fixed shapes only: the caches have room for the
  longest output from the start and each step writes its position with a mask, reading and
  writing the whole buffer; every row stays until the whole batch is done.
`_Batch` is where the two differ.

Few shapes: TensorFlow's oneDNN kernels (on by default on x86-64) are made for each shape an
operation meets and kept for the life of the process. Caches grown by one position a step made
every step's attention a shape of its own, each batch's source length its own
encoder-decoder attention, and each number of sentences left in a batch its own products:
over Multi30k's 1,000 test sentences thousands of kernels, some 300 MB (docs/decoding.md).
Growing the caches by CACHE_CHUNK positions, padding the source to a multiple of
SOURCE_MULTIPLE tokens (`search`) and keeping rows for a multiple of ROW_MULTIPLE sentences
(`_Batch.kept`) repeat a few shapes instead, for the same outputs.

Each search loop carries one flat state (`_BeamState`, `_GreedyState`), named as t2t's beam
search names its own: the step, the alive sequences and their log probabilities, the finished
ones with their scores and flags, and the cache (t2t's cache: DecodingCache); and, for a batch
that shrinks, each row's sentence, whether its search is done and how many of its candidates
ended. Rows are those of the sentences still searched (in the self-attention caches, of their
decoded sequences, a sentence's beams consecutive); the finished sequences have a row per
input, where a sentence's results stay when it leaves the batch. Greedy search's state is the
same in small: each row's last token, and every input's tokens and their log probability.

Under hparams.mixed_precision=bfloat16 (or float16) the model computes in that dtype, and the
caches hold its keys and values in it (they come out of its matmuls so: float32 copies would
only double what each step reads); the logits, log probabilities, scores and length penalty
are float32 (`_float32`).

The maximum output length of each sentence is its input length (EOS included) + `extra_length`
(50 in the paper; t2t used the padded length of the batch). Outputs are ids [batch, padded
input length + extra_length], EOS included, padded with 0 after it (`search` pads the inputs
further, to SOURCE_MULTIPLE, and cuts the outputs back to that width).
"""
import dataclasses
from typing import Any, NamedTuple

import tensorflow as tf

from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding.block_top_k import block_top_k
from t2t_lite.layers.attention import NEG_INF, FixedLengthCache
from t2t_lite.models.transformer import DecodingCache

# Without XLA: the positions the self-attention caches grow by at a time, the multiple of
# tokens the inputs are padded to, and of sentences a shrinking batch keeps rows for: the fewer
# shapes the operations meet, the fewer oneDNN kernels TensorFlow makes and keeps (the module
# docstring).
CACHE_CHUNK = 8
SOURCE_MULTIPLE = 16
ROW_MULTIPLE = 4


@dataclasses.dataclass(frozen=True)
class SearchHParams:
    """What the search does, the search's part of t2t's --decode_hparams (the decoder's batching
    and XLA are decoder.TranslatorHParams). beam_size 4 and alpha 0.6 are the paper's (§6.1);
    beam_size=1 is greedy search. extra_length: tokens allowed past the input length (the
    paper's 50).

    stop_after_finished: when beam search is done with a sentence. 0 (the default): when no
    alive hypothesis can beat its best finished one, t2t's bound, so the output is the one a
    search to the length limit returns. N > 0: also as soon as N hypotheses have ended among
    its K best candidates of the steps so far, the rule of CTranslate2 (N = K x patience, its
    default patience 1; it has no exact rule) and fairseq (N = K): fewer steps, and a
    sentence can miss a better hypothesis that would have ended later. (Which sequences
    compete for the output stays t2t's: every candidate of the 2K that ended, where
    CTranslate2 keeps those among the K best only.)"""
    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50
    stop_after_finished: int = 0
    # The hypotheses returned per input, best first (at most beam_size; with sampling, samples).
    num_hypotheses: int = 1
    # CTranslate2's sampling: 1 picks the most probable piece (no sampling); K > 1 samples
    # among the K most probable, 0 from the whole distribution, of logits / temperature.
    sampling_topk: int = 1
    sampling_temperature: float = 1.0


def length_penalty(length, alpha):
    """t2t's (and GNMT's) length penalty ((5 + length) / 6)^alpha; beam scores are log
    probabilities divided by it (alpha 0.6 in the paper, §6.1)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _float32(logits):
    """The search's log-softmax, scores and length penalty in float32 whatever the model
    computes in (the Transformer's logits already are float32: a no-op then), as Keras' mixed
    precision guide keeps a model's final softmax in float32: half-precision scores summed
    over 50 steps would decide between beams by their rounding."""
    return tf.cast(logits, tf.float32)


def _start(model, inputs, extra_length, batch):
    """The search of padded `inputs` [B, S] before its first step: (the model's DecodingCache,
    one row per sentence, with the self-attention caches' room of `batch`; each input's output
    length limit [B], its length + extra_length; the largest limit, S + extra_length, the
    sequences' length without the start symbol). Per-input limits make an output independent
    of the other inputs in its batch and of how far the batch is padded."""
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    encoder_output, inputs_padding = model.encode(inputs, training=False)
    limits = tf.reduce_sum(tf.cast(tf.logical_not(inputs_padding), tf.int32), axis=1)
    max_length = tf.shape(inputs)[1] + extra_length
    cache = model.initial_cache(encoder_output, inputs_padding, batch.cache_length(max_length))
    return cache, limits + extra_length, max_length


def _with_room(caches, position):
    """The self-attention caches (FixedLengthCache) of the step at `position`, as _StepRoom:
    as they are, or, once they are full, CACHE_CHUNK positions longer (zeros, masked until
    written)."""
    def longer(tensor):  # [rows, heads, room, depth / heads]
        return tf.pad(tensor, [[0, 0], [0, 0], [0, CACHE_CHUNK], [0, 0]])
    caches = tf.cond(position < tf.shape(caches[0].key)[2], lambda: caches,
                     lambda: tf.nest.map_structure(longer, caches))
    later = tf.range(tf.shape(caches[0].key)[2]) > position
    bias = tf.where(later, NEG_INF, 0.0)[tf.newaxis, tf.newaxis, tf.newaxis, :]
    return [_StepRoom(cache, bias) for cache in caches]


class _StepRoom(FixedLengthCache):
    """A FixedLengthCache at one step, with the bias hiding the positions after it, made once
    for every layer. `add` writes the step's position by slicing around it, copies without
    FixedLengthCache's masked select, which broadcasts over the whole room."""

    def __new__(cls, cache, bias):
        room = super().__new__(cls, *cache)
        room.bias = bias
        return room

    def add(self, key, value, position):
        """FixedLengthCache.add: the cache with `key` and `value` [rows, heads, 1, depth /
        heads] at `position`, and the bias [1, 1, 1, room]."""
        def written(cache, new):
            return tf.concat([cache[:, :, :position], new, cache[:, :, position + 1:]], axis=2)
        return FixedLengthCache(written(self.key, key), written(self.value, value)), self.bias


class _Batch:
    """Which rows a search step runs on: the one difference between a search for XLA
    (`fixed_shapes`) and one without (the module docstring says why).

    fixed_shapes: every sentence keeps its rows until the whole batch is done, a sentence done
    keeping the results it had then; the self-attention caches have room for every position.
    Otherwise done sentences leave the batch as soon as the rows of fewer sentences hold those
    not done (`kept`; the done ones that stay keep their results, as with fixed shapes); the
    caches' room grows by CACHE_CHUNK positions when it is full (`_with_room`).
    """

    def __init__(self, fixed_shapes):
        self.fixed_shapes = fixed_shapes

    def cache_length(self, max_length):
        """The self-attention caches' room at the start: max_length positions with fixed
        shapes, else CACHE_CHUNK."""
        return max_length if self.fixed_shapes else CACHE_CHUNK

    def decode_step(self, model, ids, position, cache):
        """The model's float32 logits [rows, V] for the token after `ids` [rows] at `position`,
        and the cache with `position` added (without fixed shapes, given room for it first)."""
        if not self.fixed_shapes:
            cache = cache._replace(self_attention=_with_room(cache.self_attention, position))
        logits, cache = model.decode_step(ids, position, cache)
        return _float32(logits), cache

    def kept(self, done):
        """Indices int32 [n] of the rows that go on, of done bool [b]: every row with fixed
        shapes; else, in their order, those of the sentences not done and the first done ones
        up to a multiple of ROW_MULTIPLE sentences (none when fewer than ROW_MULTIPLE go on),
        no more than b, so that a batch shrinks through few sizes."""
        if self.fixed_shapes:
            return tf.range(tf.size(done))
        going_on = tf.reduce_sum(tf.cast(tf.logical_not(done), tf.int32))
        size = tf.where(going_on < ROW_MULTIPLE, going_on,
                        -(-going_on // ROW_MULTIPLE) * ROW_MULTIPLE)
        # In their order (all of them, unchanged, while none leaves): the first done ones stay.
        done_before = tf.cumsum(tf.cast(done, tf.int32))
        stays = tf.logical_not(done) | (done_before <= size - going_on)
        return tf.cast(tf.reshape(tf.where(stays), [-1]), tf.int32)

    def follow(self, caches, rows):
        """The self-attention caches (a row per decoded sequence) of the next step: its row i
        continues row rows[i] (beam search reorders its beams, and leaves out those of
        sentences done)."""
        def gather(tensor):
            followed = tf.gather(tensor, rows)
            return tf.ensure_shape(followed, tensor.shape) if self.fixed_shapes else followed
        return tf.nest.map_structure(gather, caches)

    def leave(self, kept, done, rows):
        """`rows` (tensors with a row per sentence searched, done bool [b]) for the next step:
        without fixed shapes, when a sentence leaves (a row is not `kept`), the rows kept."""
        if self.fixed_shapes:
            return rows
        return tf.cond(tf.size(kept) < tf.size(done), lambda: _gather(rows, kept),
                       lambda: rows)

    def of_rows(self, results, sentence):
        """The rows `sentence` [b] of `results` (a row per input): with fixed shapes, where
        every sentence keeps its row, `results` as they are."""
        return results if self.fixed_shapes else _gather(results, sentence)

    def written(self, results, sentence, rows):
        """`results` (a row per input) with `rows` written at the rows `sentence` [b]: with
        fixed shapes, `rows` themselves."""
        if self.fixed_shapes:
            return rows
        return tf.nest.map_structure(
            lambda result, row: tf.tensor_scatter_nd_update(result, sentence[:, tf.newaxis],
                                                            row), results, rows)

    def loop(self, keep_going, step, state):
        """tf.while_loop of `step` over `state` (a NamedTuple) while `keep_going`. With fixed
        shapes every shape stays; otherwise the number of rows may change (their leading
        dimension), and the self-attention caches' room too."""
        if self.fixed_shapes:
            shapes = tf.nest.map_structure(lambda tensor: tensor.shape, state)
        else:
            shapes = _shapes_of_a_shrinking_batch(state)
        return tf.while_loop(keep_going, lambda state: (step(state),), (state,),
                             shape_invariants=(shapes,))[0]


def _searching_until(max_length):
    """The loop condition of both searches: a row not done yet, and room for another token."""
    def keep_going(state):
        return tf.logical_and(state.step < max_length,
                              tf.logical_not(tf.reduce_all(state.done)))
    return keep_going


def _gather(structure, indices):
    """Rows `indices` of every tensor of `structure`."""
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, indices), structure)


def _shapes_of_a_shrinking_batch(structure):
    """The shapes of `structure` (tensors in lists and NamedTuples) with any number of rows
    (their leading dimension, but of scalars) and, in a self-attention cache, any length."""
    if isinstance(structure, FixedLengthCache):
        return type(structure)(*(tf.TensorShape([None, tensor.shape[1], None, tensor.shape[3]])
                                 for tensor in structure))
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return type(structure)(*map(_shapes_of_a_shrinking_batch, structure))
    if isinstance(structure, (list, tuple)):
        return type(structure)(map(_shapes_of_a_shrinking_batch, structure))
    if structure.shape.rank == 0:
        return structure.shape
    return tf.TensorShape([None]).concatenate(structure.shape[1:])


class _GreedyState(NamedTuple):
    """Greedy search's loop state: the rows of the sentences still searched (n), one decoded
    sequence each, and the outputs of every input (B), written at each step."""
    step: Any  # int32 scalar: the position each row's input is at; its output lands at + 1
    sentence: Any  # int32 [n]: each row's input
    done: Any  # bool [n]: it has produced EOS or reached its limit
    next_ids: Any  # int32 [n]: each row's token at `step` (first the start symbol, PAD)
    decoded_ids: Any  # int32 [B, max_length + 1]: the start symbol, then the tokens chosen
    log_probs: Any  # float32 [B]: their log probability
    cache: DecodingCache  # a row per row


def greedy_search(model, inputs, extra_length: int = 50, fixed_shapes: bool = False):
    """Greedy decoding of padded `inputs` [B, S]: ids [B, S + extra_length] and their log
    probabilities [B]. A sentence is done when it has produced EOS or reached its limit; done
    sentences leave the batch (`_Batch.kept`; those that stay, and with fixed_shapes all, are
    padded with PAD until they leave or all are done)."""
    batch = _Batch(fixed_shapes)
    cache, limits, max_length = _start(model, inputs, extra_length, batch)
    batch_size = tf.shape(limits)[0]

    def step(state):
        t, sentence = state.step, state.sentence
        logits, cache = batch.decode_step(model, state.next_ids, t, state.cache)
        log_probs = tf.nn.log_softmax(logits)
        next_ids = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        best = tf.gather(log_probs, next_ids, batch_dims=1)
        next_ids = tf.where(state.done, PAD_ID, next_ids)
        rows = sentence[:, tf.newaxis]
        decoded_ids = tf.tensor_scatter_nd_update(
            state.decoded_ids, tf.concat([rows, tf.fill(tf.shape(rows), t + 1)], axis=1),
            next_ids)
        total = tf.tensor_scatter_nd_add(state.log_probs, rows,
                                         tf.where(state.done, 0.0, best))
        done = state.done | (tf.equal(next_ids, EOS_ID)
                             | (t + 1 >= tf.gather(limits, sentence)))
        sentence, done, next_ids, cache = batch.leave(batch.kept(done), done,
                                                      (sentence, done, next_ids, cache))
        return _GreedyState(t + 1, sentence, done, next_ids, decoded_ids, total, cache)

    # decoded_ids[:, 0] is the start position (PAD, as t2t's shift_right); token t lands at t + 1.
    state = _GreedyState(
        step=tf.constant(0), sentence=tf.range(batch_size),
        done=tf.zeros([batch_size], tf.bool), next_ids=tf.fill([batch_size], PAD_ID),
        decoded_ids=tf.zeros([batch_size, max_length + 1], tf.int32),
        log_probs=tf.zeros([batch_size], tf.float32), cache=cache)
    state = batch.loop(_searching_until(max_length), step, state)
    return state.decoded_ids[:, 1:], state.log_probs


def _merge_beams(tensor, batch_size, beam_size):
    """[B * K, ...] -> [B, K, ...]."""
    return tf.reshape(tensor, tf.concat([[batch_size, beam_size], tf.shape(tensor)[1:]], 0))


def _tile_beams(tensor, beam_size):
    """[B, ...] -> [B * K, ...], each row repeated K times in a row."""
    return tf.repeat(tensor, beam_size, axis=0)


def _gather_beams(tensor, indices):
    """tensor [B, K', ...], indices [B, K] -> [B, K, ...]."""
    return tf.gather(tensor, indices, batch_dims=1)


class _BeamState(NamedTuple):
    """Beam search's loop state, t2t's beam search's (alive and finished sequences, with their
    log probabilities, scores and flags, and the cache), for the rows of the sentences still
    searched (b) and, finished, of every input (B)."""
    step: Any  # int32 scalar: the position each step reads; its tokens land at + 1
    sentence: Any  # int32 [b]: each row's input
    done: Any  # bool [b]: _Stopping's rule says so
    ended: Any  # int32 [b]: candidates ended among its K best so far (stop_after_finished)
    # The K most probable sequences of each sentence that have not ended, best first:
    alive_seq: Any  # int32 [b, K, max_length + 1], the start symbol first
    alive_log_probs: Any  # float32 [b, K]
    # The K best ended sequences of each input, best first:
    finished_seq: Any  # int32 [B, K, max_length + 1]
    finished_scores: Any  # float32 [B, K]: log probability / length_penalty; NEG_INF if none
    finished_flags: Any  # bool [B, K]: the slot holds an ended sequence
    cache: DecodingCache  # self-attention: a row per alive beam (b * K); the rest: per sentence


@dataclasses.dataclass(frozen=True)
class _Stopping:
    """When beam search is done with a sentence (SearchHParams.stop_after_finished): when its
    best alive sequence can no longer beat its best finished one, t2t's exact bound; or, with
    stop_after_finished N > 0, also once N candidates have ended among its K best of the steps
    so far (CTranslate2's rule)."""
    alpha: float
    beam_size: int
    stop_after_finished: int

    def after_step(self, done, ended, alive_log_probs, finished_scores, finished_flags, ends,
                   limits):
        """(done [b], ended [b]) updated by a step that left the rows' alive log probabilities
        and finished scores and flags [b, K], and whose candidates `ends` [b, 2K] (best first)
        ended; `limits` [b] are the sentences' length limits."""
        done |= self.bound_met(alive_log_probs, finished_scores, finished_flags, limits)
        if self.stop_after_finished:  # else `ended` stays 0: no count in the default's steps
            ended += tf.reduce_sum(tf.cast(ends[:, :self.beam_size], tf.int32), axis=1)
            done |= ended >= self.stop_after_finished
        return done, ended

    def bound_met(self, alive_log_probs, finished_scores, finished_flags, limits):
        """[b]: the best score an alive beam can still reach, its log probability (which only
        falls) over the largest penalty (at its input's limit), cannot beat the best finished
        sequence, the one returned. (t2t waited until it could not beat the worst of the K
        finished ones, which it could return too; the returned best is the same.)"""
        best_alive = alive_log_probs[:, 0] / length_penalty(limits, self.alpha)
        best_finished = tf.where(finished_flags[:, 0], finished_scores[:, 0], NEG_INF)
        return best_finished > best_alive


def beam_search(model, inputs, beam_size: int = 4, alpha: float = 0.6, extra_length: int = 50,
                fixed_shapes: bool = False, stop_after_finished: int = 0):
    """The paper's beam search (§6.1, beam 4, length penalty alpha 0.6), as t2t's
    beam_search.py: keeps the `beam_size` most probable unfinished sequences ("alive") and the
    `beam_size` best finished ones, scored by log probability / length_penalty. A candidate
    that reaches its input's length limit counts as finished (t2t compared such sequences only
    when none had ended). A sentence is done as soon as no alive sequence can still beat its
    best finished one (t2t stopped when none could beat the worst kept, for the whole batch),
    or, with `stop_after_finished` N > 0, once N candidates have ended among its K best of
    the steps so far (CTranslate2's rule, SearchHParams); done sentences leave the batch, so
    the steps after run on fewer rows (as CTranslate2 does), unless fixed_shapes (they then
    stay, their results kept as they were when done).

    Returns ids [B, S + extra_length] (the best finished sequence of each input, or the best
    alive one if none finished) and their scores [B].
    """
    batch = _Batch(fixed_shapes)
    stopping = _Stopping(alpha, beam_size, stop_after_finished)
    cache, limits, max_length = _start(model, inputs, extra_length, batch)
    batch_size = tf.shape(limits)[0]
    per_beam = min(2 * beam_size, model.vocab_size)  # each beam's best tokens considered
    length = max_length + 1  # with the start position
    positions = tf.range(length)[tf.newaxis, tf.newaxis, :]

    def candidates(state):
        """Each alive beam's best per_beam tokens: their log probabilities and ids [b * K,
        per_beam], and the cache with the step's position added."""
        logits, cache = batch.decode_step(
            model, tf.reshape(state.alive_seq[:, :, state.step], [-1]), state.step,
            state.cache)
        log_probs, tokens = block_top_k(tf.nn.log_softmax(logits), per_beam)
        return log_probs, tokens, cache

    def first_candidates(state):
        """`candidates` at position 0, where the K beams of a sentence all hold the start
        symbol alone: the decoder runs on one row per sentence (the caches have one), and its
        candidates and self-attention caches are repeated for the K beams. Only the first beam
        is alive (initial log probabilities 0, NEG_INF, ...), so that the step does not pick K
        copies."""
        logits, cache = batch.decode_step(model, state.alive_seq[:, 0, state.step],
                                          state.step, state.cache)
        log_probs, tokens = block_top_k(tf.nn.log_softmax(logits), per_beam)
        log_probs, tokens, self_attention = tf.nest.map_structure(
            lambda tensor: _tile_beams(tensor, beam_size),
            (log_probs, tokens, cache.self_attention))
        return log_probs, tokens, cache._replace(self_attention=self_attention)

    def step(state, candidates=candidates):
        """The state after one token more: the 2K best continuations of the alive beams
        (`candidates`), the K best of them alive and those that ended among the finished."""
        t, sentence = state.step, state.sentence
        b = tf.shape(sentence)[0]
        row_limits = tf.gather(limits, sentence)
        beam_log_probs, beam_tokens, cache = candidates(state)
        # 2K candidates: even if K of them end with EOS, K stay alive. They are the top 2K of
        # the K beams' best 2K tokens each (the top 2K of all K * V, in the same order).
        candidate_log_probs = (_merge_beams(beam_log_probs, b, beam_size)
                               + state.alive_log_probs[:, :, tf.newaxis])  # [b, K, 2K]
        top_log_probs, top_indices = tf.math.top_k(
            tf.reshape(candidate_log_probs, [b, beam_size * per_beam]), k=2 * beam_size)
        beam_indices = top_indices // per_beam
        token_ids = tf.gather(tf.reshape(beam_tokens, [b, beam_size * per_beam]),
                              top_indices, batch_dims=1)
        top_seq = _gather_beams(state.alive_seq, beam_indices)
        top_seq = tf.where(positions == t + 1, token_ids[:, :, tf.newaxis], top_seq)
        # A candidate ends with EOS, or by reaching its input's length limit.
        ends = tf.equal(token_ids, EOS_ID) | (t + 1 >= row_limits)[:, tf.newaxis]

        # Alive: the best K candidates that did not end.
        alive_candidates = top_log_probs + tf.cast(ends, tf.float32) * NEG_INF
        _, alive_choice = tf.math.top_k(alive_candidates, k=beam_size)
        alive_seq = _gather_beams(top_seq, alive_choice)
        alive_log_probs = _gather_beams(alive_candidates, alive_choice)
        parents = _gather_beams(beam_indices, alive_choice)  # [b, K]: the beam each continues

        # Finished: the best K of the old finished ones and the candidates that ended now
        # (those of a sentence done before this step stay).
        old_seq, old_scores, old_flags = batch.of_rows(
            (state.finished_seq, state.finished_scores, state.finished_flags), sentence)
        scores = top_log_probs / length_penalty(t + 1, alpha)
        scores += (1.0 - tf.cast(ends, tf.float32)) * NEG_INF
        finished_scores, finished_choice = tf.math.top_k(tf.concat([old_scores, scores], 1),
                                                         k=beam_size)
        finished_seq = _gather_beams(tf.concat([old_seq, top_seq], axis=1), finished_choice)
        finished_flags = _gather_beams(tf.concat([old_flags, ends], axis=1), finished_choice)
        done_before = state.done[:, tf.newaxis]
        finished_seq = tf.where(done_before[:, :, tf.newaxis], old_seq, finished_seq)
        finished_scores = tf.where(done_before, old_scores, finished_scores)
        finished_flags = tf.where(done_before, old_flags, finished_flags)

        done, ended = stopping.after_step(state.done, state.ended, alive_log_probs,
                                          finished_scores, finished_flags, ends, row_limits)
        kept = batch.kept(done)
        self_attention = batch.follow(
            cache.self_attention,
            tf.reshape(kept[:, tf.newaxis] * beam_size + tf.gather(parents, kept), [-1]))
        finished = batch.written(
            (state.finished_seq, state.finished_scores, state.finished_flags), sentence,
            (finished_seq, finished_scores, finished_flags))
        sentence, done, ended, alive_seq, alive_log_probs, memory, bias = batch.leave(
            kept, done, (sentence, done, ended, alive_seq, alive_log_probs, cache.memory,
                         cache.encoder_decoder_bias))
        return _BeamState(t + 1, sentence, done, ended, alive_seq, alive_log_probs, *finished,
                          DecodingCache(self_attention, memory, bias))

    state = _BeamState(
        step=tf.constant(0), sentence=tf.range(batch_size),
        done=tf.zeros([batch_size], tf.bool), ended=tf.zeros([batch_size], tf.int32),
        alive_seq=tf.zeros([batch_size, beam_size, length], tf.int32),  # first_candidates
        alive_log_probs=tf.tile(tf.constant([[0.0] + [NEG_INF] * (beam_size - 1)]),
                                [batch_size, 1]),
        finished_seq=tf.zeros([batch_size, beam_size, length], tf.int32),
        finished_scores=tf.fill([batch_size, beam_size], NEG_INF),
        finished_flags=tf.zeros([batch_size, beam_size], tf.bool), cache=cache)
    state = step(state, first_candidates)
    state = batch.loop(_searching_until(max_length), step, state)
    # Sentences searched to the last step without a finished sequence: their best alive one.
    rows = state.sentence[:, tf.newaxis]
    best_alive_seq = tf.scatter_nd(rows, state.alive_seq[:, 0], [batch_size, length])
    best_alive_score = tf.scatter_nd(
        rows, state.alive_log_probs[:, 0] / length_penalty(tf.gather(limits, state.sentence),
                                                           alpha),
        [batch_size])
    any_finished = tf.reduce_any(state.finished_flags, axis=1)
    best_seq = tf.where(any_finished[:, tf.newaxis], state.finished_seq[:, 0], best_alive_seq)
    best_score = tf.where(any_finished, state.finished_scores[:, 0], best_alive_score)
    return best_seq[:, 1:], best_score


def search(model, inputs, search_hparams: SearchHParams, fixed_shapes: bool = False):
    """The search search_hparams asks for: beam search, or greedy search for beam_size 1.
    fixed_shapes for a search compiled with XLA (the caller's jit_compile). The inputs
    [B, S] are searched padded to a multiple of SOURCE_MULTIPLE tokens, so that batches of
    nearby lengths share shapes (`padded_to_multiple`); the outputs are [B, S + extra_length]
    all the same (each sentence's limit is its own length + extra_length)."""
    hp = search_hparams
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    width = tf.shape(inputs)[1] + hp.extra_length
    if hp.beam_size > 1:
        ids, scores = beam_search(model, padded_to_multiple(inputs), hp.beam_size, hp.alpha,
                                  hp.extra_length, fixed_shapes=fixed_shapes,
                                  stop_after_finished=hp.stop_after_finished)
    else:
        ids, scores = greedy_search(model, padded_to_multiple(inputs), hp.extra_length,
                                    fixed_shapes=fixed_shapes)
    return ids[:, :width], scores


def padded_to_multiple(ids, multiple: int = SOURCE_MULTIPLE):
    """int32 ids [B, S] padded with PAD to a length that is a multiple of `multiple`."""
    length = tf.shape(ids)[1]
    return tf.pad(ids, [[0, 0], [0, -length % multiple]], constant_values=PAD_ID)
