"""Greedy search (t2t's and CTranslate2's beam_size 1), and what it shares with sampling: one
decoded sequence per row, its token at each step picked from the step's logits (`RowStrategy`)."""
from typing import Any, NamedTuple

import tensorflow as tf

from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding.loop import Hypotheses, gather_beams, log_probs_without_pad, merge_rows


class RowState(NamedTuple):
    """The loop state of one decoded sequence per row: the rows of the inputs still searched
    (n), and the outputs of every input (R), written at each step."""
    step: Any  # int32 scalar: the position each row's input is at; its output lands at + 1
    sentence: Any  # int32 [n]: each row's input
    done: Any  # bool [n]: it has produced EOS or reached its limit
    next_ids: Any  # int32 [n]: each row's token at `step` (first the start symbol, PAD)
    decoded_ids: Any  # int32 [R, max_length + 1]: the start symbol, then the tokens chosen
    log_probs: Any  # float32 [R]: their log probability
    cache: Any  # the model's state, a row per row


class RowStrategy:
    """A strategy with one sequence per row, its token picked by `pick` (OpenNMT-tf's and
    keras-hub's samplers). A row is done at EOS or its limit; its score is its log probability."""
    rows_per_input = 1

    def pick(self, logits, log_probs, position, sentence, run):
        """int32 [n]: each row's next token, of the step's logits and log-softmax [n, V] at
        `position`, for rows of inputs `sentence` [n] of the loop `run` (loop.Search)."""
        raise NotImplementedError

    def initial_state(self, run, cache):
        """Every row at the start symbol (PAD, t2t's shift_right); token t lands at t + 1."""
        rows = tf.shape(run.limits)[0]
        return RowState(
            step=tf.constant(0), sentence=tf.range(rows), done=tf.zeros([rows], tf.bool),
            next_ids=tf.fill([rows], PAD_ID),
            decoded_ids=tf.zeros([rows, run.max_length + 1], tf.int32),
            log_probs=tf.zeros([rows], tf.float32), cache=cache)

    def first_step(self, run, state):
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
        return RowState(t + 1, sentence, done, next_ids, decoded_ids, total, cache)

    def hypotheses(self, run, state):
        """Hypotheses [B, rows_per_input, L] of the rows, most probable first."""
        ids = merge_rows(state.decoded_ids[:, 1:], self.rows_per_input)
        log_probs = merge_rows(state.log_probs, self.rows_per_input)
        if self.rows_per_input > 1:
            log_probs, order = tf.math.top_k(log_probs, k=self.rows_per_input)
            ids = gather_beams(ids, order)
        return Hypotheses(ids, log_probs, log_probs)


class GreedyStrategy(RowStrategy):
    """Greedy search: the most probable token."""
    name, settings, implies, samples, ctranslate2_lacks = "greedy", (), {}, False, ()
    help = "beam_size=1 is greedy search"

    @staticmethod
    def chosen(settings):
        return settings["beam_size"] == 1

    @classmethod
    def of_hparams(cls, hp, seed, with_log_probs):
        return cls()

    @staticmethod
    def ctranslate2(hp):
        return {"beam_size": 1, "length_penalty": 0.0}

    @staticmethod
    def n_best(settings):
        return settings["beam_size"]

    def pick(self, logits, log_probs, position, sentence, run):
        return tf.argmax(log_probs, axis=-1, output_type=tf.int32)
