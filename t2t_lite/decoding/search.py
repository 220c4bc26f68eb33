"""Search for the most probable output sequence, one step per new token (paper §6.1).

The encoder runs once per batch. With `use_cache` (the default), each step runs the decoder on
the newest token only: the encoder-decoder attention keys and values are computed once, and
each decoder self-attention keeps the keys and values of the earlier positions in a cache
(t2t's fast decoding: models.transformer.DecodingCache). Without it, each step runs the decoder
over the tokens chosen so far (with fixed shapes, for XLA, over the whole buffer) and reads the
current position (causal masking makes the two equal).
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

Each search loop carries one state, a NamedTuple: the step's position, the rows of the
sentences still searched (one row per sentence: `_GreedyRows`, `_BeamRows`), beam search's
self-attention caches (one row per beam, a sentence's beams consecutive), and the results of
every input (written when a sentence leaves the batch, and at the end).

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
from t2t_lite.layers.attention import NEG_INF, FixedLengthCache, GrowingCache
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
    paper's 50). use_cache: incremental decoding (off only to measure it).

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
    use_cache: bool = True
    stop_after_finished: int = 0


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


class _Source(NamedTuple):
    """The batch of inputs, encoded once."""
    ids: Any  # int32 [B, S], padded
    encoder_output: Any  # [B, S, d]
    inputs_padding: Any  # bool [B, S], True at PAD
    limits: Any  # int32 [B]: each input's output length limit, its length + extra_length
    max_length: Any  # the largest limit (the buffers' size): S + extra_length


def _encode(model, inputs, extra_length):
    """The _Source of `inputs`. Per-input limits make an output independent of the other
    inputs in its batch and of how far the batch is padded."""
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    encoder_output, inputs_padding = model.encode(inputs, training=False)
    limits = tf.reduce_sum(tf.cast(tf.logical_not(inputs_padding), tf.int32), axis=1)
    limits += extra_length
    return _Source(inputs, encoder_output, inputs_padding, limits,
                   tf.shape(inputs)[1] + extra_length)


class _SentenceInputs(NamedTuple):
    """What the decoder reads of each sentence searched, one row per sentence: its source
    padding and its memory, which its decoded sequences (beam search's beams) share: every
    decoder layer's encoder-decoder keys and values (layers.attention.MemoryCache), or without
    the cache the encoder output."""
    inputs_padding: Any
    memory: Any


class _Decoder:
    """The model's float32 next-token logits for the sequences searched, incremental
    (`use_cache`) or over the whole prefix.

    Besides the sequences' tokens it reads two kinds of rows, which the search moves each its
    own way: one row per sentence (_SentenceInputs) and one row per decoded sequence (the
    self-attention caches of DecodingCache; none without the cache), a sentence's sequences
    consecutive. Without the cache, the encoder output is repeated per sequence.
    """

    def __init__(self, model, use_cache, fixed_shapes):
        self.model = model
        self.use_cache = use_cache
        self.fixed_shapes = fixed_shapes

    def start(self, source, cache_length):
        """(the sentences' _SentenceInputs, the self-attention caches of one sequence per
        sentence before the first step, with room for `cache_length` positions: all of them
        with fixed shapes, else the first CACHE_CHUNK, `logits` adding room as it goes)."""
        if not self.use_cache:
            return _SentenceInputs(source.inputs_padding, source.encoder_output), []
        cache = self.model.initial_cache(source.encoder_output, cache_length)
        return _SentenceInputs(source.inputs_padding, cache.memory), cache.self_attention

    def logits(self, decoded, position, sentences, caches):
        """decoded [N, max_length + 1] (position 0 is the start symbol PAD) -> float32 logits
        [N, V] for the token after `position`, and the caches with `position` added."""
        if self.use_cache:
            if not self.fixed_shapes:
                caches = _with_room(caches, position)
            logits, cache = self.model.decode_step(
                decoded[:, position], position, DecodingCache(caches, sentences.memory),
                sentences.inputs_padding)
            return _float32(logits), cache.self_attention
        # Without the cache the decoder reruns the prefix, positions 0..position, and no more
        # (the causal mask hides what follows); with fixed shapes, for XLA, the whole room.
        prefix = decoded[:, :-1] if self.fixed_shapes else decoded[:, :position + 1]
        beams = tf.shape(decoded)[0] // tf.maximum(tf.shape(sentences.inputs_padding)[0], 1)
        logits = self.model.decode(prefix, _tile_beams(sentences.memory, beams),
                                   _tile_beams(sentences.inputs_padding, beams), training=False)
        return _float32(logits[:, position, :]), caches


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
    keeping the results it had then; the self-attention caches have room for every position
    (FixedLengthCache). Otherwise done sentences leave the batch, their results written, as
    soon as the rows of fewer sentences hold those not done (`kept`; the done ones that stay
    keep their results, as with fixed shapes); the caches' room grows by CACHE_CHUNK
    positions when it is full (`_with_room`).
    """

    def __init__(self, fixed_shapes):
        self.fixed_shapes = fixed_shapes

    def cache_length(self, max_length):
        """The self-attention caches' room at the start: max_length positions with fixed
        shapes, else CACHE_CHUNK."""
        return max_length if self.fixed_shapes else CACHE_CHUNK

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

    def results_kept(self, done_before, before, after):
        """`after`, the results of a step, but those of the sentences done before it
        (done_before [b]: with fixed shapes, or among the rows `kept`), which stay `before`."""
        def kept(before, after):
            return tf.where(tf.reshape(done_before, [-1] + [1] * (after.shape.rank - 1)),
                            before, after)
        return tf.nest.map_structure(kept, before, after)

    def follow(self, caches, rows):
        """The caches (a row per decoded sequence) of the next step: its row i continues row
        rows[i] (beam search reorders its beams, and leaves out those of sentences done)."""
        def gather(tensor):
            followed = tf.gather(tensor, rows)
            return tf.ensure_shape(followed, tensor.shape) if self.fixed_shapes else followed
        return tf.nest.map_structure(gather, caches)

    def leave(self, state, kept):
        """`state` for the next step: without fixed shapes, when a sentence is done (a row of
        state.rows is not `kept`), the results of every row are written into state.results
        and only the rows kept go on."""
        if self.fixed_shapes:
            return state

        def without_the_done():
            return state._replace(rows=_gather(state.rows, kept),
                                  results=self.written_results(state))
        return tf.cond(tf.size(kept) < tf.size(state.rows.done), without_the_done,
                       lambda: state)

    @staticmethod
    def written_results(state):
        """state.results (a row per input) with those of state.rows written in."""
        indices = state.rows.sentence[:, tf.newaxis]
        return tf.nest.map_structure(
            lambda results, rows: tf.tensor_scatter_nd_update(results, indices, rows),
            state.results, state.rows.results())

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


def _gather(structure, indices):
    """Rows `indices` of every tensor of `structure`."""
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, indices), structure)


def _shapes_of_a_shrinking_batch(structure):
    """The shapes of `structure` (tensors in lists and NamedTuples) with any number of rows
    (their leading dimension, but of scalars) and, in a self-attention cache, any length."""
    if isinstance(structure, (FixedLengthCache, GrowingCache)):
        return type(structure)(*(tf.TensorShape([None, tensor.shape[1], None, tensor.shape[3]])
                                 for tensor in structure))
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return type(structure)(*map(_shapes_of_a_shrinking_batch, structure))
    if isinstance(structure, (list, tuple)):
        return type(structure)(map(_shapes_of_a_shrinking_batch, structure))
    if structure.shape.rank == 0:
        return structure.shape
    return tf.TensorShape([None]).concatenate(structure.shape[1:])


class _GreedyResults(NamedTuple):
    """Greedy search's output of each sentence."""
    decoded: Any  # int32 [n, max_length + 1]: the start symbol, then the tokens chosen
    score: Any  # float32 [n]: their log probability


class _GreedyRows(NamedTuple):
    """Greedy search's rows, one per sentence still searched (one decoded sequence each)."""
    sentence: Any  # int32 [n]: the index of its input
    done: Any  # bool [n]: it has produced EOS or reached its limit
    decoded: Any
    score: Any
    inputs: _SentenceInputs
    caches: Any  # the self-attention caches (_Decoder)

    def results(self):
        return _GreedyResults(self.decoded, self.score)


class _GreedyState(NamedTuple):
    """The greedy search loop's state."""
    position: Any  # int32 scalar: where the step reads its input; its output lands at + 1
    rows: _GreedyRows
    results: _GreedyResults  # of every input


def greedy_search(model, inputs, extra_length: int = 50, use_cache: bool = True,
                  fixed_shapes: bool = False):
    """Greedy decoding of padded `inputs` [B, S]: ids [B, S + extra_length] and their log
    probabilities [B]. A sentence is done when it has produced EOS or reached its limit; done
    sentences leave the batch (`_Batch.kept`; those that stay, and with fixed_shapes all, are
    padded with PAD until they leave or all are done)."""
    source = _encode(model, inputs, extra_length)
    batch, decoder = _Batch(fixed_shapes), _Decoder(model, use_cache, fixed_shapes)
    batch_size = tf.shape(source.ids)[0]
    sentences, caches = decoder.start(source, batch.cache_length(source.max_length))
    # decoded[:, 0] is the start position (PAD, as t2t's shift_right); token t lands at t + 1.
    results = _GreedyResults(tf.zeros([batch_size, source.max_length + 1], tf.int32),
                             tf.zeros([batch_size], tf.float32))
    positions = tf.range(source.max_length + 1)[tf.newaxis, :]

    def step(state):
        t, rows = state.position, state.rows
        logits, caches = decoder.logits(rows.decoded, t, rows.inputs, rows.caches)
        log_probs = tf.nn.log_softmax(logits)
        next_ids = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        best = tf.gather(log_probs, next_ids, batch_dims=1)
        score = rows.score + tf.where(rows.done, 0.0, best)
        next_ids = tf.where(rows.done, PAD_ID, next_ids)
        decoded = tf.where(positions == t + 1, next_ids[:, tf.newaxis], rows.decoded)
        done = rows.done | (tf.equal(next_ids, EOS_ID)
                            | (t + 1 >= tf.gather(source.limits, rows.sentence)))
        rows = rows._replace(done=done, decoded=decoded, score=score, caches=caches)
        return batch.leave(_GreedyState(t + 1, rows, state.results), batch.kept(done))

    def keep_going(state):
        return tf.logical_and(state.position < source.max_length,
                              tf.logical_not(tf.reduce_all(state.rows.done)))

    rows = _GreedyRows(sentence=tf.range(batch_size), done=tf.zeros([batch_size], tf.bool),
                       decoded=results.decoded, score=results.score, inputs=sentences,
                       caches=caches)
    state = batch.loop(keep_going, step, _GreedyState(tf.constant(0), rows, results))
    results = batch.written_results(state)
    return results.decoded[:, 1:], results.score


def _merge_beams(tensor, batch_size, beam_size):
    """[B * K, ...] -> [B, K, ...]."""
    return tf.reshape(tensor, tf.concat([[batch_size, beam_size], tf.shape(tensor)[1:]], 0))


def _flatten_beams(tensor):
    """[B, K, ...] -> [B * K, ...]: a sentence's beams consecutive."""
    return tf.reshape(tensor, tf.concat([[-1], tf.shape(tensor)[2:]], 0))


def _tile_beams(tensor, beam_size):
    """[B, ...] -> [B * K, ...], each row repeated K times in a row."""
    return tf.repeat(tensor, beam_size, axis=0)


def _gather_beams(tensor, indices):
    """tensor [B, K', ...], indices [B, K] -> [B, K, ...]."""
    return tf.gather(tensor, indices, batch_dims=1)


class _Alive(NamedTuple):
    """The K most probable sequences of each sentence that have not ended, best first."""
    sequences: Any  # int32 [b, K, max_length + 1], the start symbol first
    log_probs: Any  # float32 [b, K]


class _Finished(NamedTuple):
    """The K best ended sequences of each sentence, best first."""
    sequences: Any  # int32 [b, K, max_length + 1]
    scores: Any  # float32 [b, K]: log probability / length_penalty; NEG_INF in empty slots
    flags: Any  # bool [b, K]: the slot holds an ended sequence


class _BeamRows(NamedTuple):
    """Beam search's rows, one per sentence still searched."""
    sentence: Any  # int32 [b]: the index of its input
    done: Any  # bool [b]: _Stopping's rule says so
    ended: Any  # int32 [b]: candidates ended among its K best so far (stop_after_finished)
    alive: _Alive
    finished: _Finished
    inputs: _SentenceInputs

    def results(self):
        return self.finished


class _BeamState(NamedTuple):
    """The beam search loop's state."""
    position: Any  # int32 scalar: where the step reads its input; its output lands at + 1
    rows: _BeamRows
    caches: Any  # the self-attention caches (_Decoder): a row per alive beam, b * K
    results: _Finished  # of every input


@dataclasses.dataclass(frozen=True)
class _Stopping:
    """When beam search is done with a sentence (SearchHParams.stop_after_finished): when its
    best alive sequence can no longer beat its best finished one, t2t's exact bound; or, with
    stop_after_finished N > 0, also once N candidates have ended among its K best of the steps
    so far (CTranslate2's rule)."""
    alpha: float
    beam_size: int
    stop_after_finished: int

    def after_step(self, rows, ends, limits):
        """(done [b], ended [b]) of `rows` updated by a step, whose candidates `ends` [b, 2K]
        (best first) ended; `limits` [b] are the sentences' length limits."""
        done = rows.done | self.bound_met(rows.alive, rows.finished, limits)
        ended = rows.ended
        if self.stop_after_finished:  # else `ended` stays 0: no count in the default's steps
            ended += tf.reduce_sum(tf.cast(ends[:, :self.beam_size], tf.int32), axis=1)
            done |= ended >= self.stop_after_finished
        return done, ended

    def bound_met(self, alive, finished, limits):
        """[b]: the best score an alive beam can still reach, its log probability (which only
        falls) over the largest penalty (at its input's limit), cannot beat the best finished
        sequence, the one returned. (t2t waited until it could not beat the worst of the K
        finished ones, which it could return too; the returned best is the same.)"""
        best_alive = alive.log_probs[:, 0] / length_penalty(limits, self.alpha)
        best_finished = tf.where(finished.flags[:, 0], finished.scores[:, 0], NEG_INF)
        return best_finished > best_alive


def beam_search(model, inputs, beam_size: int = 4, alpha: float = 0.6, extra_length: int = 50,
                use_cache: bool = True, fixed_shapes: bool = False,
                stop_after_finished: int = 0):
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
    source = _encode(model, inputs, extra_length)
    batch, decoder = _Batch(fixed_shapes), _Decoder(model, use_cache, fixed_shapes)
    stopping = _Stopping(alpha, beam_size, stop_after_finished)
    batch_size = tf.shape(source.ids)[0]
    per_beam = min(2 * beam_size, model.vocab_size)  # each beam's best tokens considered
    length = source.max_length + 1  # with the start position
    positions = tf.range(length)[tf.newaxis, tf.newaxis, :]

    def candidates(state):
        """Each alive beam's best per_beam tokens: their log probabilities and ids [b * K,
        per_beam], and the caches with the step's position added."""
        logits, caches = decoder.logits(_flatten_beams(state.rows.alive.sequences),
                                        state.position, state.rows.inputs, state.caches)
        log_probs, tokens = block_top_k(tf.nn.log_softmax(logits), per_beam)
        return log_probs, tokens, caches

    def first_candidates(state):
        """`candidates` at position 0, where the K beams of a sentence all hold the start
        symbol alone: the decoder runs on one row per sentence (the caches have one), and its
        candidates and caches are repeated for the K beams. Only the first beam is alive
        (initial log probabilities 0, NEG_INF, ...), so that the step does not pick K copies."""
        logits, caches = decoder.logits(state.rows.alive.sequences[:, 0], state.position,
                                        state.rows.inputs, state.caches)
        log_probs, tokens = block_top_k(tf.nn.log_softmax(logits), per_beam)
        return tf.nest.map_structure(lambda tensor: _tile_beams(tensor, beam_size),
                                     (log_probs, tokens, caches))

    def step(state, candidates=candidates):
        """The state after one token more: the 2K best continuations of the alive beams
        (`candidates`), the K best of them alive and those that ended among the finished."""
        t, rows = state.position, state.rows
        b = tf.shape(rows.sentence)[0]
        limits = tf.gather(source.limits, rows.sentence)
        beam_log_probs, beam_tokens, caches = candidates(state)
        # 2K candidates: even if K of them end with EOS, K stay alive. They are the top 2K of
        # the K beams' best 2K tokens each (the top 2K of all K * V, in the same order).
        candidate_log_probs = (_merge_beams(beam_log_probs, b, beam_size)
                               + rows.alive.log_probs[:, :, tf.newaxis])  # [b, K, 2K]
        top_log_probs, top_indices = tf.math.top_k(
            tf.reshape(candidate_log_probs, [b, beam_size * per_beam]), k=2 * beam_size)
        beam_indices = top_indices // per_beam
        token_ids = tf.gather(tf.reshape(beam_tokens, [b, beam_size * per_beam]),
                              top_indices, batch_dims=1)
        top_seq = _gather_beams(rows.alive.sequences, beam_indices)
        top_seq = tf.where(positions == t + 1, token_ids[:, :, tf.newaxis], top_seq)
        # A candidate ends with EOS, or by reaching its input's length limit.
        ends = tf.equal(token_ids, EOS_ID) | (t + 1 >= limits)[:, tf.newaxis]

        # Alive: the best K candidates that did not end.
        alive_candidates = top_log_probs + tf.cast(ends, tf.float32) * NEG_INF
        _, alive_choice = tf.math.top_k(alive_candidates, k=beam_size)
        alive = _Alive(_gather_beams(top_seq, alive_choice),
                       _gather_beams(alive_candidates, alive_choice))
        parents = _gather_beams(beam_indices, alive_choice)  # [b, K]: the beam each continues

        # Finished: the best K of the old finished ones and the candidates that ended now.
        scores = top_log_probs / length_penalty(t + 1, alpha)
        scores += (1.0 - tf.cast(ends, tf.float32)) * NEG_INF
        all_scores = tf.concat([rows.finished.scores, scores], axis=1)
        finished_scores, finished_choice = tf.math.top_k(all_scores, k=beam_size)
        finished = _Finished(
            _gather_beams(tf.concat([rows.finished.sequences, top_seq], axis=1),
                          finished_choice),
            finished_scores,
            _gather_beams(tf.concat([rows.finished.flags, ends], axis=1), finished_choice))
        finished = batch.results_kept(rows.done, rows.finished, finished)

        rows = rows._replace(alive=alive, finished=finished)
        done, ended = stopping.after_step(rows, ends, limits)
        rows = rows._replace(done=done, ended=ended)
        kept = batch.kept(done)
        caches = batch.follow(
            caches, _flatten_beams(kept[:, tf.newaxis] * beam_size + tf.gather(parents, kept)))
        return batch.leave(_BeamState(t + 1, rows, caches, state.results), kept)

    def keep_going(state):
        return tf.logical_and(state.position < source.max_length,
                              tf.logical_not(tf.reduce_all(state.rows.done)))

    sentences, caches = decoder.start(source, batch.cache_length(source.max_length))
    finished = _Finished(tf.zeros([batch_size, beam_size, length], tf.int32),
                         tf.fill([batch_size, beam_size], NEG_INF),
                         tf.zeros([batch_size, beam_size], tf.bool))
    alive = _Alive(tf.zeros([batch_size, beam_size, length], tf.int32),  # first_candidates
                   tf.tile(tf.constant([[0.0] + [NEG_INF] * (beam_size - 1)]), [batch_size, 1]))
    rows = _BeamRows(sentence=tf.range(batch_size), done=tf.zeros([batch_size], tf.bool),
                     ended=tf.zeros([batch_size], tf.int32), alive=alive, finished=finished,
                     inputs=sentences)
    state = step(_BeamState(tf.constant(0), rows, caches, finished), first_candidates)
    state = batch.loop(keep_going, step, state)
    results, rows = batch.written_results(state), state.rows
    # Sentences searched to the last step without a finished sequence: their best alive one.
    best_alive_seq = tf.scatter_nd(rows.sentence[:, tf.newaxis], rows.alive.sequences[:, 0],
                                   [batch_size, length])
    best_alive_score = tf.scatter_nd(
        rows.sentence[:, tf.newaxis],
        rows.alive.log_probs[:, 0] / length_penalty(tf.gather(source.limits, rows.sentence),
                                                    alpha),
        [batch_size])
    any_finished = tf.reduce_any(results.flags, axis=1)
    best_seq = tf.where(any_finished[:, tf.newaxis], results.sequences[:, 0], best_alive_seq)
    best_score = tf.where(any_finished, results.scores[:, 0], best_alive_score)
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
    with model.decoding_layout():  # the decoder's weights laid out for steps, once per search
        if hp.beam_size > 1:
            ids, scores = beam_search(model, padded_to_multiple(inputs), hp.beam_size,
                                      hp.alpha, hp.extra_length, hp.use_cache,
                                      fixed_shapes=fixed_shapes,
                                      stop_after_finished=hp.stop_after_finished)
        else:
            ids, scores = greedy_search(model, padded_to_multiple(inputs), hp.extra_length,
                                        hp.use_cache, fixed_shapes=fixed_shapes)
    return ids[:, :width], scores


def padded_to_multiple(ids, multiple: int = SOURCE_MULTIPLE):
    """int32 ids [B, S] padded with PAD to a length that is a multiple of `multiple`."""
    length = tf.shape(ids)[1]
    return tf.pad(ids, [[0, 0], [0, -length % multiple]], constant_values=PAD_ID)
