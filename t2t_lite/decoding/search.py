"""Search for the most probable output sequences, one step per new token (paper §6.1), or
samples of them.

The encoder runs once per batch, and each step runs the decoder on the newest token only (t2t's
fast decoding): the encoder-decoder attention keys and values are computed once, and each
decoder self-attention keeps the keys and values of the earlier positions in a cache
(models.transformer.DecodingCache, the model's `initial_cache` and `decode_step`).
The searches run inside `tf.function`; the decoder, BLEU during training and the exported
model call these same functions.

One loop, strategies over it (as t2t's beam_search(symbols_to_logits_fn, ...), OpenNMT-tf's
DecodingStrategy classes under one dynamic_decode, and keras-hub's samplers): `ModelSteps`
gives the loop the model as one step function (ids, position, cache) -> (float32 logits,
cache); `_decode` runs a strategy's `initial_state`, `first_step`, then its `step` in one
tf.while_loop while a row is not done, and its `hypotheses` (Hypotheses: ids, scores, log
probabilities [B, N, ...], best first). The strategies: GreedyStrategy (argmax),
SamplingStrategy (top-k and temperature, stateless random) and BeamStrategy (t2t's beam
search, its N best finished: return_beams). Target prefixes are a rule over any of them
(`_Prefixes`): a row's prefix piece is forced at the steps before its prefix length, going
through the decoder once, one step per piece with the caches. Adding a strategy takes one class
here: a RowStrategy subclass with its `pick` (the token of each row from the step's logits), or
a class with the four methods and `rows_per_input` (BeamStrategy's form), chosen by `_strategy`
from SearchHParams. What a strategy is not asked for (prefixes, the n-best bound, log
probabilities for `search`, sampling) is decided when tracing, from static hparams and
prefixes=None, so the default searches run the steps they ran alone.

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

Each strategy carries one flat state (`_BeamState`, `_RowState`), named as t2t's beam search
names its own: the step, the alive sequences and their log probabilities, the finished ones
with their scores, flags (and log probabilities), and the cache (t2t's cache: DecodingCache);
and, for a batch that shrinks, each row's sentence, whether its search is done and how many of
its candidates ended. Rows are those of the sentences still searched (in the self-attention
caches, of their decoded sequences, a sentence's beams consecutive); the finished sequences
have a row per input, where a sentence's results stay when it leaves the batch. Greedy search's
and sampling's state is the same in small: each row's last token, and every row's tokens and
their log probability (sampling's N samples of an input are N rows, the cache repeated).

Under hparams.mixed_precision=bfloat16 (or float16) the model computes in that dtype, and the
caches hold its keys and values in it (they come out of its matmuls so: float32 copies would
only double what each step reads); the logits, log probabilities, scores and length penalty
are float32 (`_float32`).

The maximum output length of each sentence is its input length (EOS included) + `extra_length`
(50 in the paper; t2t used the padded length of the batch), a target prefix included (a
longer prefix is cut at it). Outputs are ids [batch, padded input length + extra_length], EOS
included, padded with 0 after it (`search` and `search_hypotheses` pad the inputs further, to
SOURCE_MULTIPLE, and cut the outputs back to that width).
"""
import dataclasses
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding.block_top_k import block_top_k
from t2t_lite.hparams_lib import HParamsError
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

    def __post_init__(self):
        """Settings that cannot go together are refused where they are made (the decoder's and
        exporter's --decode_hparams parsing): check_search_hparams."""
        check_search_hparams(self)


def length_penalty(length, alpha):
    """t2t's (and GNMT's) length penalty ((5 + length) / 6)^alpha; beam scores are log
    probabilities divided by it (alpha 0.6 in the paper, §6.1)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def log_probs_without_pad(logits):
    """The log-softmax of float32 `logits` [rows, V] with PAD's NEG_INF: PAD (0, the start
    symbol and padding, t2t's) is never an output piece. Its probability is not spread over
    the others, so each piece's log probability is the model's, as scoring gives it. (PAD's
    logit is never trained: in the tails of an n-best list it would make a hypothesis that
    reads as another, PAD being dropped from the text.)"""
    pad = tf.one_hot(PAD_ID, logits.shape[-1] or tf.shape(logits)[-1], on_value=NEG_INF,
                     off_value=0.0)
    return tf.nn.log_softmax(logits) + pad


def _float32(logits):
    """The search's log-softmax, scores and length penalty in float32 whatever the model
    computes in (the Transformer's logits already are float32: a no-op then), as Keras' mixed
    precision guide keeps a model's final softmax in float32: half-precision scores summed
    over 50 steps would decide between beams by their rounding."""
    return tf.cast(logits, tf.float32)


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
    """The loop condition of every strategy: a row not done yet, and room for another token."""
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


class Hypotheses(NamedTuple):
    """The N hypotheses of each input (`search_hypotheses`), best first; N is
    SearchHParams.num_hypotheses (decoding.results.Hypothesis is one of them, in Python)."""
    ids: Any  # int32 [B, N, W]: W = input width + extra_length; EOS included, 0 after it
    scores: Any  # float32 [B, N]: the search's score (beam: log prob / length_penalty)
    log_probs: Any  # float32 [B, N]: the log probability of `ids` (pieces and EOS), untempered


class SearchSettingError(HParamsError):
    """Search hparams that cannot go together (a user's --decode_hparams)."""


class ModelSteps:
    """The model as the search loop sees it (t2t's `symbols_to_logits_fn`): the encoder run
    once (`start`), then one step function (ids, position, cache) -> (float32 logits, cache)
    (`__call__`), on the rows `batch` (_Batch) keeps, with its self-attention caches' room."""

    def __init__(self, model, batch):
        self.model, self.batch = model, batch
        self.vocab_size = model.vocab_size

    def start(self, inputs, extra_length):
        """The search of padded `inputs` [B, S] before its first step: (the model's
        DecodingCache, one row per sentence, with the self-attention caches' room of the
        batch; each input's output length limit [B], its length + extra_length; the largest
        limit, S + extra_length, the sequences' length without the start symbol). Per-input
        limits make an output independent of the other inputs in its batch and of how far the
        batch is padded."""
        inputs = tf.convert_to_tensor(inputs, tf.int32)
        encoder_output, inputs_padding = self.model.encode(inputs, training=False)
        limits = tf.reduce_sum(tf.cast(tf.logical_not(inputs_padding), tf.int32), axis=1)
        max_length = tf.shape(inputs)[1] + extra_length
        cache = self.model.initial_cache(encoder_output, inputs_padding,
                                         self.batch.cache_length(max_length))
        return cache, limits + extra_length, max_length

    def __call__(self, ids, position, cache):
        """The float32 logits [rows, V] of the token after `ids` [rows] at `position`, and
        the cache with `position` added (_Batch.decode_step)."""
        return self.batch.decode_step(self.model, ids, position, cache)


class _Prefixes:
    """Target prefixes, a rule over any strategy: at the steps before a row's prefix length,
    its prefix piece is the row's token (greedy, sampling) or its beams' only candidate (beam),
    with the model's log probability. The prefix runs through the decoder once, one step per
    piece with the caches, as the tokens a search picks do (OpenNMT-tf's and CTranslate2's
    target_prefix)."""

    def __init__(self, prefixes):
        """prefixes: int32 [rows, P], each row's pieces then PAD."""
        self.prefixes = tf.convert_to_tensor(prefixes, tf.int32)
        # [rows, P + 1]: a PAD column past P, the piece of every later position.
        self.columns = tf.pad(self.prefixes, [[0, 0], [0, 1]])

    def pieces(self, sentence, position):
        """int32 [n]: the piece forced at `position` on the rows of inputs `sentence` [n], PAD
        where none is."""
        column = tf.minimum(position, tf.shape(self.columns)[1] - 1)
        return tf.gather(self.columns[:, column], sentence)

    def forced(self, ids, sentence, position):
        """`ids` [n] with the forced pieces in place of those picked."""
        pieces = self.pieces(sentence, position)
        return tf.where(tf.equal(pieces, PAD_ID), ids, pieces)

    @staticmethod
    def restricted(log_probs, pieces):
        """log_probs [n, V] with NEG_INF but at the piece of the rows where `pieces` [n] has
        one: beam search can then only continue a forced row with its piece."""
        allowed = (tf.equal(tf.range(tf.shape(log_probs)[1])[tf.newaxis, :], pieces[:, tf.newaxis])
                   | tf.equal(pieces, PAD_ID)[:, tf.newaxis])
        return tf.where(allowed, log_probs, NEG_INF)

    def tiled(self, times):
        """The rule for inputs repeated `times` times in a row (samples of one input)."""
        return _Prefixes(_tile_beams(self.prefixes, times))


class _Search(NamedTuple):
    """What a strategy's steps see: the model's step function, the rows each step runs on
    (_Batch), the length limits [R] of the loop's inputs, the largest one (the loop's last
    step) and the prefix rule (or None)."""
    steps: ModelSteps
    batch: Any  # _Batch
    limits: Any
    max_length: Any
    prefixes: Any  # _Prefixes or None


def _decode(strategy, model, inputs, extra_length, fixed_shapes, prefixes=None):
    """The one search loop (OpenNMT-tf's dynamic_decode): `strategy`'s state from the
    encoded `inputs` [B, S], its steps while a row is not done and there is room for a token,
    and its Hypotheses [B, N, S + extra_length]. A strategy that searches several rows per
    input (`rows_per_input`, samples) gets the cache, limits and prefixes repeated so."""
    batch = _Batch(fixed_shapes)
    steps = ModelSteps(model, batch)
    cache, limits, max_length = steps.start(inputs, extra_length)
    rule = None if prefixes is None else _Prefixes(prefixes)
    times = strategy.rows_per_input
    if times > 1:
        cache, limits = tf.nest.map_structure(lambda tensor: _tile_beams(tensor, times),
                                              (cache, limits))
        rule = None if rule is None else rule.tiled(times)
    context = _Search(steps, batch, limits, max_length, rule)
    state = strategy.first_step(context, strategy.initial_state(context, cache))
    state = batch.loop(_searching_until(max_length), lambda state: strategy.step(context, state),
                       state)
    return strategy.hypotheses(context, state)


class _RowState(NamedTuple):
    """The loop state of a strategy with one decoded sequence per row (greedy, sampling): the
    rows of the inputs still searched (n), and the outputs of every input (R), written at each
    step."""
    step: Any  # int32 scalar: the position each row's input is at; its output lands at + 1
    sentence: Any  # int32 [n]: each row's input
    done: Any  # bool [n]: it has produced EOS or reached its limit
    next_ids: Any  # int32 [n]: each row's token at `step` (first the start symbol, PAD)
    decoded_ids: Any  # int32 [R, max_length + 1]: the start symbol, then the tokens chosen
    log_probs: Any  # float32 [R]: their log probability
    cache: DecodingCache  # a row per row


class RowStrategy:
    """A strategy with one sequence per row, its token at each step chosen by `pick` from the
    step's logits (OpenNMT-tf's and keras-hub's samplers). A row is done when it has produced
    EOS or reached its limit; done rows leave the batch (`_Batch.kept`; those that stay, and
    with fixed_shapes all, are padded with PAD until they leave or all are done). Its score is
    its log probability."""
    rows_per_input = 1

    def pick(self, logits, log_probs, position, sentence, run):
        """int32 [n]: each row's next token, of the step's logits and log-softmax [n, V] at
        `position`, for rows of inputs `sentence` [n] of the loop `run` (_Search)."""
        raise NotImplementedError

    def initial_state(self, run, cache):
        """Every row at the start symbol (decoded_ids[:, 0], PAD as t2t's shift_right); token
        t lands at t + 1."""
        rows = tf.shape(run.limits)[0]
        return _RowState(
            step=tf.constant(0), sentence=tf.range(rows), done=tf.zeros([rows], tf.bool),
            next_ids=tf.fill([rows], PAD_ID),
            decoded_ids=tf.zeros([rows, run.max_length + 1], tf.int32),
            log_probs=tf.zeros([rows], tf.float32), cache=cache)

    def first_step(self, run, state):
        """The state before the loop: as it is (every step is the loop's)."""
        return state

    def step(self, run, state):
        """The state after one token more on every row not done."""
        t, sentence = state.step, state.sentence
        logits, cache = run.steps(state.next_ids, t, state.cache)
        log_probs = log_probs_without_pad(logits)
        next_ids = self.pick(logits, log_probs, t, sentence, run)
        if run.prefixes is not None:
            next_ids = run.prefixes.forced(next_ids, sentence, t)
        best = tf.gather(log_probs, next_ids, batch_dims=1)
        next_ids = tf.where(state.done, PAD_ID, next_ids)
        rows = sentence[:, tf.newaxis]
        decoded_ids = tf.tensor_scatter_nd_update(
            state.decoded_ids, tf.concat([rows, tf.fill(tf.shape(rows), t + 1)], axis=1),
            next_ids)
        total = tf.tensor_scatter_nd_add(state.log_probs, rows,
                                         tf.where(state.done, 0.0, best))
        done = state.done | (tf.equal(next_ids, EOS_ID)
                             | (t + 1 >= tf.gather(run.limits, sentence)))
        batch = run.batch
        sentence, done, next_ids, cache = batch.leave(batch.kept(done), done,
                                                      (sentence, done, next_ids, cache))
        return _RowState(t + 1, sentence, done, next_ids, decoded_ids, total, cache)

    def hypotheses(self, run, state):
        """Hypotheses [B, rows_per_input, L] of the rows, best (most probable) first."""
        ids = _rows_per_input(state.decoded_ids[:, 1:], self.rows_per_input)
        log_probs = _rows_per_input(state.log_probs, self.rows_per_input)
        if self.rows_per_input > 1:
            log_probs, order = tf.math.top_k(log_probs, k=self.rows_per_input)
            ids = _gather_beams(ids, order)
        return Hypotheses(ids, log_probs, log_probs)


def _rows_per_input(tensor, times):
    """[B * times, ...] -> [B, times, ...]."""
    return tf.reshape(tensor, tf.concat([[-1, times], tf.shape(tensor)[1:]], 0))


class GreedyStrategy(RowStrategy):
    """Greedy search: the most probable token (t2t's and CTranslate2's beam_size 1)."""

    def pick(self, logits, log_probs, position, sentence, run):
        return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


class SamplingStrategy(RowStrategy):
    """Random sampling (CTranslate2's sampling_topk and sampling_temperature, keras-hub's
    TopKSampler): each token drawn from softmax(logits / temperature) over the `topk` most
    probable tokens (0: every token), `num_samples` independent samples per input.

    The draw is the Gumbel-max trick (argmax of log p / T plus Gumbel noise is a sample of
    softmax(log p / T)), its noise a stateless function of `seed` [2], the step and the row's
    input (tf.random.stateless_uniform over every input's row, each row taking its own): one
    seed gives one output, with fixed shapes or a shrinking batch alike. Compiled by XLA,
    TensorFlow's stateless ops draw other numbers (even with the same algorithm named), so
    the samples are others, one seed one output still. Tokens of ~NEG_INF log probability are
    never drawn."""

    def __init__(self, topk, temperature, num_samples, seed):
        self.topk, self.temperature = topk, temperature
        self.rows_per_input, self.seed = num_samples, seed

    def pick(self, logits, log_probs, position, sentence, run):
        values, tokens = log_probs, None
        if self.topk > 0:
            values, tokens = tf.math.top_k(log_probs, k=min(self.topk, log_probs.shape[-1]))
        # Gumbel noise [rows, width] for every input's row; each row here takes its input's.
        seed = tf.random.experimental.stateless_fold_in(self.seed, position)
        uniform = tf.random.stateless_uniform(
            tf.stack([tf.shape(run.limits)[0], tf.shape(values)[1]]), seed, minval=_TINY,
            maxval=1.0)
        gumbel = -tf.math.log(-tf.math.log(tf.gather(uniform, sentence)))
        scaled = tf.where(values > NEG_INF / 2, values / self.temperature, -float("inf"))
        choice = tf.argmax(scaled + gumbel, axis=-1, output_type=tf.int32)
        return choice if tokens is None else tf.gather(tokens, choice, batch_dims=1)


_TINY = float(np.finfo(np.float32).tiny)  # the smallest uniform drawn: log(log(u)) is finite


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
    # float32 [B, K]: their log probabilities, when asked (BeamStrategy.with_log_probs); else
    # a scalar 0 that no step reads.
    finished_log_probs: Any
    cache: DecodingCache  # self-attention: a row per alive beam (b * K); the rest: per sentence


@dataclasses.dataclass(frozen=True)
class _Stopping:
    """When beam search is done with a sentence (SearchHParams.stop_after_finished): when its
    best alive sequence can no longer beat its N-th best finished one (N = num_hypotheses),
    t2t's exact bound; or, with stop_after_finished > 0, also once that many candidates have
    ended among its K best of the steps so far (CTranslate2's rule)."""
    alpha: float
    beam_size: int
    stop_after_finished: int
    num_hypotheses: int = 1

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
        falls) over the largest penalty (at its input's limit), cannot beat the N-th best
        finished sequence, the last returned. (t2t waited until it could not beat the worst
        of the K finished ones; the N returned are the same.)"""
        best_alive = alive_log_probs[:, 0] / length_penalty(limits, self.alpha)
        last = self.num_hypotheses - 1
        nth_finished = tf.where(finished_flags[:, last], finished_scores[:, last], NEG_INF)
        return nth_finished > best_alive


class BeamStrategy:
    """The paper's beam search (§6.1, beam 4, length penalty alpha 0.6), as t2t's
    beam_search.py: keeps the `beam_size` most probable unfinished sequences ("alive") and the
    `beam_size` best finished ones, scored by log probability / length_penalty, and returns
    the `num_hypotheses` best finished (t2t's return_beams). A candidate that reaches its
    input's length limit counts as finished (t2t compared such sequences only when none had
    ended). A sentence is done as soon as no alive sequence can still beat its
    num_hypotheses-th best finished one (t2t stopped when none could beat the worst kept, for
    the whole batch), or, with `stop_after_finished` N > 0, once N candidates have ended among
    its K best of the steps so far (CTranslate2's rule, SearchHParams); done sentences leave
    the batch, so the steps after run on fewer rows (as CTranslate2 does), unless fixed_shapes
    (they then stay, their results kept as they were when done).

    Candidates of ~NEG_INF log probability (the first step's copies of the start beam, the
    beams of a row whose prefix allows one piece, or a vocabulary smaller than 2K) never count
    as finished: the check runs when `vocab_size` < 2K or with prefixes (`impossible_can_end`),
    the only cases where such a candidate can end. `with_log_probs` keeps the finished
    sequences' log probabilities (`search` does not ask for them)."""
    rows_per_input = 1

    def __init__(self, beam_size, alpha, stop_after_finished=0, num_hypotheses=1,
                 with_log_probs=True):
        self.beam_size, self.alpha = beam_size, alpha
        self.num_hypotheses, self.with_log_probs = num_hypotheses, with_log_probs
        self.stopping = _Stopping(alpha, beam_size, stop_after_finished, num_hypotheses)

    def impossible_can_end(self, run):
        """Whether a candidate of ~NEG_INF log probability can end (decided when tracing)."""
        return run.prefixes is not None or run.steps.vocab_size < 2 * self.beam_size

    def initial_state(self, run, cache):
        """Every input's K beams at the start symbol, the first alive (log probability 0, the
        others NEG_INF, so that the first step does not pick K copies); nothing finished."""
        batch_size, beam_size = tf.shape(run.limits)[0], self.beam_size
        length = run.max_length + 1  # with the start position
        self.positions = tf.range(length)[tf.newaxis, tf.newaxis, :]  # of the sequences' tokens
        finished_log_probs = (tf.fill([batch_size, beam_size], NEG_INF) if self.with_log_probs
                              else tf.constant(0.0))
        return _BeamState(
            step=tf.constant(0), sentence=tf.range(batch_size),
            done=tf.zeros([batch_size], tf.bool), ended=tf.zeros([batch_size], tf.int32),
            alive_seq=tf.zeros([batch_size, beam_size, length], tf.int32),
            alive_log_probs=tf.tile(tf.constant([[0.0] + [NEG_INF] * (beam_size - 1)]),
                                    [batch_size, 1]),
            finished_seq=tf.zeros([batch_size, beam_size, length], tf.int32),
            finished_scores=tf.fill([batch_size, beam_size], NEG_INF),
            finished_flags=tf.zeros([batch_size, beam_size], tf.bool),
            finished_log_probs=finished_log_probs, cache=cache)

    def _per_beam(self, run):
        """Each beam's best tokens considered: 2K, or the vocabulary if smaller."""
        return min(2 * self.beam_size, run.steps.vocab_size)

    def candidates(self, run, state):
        """Each alive beam's best per_beam tokens: their log probabilities and ids [b * K,
        per_beam], and the cache with the step's position added."""
        logits, cache = run.steps(tf.reshape(state.alive_seq[:, :, state.step], [-1]),
                                  state.step, state.cache)
        log_probs = self._forced(run, log_probs_without_pad(logits),
                                 _tile_beams(state.sentence, self.beam_size), state.step)
        log_probs, tokens = block_top_k(log_probs, self._per_beam(run))
        return log_probs, tokens, cache

    def first_candidates(self, run, state):
        """`candidates` at position 0, where the K beams of a sentence all hold the start
        symbol alone: the decoder runs on one row per sentence (the caches have one), and its
        candidates and self-attention caches are repeated for the K beams. Only the first beam
        is alive, so that the step does not pick K copies."""
        logits, cache = run.steps(state.alive_seq[:, 0, state.step], state.step, state.cache)
        log_probs = self._forced(run, log_probs_without_pad(logits), state.sentence,
                                 state.step)
        log_probs, tokens = block_top_k(log_probs, self._per_beam(run))
        log_probs, tokens, self_attention = tf.nest.map_structure(
            lambda tensor: _tile_beams(tensor, self.beam_size),
            (log_probs, tokens, cache.self_attention))
        return log_probs, tokens, cache._replace(self_attention=self_attention)

    @staticmethod
    def _forced(run, log_probs, sentence, position):
        """log_probs [rows, V] of rows of inputs `sentence` [rows], with prefixes only each
        forced row's piece left (_Prefixes.restricted)."""
        if run.prefixes is None:
            return log_probs
        return _Prefixes.restricted(log_probs, run.prefixes.pieces(sentence, position))

    def first_step(self, run, state):
        """The first step, on one row per sentence (`first_candidates`)."""
        return self.step(run, state, self.first_candidates)

    def step(self, run, state, candidates=None):
        """The state after one token more: the 2K best continuations of the alive beams
        (`candidates`), the K best of them alive and those that ended among the finished."""
        beam_size, batch = self.beam_size, run.batch
        t, sentence = state.step, state.sentence
        b = tf.shape(sentence)[0]
        row_limits = tf.gather(run.limits, sentence)
        beam_log_probs, beam_tokens, cache = (candidates or self.candidates)(run, state)
        per_beam = self._per_beam(run)
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
        top_seq = tf.where(self.positions == t + 1, token_ids[:, :, tf.newaxis], top_seq)
        # A candidate ends with EOS, or by reaching its input's length limit.
        ends = tf.equal(token_ids, EOS_ID) | (t + 1 >= row_limits)[:, tf.newaxis]

        # Alive: the best K candidates that did not end.
        alive_candidates = top_log_probs + tf.cast(ends, tf.float32) * NEG_INF
        _, alive_choice = tf.math.top_k(alive_candidates, k=beam_size)
        alive_seq = _gather_beams(top_seq, alive_choice)
        alive_log_probs = _gather_beams(alive_candidates, alive_choice)
        parents = _gather_beams(beam_indices, alive_choice)  # [b, K]: the beam each continues

        if self.impossible_can_end(run):  # an impossible candidate is no hypothesis
            ends &= top_log_probs > NEG_INF / 2
        finished = self._finished(run, state, top_seq, top_log_probs, ends)
        done, ended = self.stopping.after_step(state.done, state.ended, alive_log_probs,
                                               finished[1], finished[2], ends, row_limits)
        kept = batch.kept(done)
        self_attention = batch.follow(
            cache.self_attention,
            tf.reshape(kept[:, tf.newaxis] * beam_size + tf.gather(parents, kept), [-1]))
        names = ("finished_seq", "finished_scores", "finished_flags", "finished_log_probs")
        if not self.with_log_probs:
            names, finished = names[:3], finished[:3]
        finished = batch.written(tuple(getattr(state, name) for name in names), sentence,
                                 finished)
        if not self.with_log_probs:
            finished += (state.finished_log_probs,)
        sentence, done, ended, alive_seq, alive_log_probs, memory, bias = batch.leave(
            kept, done, (sentence, done, ended, alive_seq, alive_log_probs, cache.memory,
                         cache.encoder_decoder_bias))
        return _BeamState(t + 1, sentence, done, ended, alive_seq, alive_log_probs, *finished,
                          DecodingCache(self_attention, memory, bias))

    def _finished(self, run, state, top_seq, top_log_probs, ends):
        """The finished sequences, scores, flags (and log probabilities, when kept) [b, K] of
        the rows after a step: the best K of the old finished ones and the candidates that
        ended now (those of a sentence done before this step stay)."""
        t, sentence = state.step, state.sentence
        old = (state.finished_seq, state.finished_scores, state.finished_flags)
        if self.with_log_probs:
            old += (state.finished_log_probs,)
        old = run.batch.of_rows(old, sentence)
        scores = top_log_probs / length_penalty(t + 1, self.alpha)
        scores += (1.0 - tf.cast(ends, tf.float32)) * NEG_INF
        finished_scores, finished_choice = tf.math.top_k(tf.concat([old[1], scores], 1),
                                                         k=self.beam_size)
        finished_seq = _gather_beams(tf.concat([old[0], top_seq], axis=1), finished_choice)
        finished_flags = _gather_beams(tf.concat([old[2], ends], axis=1), finished_choice)
        done_before = state.done[:, tf.newaxis]
        new = (tf.where(done_before[:, :, tf.newaxis], old[0], finished_seq),
               tf.where(done_before, old[1], finished_scores),
               tf.where(done_before, old[2], finished_flags))
        if self.with_log_probs:
            log_probs = _gather_beams(tf.concat([old[3], top_log_probs], axis=1),
                                      finished_choice)
            new += (tf.where(done_before, old[3], log_probs),)
        return new

    def hypotheses(self, run, state):
        """Hypotheses [B, N, max_length] of each input: its N best finished sequences; where
        fewer than N finished (sentences searched to the last step, which only a vocabulary
        smaller than the beam can leave so), its best alive ones after them (log probability
        over the penalty at its limit); where fewer than N sequences are possible at all (a
        prefix cut at the limit), ids 0 and NEG_INF in the slots after them."""
        batch_size, length = tf.shape(run.limits)[0], run.max_length + 1
        rows = state.sentence[:, tf.newaxis]
        alive_seq = tf.scatter_nd(rows, state.alive_seq, [batch_size, self.beam_size, length])
        alive_log_probs = tf.tensor_scatter_nd_update(
            tf.fill([batch_size, self.beam_size], NEG_INF), rows, state.alive_log_probs)
        alive_scores = alive_log_probs / length_penalty(run.limits, self.alpha)[:, tf.newaxis]
        # Slot j: the j-th finished sequence, or after the f finished ones, alive j - f.
        finished_count = tf.reduce_sum(tf.cast(state.finished_flags, tf.int32), axis=1)
        slots = tf.range(self.num_hypotheses)[tf.newaxis, :]
        which = tf.where(slots < finished_count[:, tf.newaxis], slots,
                         self.beam_size + slots - finished_count[:, tf.newaxis])
        ids = _gather_beams(tf.concat([state.finished_seq, alive_seq], axis=1), which)
        scores = _gather_beams(tf.concat([state.finished_scores, alive_scores], axis=1), which)
        # A slot of no possible sequence (~NEG_INF: fewer than N exist, as after a prefix cut
        # at the limit): ids 0, score and log probability NEG_INF.
        possible = _gather_beams(tf.concat([state.finished_flags, alive_log_probs > NEG_INF / 2],
                                           axis=1), which)
        ids = tf.where(possible[:, :, tf.newaxis], ids, 0)
        scores = tf.where(possible, scores, NEG_INF)
        log_probs = None
        if self.with_log_probs:
            log_probs = tf.where(possible, _gather_beams(
                tf.concat([state.finished_log_probs, alive_log_probs], axis=1), which), NEG_INF)
        return Hypotheses(ids[:, :, 1:], scores, log_probs)


def greedy_search(model, inputs, extra_length: int = 50, fixed_shapes: bool = False):
    """Greedy decoding of padded `inputs` [B, S] (GreedyStrategy): ids [B, S + extra_length]
    and their log probabilities [B]."""
    found = _decode(GreedyStrategy(), model, inputs, extra_length, fixed_shapes)
    return found.ids[:, 0], found.scores[:, 0]


def beam_search(model, inputs, beam_size: int = 4, alpha: float = 0.6, extra_length: int = 50,
                fixed_shapes: bool = False, stop_after_finished: int = 0):
    """Beam search of padded `inputs` [B, S] (BeamStrategy). Returns ids [B, S + extra_length]
    (the best finished sequence of each input, or the best alive one if none finished) and
    their scores [B]."""
    strategy = BeamStrategy(beam_size, alpha, stop_after_finished, with_log_probs=False)
    found = _decode(strategy, model, inputs, extra_length, fixed_shapes)
    return found.ids[:, 0], found.scores[:, 0]


def _sampling(hp):
    """Whether search hparams `hp` ask for sampling (sampling_topk 1 is the argmax: greedy)."""
    return hp.sampling_topk != 1


def check_search_hparams(hp: SearchHParams):
    """SearchSettingError naming the hparams that cannot go together: num_hypotheses above
    beam_size (beam search returns among its K finished) or below 1, sampling with a beam,
    a negative sampling_topk, a temperature not above 0, or stop_after_finished below
    num_hypotheses (a sentence could stop with fewer finished)."""
    def refuse(message):
        raise SearchSettingError(f"--decode_hparams: {message}")
    if hp.num_hypotheses < 1:
        refuse(f"num_hypotheses={hp.num_hypotheses}: must be at least 1")
    if hp.sampling_topk < 0:
        refuse(f"sampling_topk={hp.sampling_topk}: must be 0 (every piece) or more")
    if not hp.sampling_temperature > 0:
        refuse(f"sampling_temperature={hp.sampling_temperature}: must be above 0")
    if _sampling(hp) and hp.beam_size != 1:
        refuse(f"sampling_topk={hp.sampling_topk} samples with beam_size=1 only, not "
               f"beam_size={hp.beam_size}")
    if not _sampling(hp) and hp.num_hypotheses > hp.beam_size:
        refuse(f"num_hypotheses={hp.num_hypotheses} is more than beam_size={hp.beam_size}")
    if 0 < hp.stop_after_finished < hp.num_hypotheses and hp.beam_size > 1:
        refuse(f"stop_after_finished={hp.stop_after_finished} is below "
               f"num_hypotheses={hp.num_hypotheses}")


def _strategy(hp: SearchHParams, seed, with_log_probs):
    """The strategy search hparams `hp` ask for: sampling, greedy (beam_size 1) or beam."""
    if _sampling(hp):
        if seed is None:
            raise ValueError("sampling (sampling_topk != 1) needs a seed: int32 [2]")
        return SamplingStrategy(hp.sampling_topk, hp.sampling_temperature, hp.num_hypotheses,
                                tf.convert_to_tensor(seed, tf.int32))
    if hp.beam_size == 1:
        return GreedyStrategy()
    return BeamStrategy(hp.beam_size, hp.alpha, hp.stop_after_finished, hp.num_hypotheses,
                        with_log_probs)


def search_hypotheses(model, inputs, search_hparams: SearchHParams, fixed_shapes: bool = False,
                      prefixes=None, seed=None) -> Hypotheses:
    """The search_hparams.num_hypotheses (N) best hypotheses of each input, best first
    (Hypotheses: ids int32 [B, N, S + extra_length], scores and log_probs float32 [B, N]):
    beam search's N best finished (t2t's return_beams), greedy search's one, or N samples.

    inputs: int32 [B, S] source ids, EOS last, padded with 0; searched padded to a multiple of
    SOURCE_MULTIPLE as in `search`. prefixes: None, or int32 [B, P] target pieces each
    output begins with (no EOS), padded with 0; a row of 0 searches as without. A prefix
    counts within the row's limit (input length + extra_length): a longer one is cut there,
    its output the cut prefix. seed: int32 [2], for tf.random.stateless_* ops (required when
    sampling: ValueError without). fixed_shapes as in `search`. Traces inside tf.function with
    [None, None] shapes and under jit_compile with fixed_shapes."""
    hp = search_hparams
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    width = tf.shape(inputs)[1] + hp.extra_length
    if prefixes is not None:
        prefixes = tf.convert_to_tensor(prefixes, tf.int32)
    found = _decode(_strategy(hp, seed, with_log_probs=True), model,
                    padded_to_multiple(inputs), hp.extra_length, fixed_shapes, prefixes)
    return found._replace(ids=found.ids[:, :, :width])


def search(model, inputs, search_hparams: SearchHParams, fixed_shapes: bool = False):
    """The search search_hparams asks for: beam search, greedy search for beam_size 1, or one
    sample (with a seed of 0) for sampling_topk other than 1; its best hypothesis (N = 1
    whatever num_hypotheses says: the same first one, in fewer steps). fixed_shapes for a
    search compiled with XLA (the caller's jit_compile). The inputs [B, S] are searched padded
    to a multiple of SOURCE_MULTIPLE tokens, so that batches of nearby lengths share shapes
    (`padded_to_multiple`); the outputs are ids [B, S + extra_length] all the same (each
    sentence's limit is its own length + extra_length) and their scores [B]."""
    hp = dataclasses.replace(search_hparams, num_hypotheses=1)
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    width = tf.shape(inputs)[1] + hp.extra_length
    seed = tf.zeros([2], tf.int32) if _sampling(hp) else None
    found = _decode(_strategy(hp, seed, with_log_probs=False), model,
                    padded_to_multiple(inputs), hp.extra_length, fixed_shapes)
    return found.ids[:, 0, :width], found.scores[:, 0]


def padded_to_multiple(ids, multiple: int = SOURCE_MULTIPLE):
    """int32 ids [B, S] padded with PAD to a length that is a multiple of `multiple`."""
    length = tf.shape(ids)[1]
    return tf.pad(ids, [[0, 0], [0, -length % multiple]], constant_values=PAD_ID)
