"""The one search loop (OpenNMT-tf's dynamic_decode) over a model's step function, and what every
strategy's steps share: the rows a step runs on (`Batch`), target prefixes (`Prefixes`) and the
Hypotheses a search returns. docs/decoding.md says why the shapes are as they are.

A model's steps (models.transformer.DecodingSteps; the search tests' stand-ins): `vocab_size`;
`initial_state(inputs, room)`, the model's state (a nested structure) with a row per sentence;
`time_axes(state)`, its structure with, at each tensor, the axis it grows along (a row per
decoded sequence) or None (a row per sentence); `(ids, position, state) -> (logits, state)`.
A strategy (strategies/): `rows_per_input`, `initial_state`, `first_step`, `step` and
`hypotheses`, over a NamedTuple state with `step`, `done` and `cache` (the model's state).
"""
from typing import Any, NamedTuple

import tensorflow as tf

from t2t_lite.data.vocab import PAD_ID
from t2t_lite.layers.attention import NEG_INF

# Without XLA: the positions a state grows by at a time, the multiple of tokens the inputs are
# padded to, and of sentences a shrinking batch keeps rows for (few shapes: docs/decoding.md).
CACHE_CHUNK = 8
SOURCE_MULTIPLE = 16
ROW_MULTIPLE = 4


class Hypotheses(NamedTuple):
    """The N hypotheses of each input, best first (decoding.results.Hypothesis is one of them)."""
    ids: Any  # int32 [B, N, W]: W = input width + extra_length; EOS included, 0 after it
    scores: Any  # float32 [B, N]: the search's score (beam: log prob / length_penalty)
    log_probs: Any  # float32 [B, N]: the log probability of `ids` (pieces and EOS), untempered


def log_probs_without_pad(logits):
    """The log-softmax of float32 `logits` [rows, V] with PAD's NEG_INF: PAD (the start symbol
    and padding) is never an output piece, and the others keep the model's log probability."""
    pad = tf.one_hot(PAD_ID, logits.shape[-1] or tf.shape(logits)[-1], on_value=NEG_INF,
                     off_value=0.0)
    return tf.nn.log_softmax(logits) + pad


class Batch:
    """Which rows a step runs on: with `fixed_shapes` (XLA) every row to the end; otherwise
    done sentences leave once the rows of fewer sentences hold those not done (`kept`), and the
    state's room grows by CACHE_CHUNK positions when full (`with_room`)."""

    def __init__(self, fixed_shapes):
        self.fixed_shapes = fixed_shapes

    def with_room(self, state, axes, position):
        """`state` (flat `axes`) with room for `position`: CACHE_CHUNK more once full."""
        flat = tf.nest.flatten(state)
        growing = [i for i, axis in enumerate(axes) if axis is not None]
        if self.fixed_shapes or not growing:
            return state

        def longer():
            return [tf.pad(flat[i], [[0, CACHE_CHUNK * (d == axes[i])]
                                     for d in range(flat[i].shape.rank)]) for i in growing]
        grown = tf.cond(position < tf.shape(flat[growing[0]])[axes[growing[0]]],
                        lambda: [flat[i] for i in growing], longer)
        for i, tensor in zip(growing, grown):
            flat[i] = tensor
        return tf.nest.pack_sequence_as(state, flat)

    def kept(self, done):
        """Indices int32 [n] of the rows that go on, of done bool [b]: every row with fixed
        shapes; else, in their order, those of the sentences not done and the first done ones
        up to a multiple of ROW_MULTIPLE sentences (none when fewer than ROW_MULTIPLE go on)."""
        if self.fixed_shapes:
            return tf.range(tf.size(done))
        going_on = tf.reduce_sum(tf.cast(tf.logical_not(done), tf.int32))
        size = tf.where(going_on < ROW_MULTIPLE, going_on,
                        -(-going_on // ROW_MULTIPLE) * ROW_MULTIPLE)
        done_before = tf.cumsum(tf.cast(done, tf.int32))
        stays = tf.logical_not(done) | (done_before <= size - going_on)
        return tf.cast(tf.reshape(tf.where(stays), [-1]), tf.int32)

    def follow(self, tensors, rows):
        """`tensors` (a row per decoded sequence) of the next step: row i continues rows[i]."""
        def gather(tensor):
            followed = tf.gather(tensor, rows)
            return tf.ensure_shape(followed, tensor.shape) if self.fixed_shapes else followed
        return tf.nest.map_structure(gather, tensors)

    def leave(self, kept, done, rows):
        """`rows` (a row per sentence searched) for the next step: the rows `kept` once a
        sentence leaves (never with fixed shapes)."""
        if self.fixed_shapes:
            return rows
        return tf.cond(tf.size(kept) < tf.size(done), lambda: gather_rows(rows, kept),
                       lambda: rows)

    def of_rows(self, results, sentence):
        """The rows `sentence` [b] of `results` (a row per input)."""
        return results if self.fixed_shapes else gather_rows(results, sentence)

    def written(self, results, sentence, rows):
        """`results` (a row per input) with `rows` written at the rows `sentence` [b]."""
        if self.fixed_shapes:
            return rows
        return tf.nest.map_structure(
            lambda result, row: tf.tensor_scatter_nd_update(result, sentence[:, tf.newaxis],
                                                            row), results, rows)

    def loop(self, keep_going, step, state, axes):
        """tf.while_loop of `step` over a strategy's `state` (its model state `state.cache`,
        of `axes`) while `keep_going`; without fixed shapes its rows and room may change."""
        def invariant(tensor, axis=None):
            if self.fixed_shapes or tensor.shape.rank == 0:
                return tensor.shape
            dims = [None] + tensor.shape[1:].as_list()
            if axis is not None:
                dims[axis] = None
            return tf.TensorShape(dims)
        shapes = tf.nest.map_structure(invariant, state)._replace(
            cache=tf.nest.map_structure(invariant, state.cache, axes))
        return tf.while_loop(keep_going, lambda state: (step(state),), (state,),
                             shape_invariants=(shapes,))[0]


def gather_rows(structure, indices):
    """Rows `indices` of every tensor of `structure`."""
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, indices), structure)


def tile_rows(tensor, times):
    """[B, ...] -> [B * times, ...], each row repeated `times` times in a row."""
    return tf.repeat(tensor, times, axis=0)


def merge_rows(tensor, times):
    """[B * times, ...] -> [B, times, ...]."""
    return tf.reshape(tensor, tf.concat([[-1, times], tf.shape(tensor)[1:]], 0))


def gather_beams(tensor, indices):
    """tensor [B, K', ...], indices [B, K] -> [B, K, ...]."""
    return tf.gather(tensor, indices, batch_dims=1)


class Prefixes:
    """Target prefixes, a rule over any strategy: at the steps before a row's prefix length its
    piece is forced, going through the decoder as a picked one (CTranslate2's target_prefix)."""

    def __init__(self, prefixes):
        """prefixes: int32 [rows, P], each row's pieces then PAD."""
        self.prefixes = tf.convert_to_tensor(prefixes, tf.int32)
        self.columns = tf.pad(self.prefixes, [[0, 0], [0, 1]])  # PAD past P

    def pieces(self, sentence, position):
        """int32 [n]: the piece forced at `position` on rows of inputs `sentence`, else PAD."""
        column = tf.minimum(position, tf.shape(self.columns)[1] - 1)
        return tf.gather(self.columns[:, column], sentence)

    def forced(self, ids, sentence, position):
        """`ids` [n] with the forced pieces in place of those picked."""
        pieces = self.pieces(sentence, position)
        return tf.where(tf.equal(pieces, PAD_ID), ids, pieces)

    @staticmethod
    def restricted(log_probs, pieces):
        """log_probs [n, V] with NEG_INF but at each forced row's piece (`pieces` [n])."""
        allowed = (tf.equal(tf.range(tf.shape(log_probs)[1])[tf.newaxis, :], pieces[:, tf.newaxis])
                   | tf.equal(pieces, PAD_ID)[:, tf.newaxis])
        return tf.where(allowed, log_probs, NEG_INF)

    def tiled(self, times):
        """The rule for inputs repeated `times` times in a row (samples of one input)."""
        return Prefixes(tile_rows(self.prefixes, times))


class Search(NamedTuple):
    """What a strategy's steps see: the step function (float32 logits), the vocabulary size,
    the rows each step runs on, the inputs' length limits [R] and the largest (the last step),
    the prefix rule or None, and the model state's flat time axes."""
    steps: Any
    vocab_size: int
    batch: Batch
    limits: Any
    max_length: Any
    prefixes: Any
    axes: list

    def split(self, state):
        """The model state's tensors with a row per decoded sequence, and per sentence."""
        flat = tf.nest.flatten(state)
        return ([t for t, axis in zip(flat, self.axes) if axis is not None],
                [t for t, axis in zip(flat, self.axes) if axis is None])

    def joined(self, state, sequences, sentences):
        """`state`'s structure of `split`'s two lists."""
        sequences, sentences = iter(sequences), iter(sentences)
        return tf.nest.pack_sequence_as(
            state, [next(sentences if axis is None else sequences) for axis in self.axes])


def decode(strategy, steps, inputs, extra_length, fixed_shapes, prefixes=None):
    """The search loop: `strategy`'s state from padded `inputs` [B, S], its steps while a row is
    not done and there is room, and its Hypotheses [B, N, S + extra_length]. Each input's limit
    is its length + extra_length; with several rows per input (samples), the state, limits and
    prefixes are repeated."""
    batch, inputs = Batch(fixed_shapes), tf.convert_to_tensor(inputs, tf.int32)
    limits = tf.reduce_sum(tf.cast(tf.not_equal(inputs, PAD_ID), tf.int32), 1) + extra_length
    max_length = tf.shape(inputs)[1] + extra_length
    state = steps.initial_state(inputs, max_length if fixed_shapes else CACHE_CHUNK)
    axes = steps.time_axes(state)
    flat_axes = tf.nest.flatten(axes)
    rule = None if prefixes is None else Prefixes(prefixes)
    times = strategy.rows_per_input
    if times > 1:
        state, limits = tf.nest.map_structure(lambda tensor: tile_rows(tensor, times),
                                              (state, limits))
        rule = None if rule is None else rule.tiled(times)

    def step(ids, position, state):
        logits, state = steps(ids, position, batch.with_room(state, flat_axes, position))
        return tf.cast(logits, tf.float32), state  # float32 scores whatever the model's dtype
    run = Search(step, steps.vocab_size, batch, limits, max_length, rule, flat_axes)
    state = strategy.first_step(run, strategy.initial_state(run, state))

    def keep_going(state):
        return tf.logical_and(state.step < max_length, tf.logical_not(tf.reduce_all(state.done)))
    state = batch.loop(keep_going, lambda state: strategy.step(run, state), state, axes)
    return strategy.hypotheses(run, state)
