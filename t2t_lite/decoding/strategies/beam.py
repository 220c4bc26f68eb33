"""Beam search, the paper's (§6.1) as t2t's beam_search.py, with its N best (return_beams)."""
import dataclasses
from typing import Any, NamedTuple

import tensorflow as tf

from t2t_lite.data.vocab import EOS_ID
from t2t_lite.decoding.block_top_k import block_top_k
from t2t_lite.decoding.loop import (Hypotheses, Prefixes, gather_beams, log_probs_without_pad,
                                    tile_rows)
from t2t_lite.layers.attention import NEG_INF


def _merge_beams(tensor, batch_size, beam_size):
    """[B * K, ...] -> [B, K, ...]."""
    return tf.reshape(tensor, tf.concat([[batch_size, beam_size], tf.shape(tensor)[1:]], 0))


def length_penalty(length, alpha):
    """t2t's (and GNMT's) length penalty ((5 + length) / 6)^alpha; beam scores are log
    probabilities divided by it (alpha 0.6 in the paper, §6.1)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


class BeamState(NamedTuple):
    """Beam search's loop state, t2t's beam search's (alive and finished sequences, with their
    log probabilities, scores and flags, and the cache), for the rows of the sentences still
    searched (b) and, finished, of every input (B)."""
    step: Any  # int32 scalar: the position each step reads; its tokens land at + 1
    sentence: Any  # int32 [b]: each row's input
    done: Any  # bool [b]: Stopping's rule says so
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
    cache: Any  # the model's: a row per alive beam (b * K) or per sentence (loop.Search.split)


@dataclasses.dataclass(frozen=True)
class Stopping:
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
    """The paper's beam search (§6.1) as t2t's: the `beam_size` most probable unfinished
    sequences ("alive") and the `beam_size` best finished ones, scored by log probability /
    length_penalty; returns the `num_hypotheses` best finished (t2t's return_beams). A
    candidate reaching its input's limit counts as finished. A sentence is done when `Stopping`
    says so, and leaves the batch unless fixed_shapes. Candidates of ~NEG_INF log probability
    never count as finished (`impossible_can_end`). `with_log_probs` keeps the finished
    sequences' log probabilities (`search` does not ask for them)."""
    name, settings, implies, samples = "beam", ("alpha", "stop_after_finished"), {}, False
    ctranslate2_lacks = ("stop_after_finished",)  # its own stopping rule (patience)
    help = ("alpha: the length penalty's; stop_after_finished=N: a sentence's beam search also "
            "stops once N hypotheses have ended among its K best candidates, CTranslate2's "
            "rule; 0, the default, keeps t2t's exact stop")
    rows_per_input = 1

    @staticmethod
    def chosen(settings):
        return True

    @classmethod
    def of_hparams(cls, hp, seed, with_log_probs):
        return cls(hp.beam_size, hp.alpha, hp.stop_after_finished, hp.num_hypotheses,
                   with_log_probs)

    @staticmethod
    def ctranslate2(hp):
        return {"beam_size": hp.beam_size, "length_penalty": hp.alpha}

    @staticmethod
    def n_best(settings):
        return settings["beam_size"]

    def __init__(self, beam_size, alpha, stop_after_finished=0, num_hypotheses=1,
                 with_log_probs=True):
        self.beam_size, self.alpha = beam_size, alpha
        self.num_hypotheses, self.with_log_probs = num_hypotheses, with_log_probs
        self.stopping = Stopping(alpha, beam_size, stop_after_finished, num_hypotheses)

    def impossible_can_end(self, run):
        """Whether a candidate of ~NEG_INF log probability can end (decided when tracing)."""
        return run.prefixes is not None or run.vocab_size < 2 * self.beam_size

    def initial_state(self, run, cache):
        """Every input's K beams at the start symbol, the first alive (log probability 0, the
        others NEG_INF, so that the first step does not pick K copies); nothing finished."""
        batch_size, beam_size = tf.shape(run.limits)[0], self.beam_size
        length = run.max_length + 1  # with the start position
        self.positions = tf.range(length)[tf.newaxis, tf.newaxis, :]  # of the sequences' tokens
        finished_log_probs = (tf.fill([batch_size, beam_size], NEG_INF) if self.with_log_probs
                              else tf.constant(0.0))
        return BeamState(
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
        return min(2 * self.beam_size, run.vocab_size)

    def candidates(self, run, state):
        """Each alive beam's best per_beam tokens: their log probabilities and ids [b * K,
        per_beam], and the cache with the step's position added."""
        logits, cache = run.steps(tf.reshape(state.alive_seq[:, :, state.step], [-1]),
                                  state.step, state.cache)
        log_probs = self._forced(run, log_probs_without_pad(logits),
                                 tile_rows(state.sentence, self.beam_size), state.step)
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
        sequences, sentences = run.split(cache)
        log_probs, tokens, sequences = tf.nest.map_structure(
            lambda tensor: tile_rows(tensor, self.beam_size), (log_probs, tokens, sequences))
        return log_probs, tokens, run.joined(cache, sequences, sentences)

    @staticmethod
    def _forced(run, log_probs, sentence, position):
        """log_probs [rows, V] of rows of inputs `sentence` [rows], with prefixes only each
        forced row's piece left (Prefixes.restricted)."""
        if run.prefixes is None:
            return log_probs
        return Prefixes.restricted(log_probs, run.prefixes.pieces(sentence, position))

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
        top_seq = gather_beams(state.alive_seq, beam_indices)
        top_seq = tf.where(self.positions == t + 1, token_ids[:, :, tf.newaxis], top_seq)
        # A candidate ends with EOS, or by reaching its input's length limit.
        ends = tf.equal(token_ids, EOS_ID) | (t + 1 >= row_limits)[:, tf.newaxis]

        # Alive: the best K candidates that did not end.
        alive_candidates = top_log_probs + tf.cast(ends, tf.float32) * NEG_INF
        _, alive_choice = tf.math.top_k(alive_candidates, k=beam_size)
        alive_seq = gather_beams(top_seq, alive_choice)
        alive_log_probs = gather_beams(alive_candidates, alive_choice)
        parents = gather_beams(beam_indices, alive_choice)  # [b, K]: the beam each continues

        if self.impossible_can_end(run):  # an impossible candidate is no hypothesis
            ends &= top_log_probs > NEG_INF / 2
        finished = self._finished(run, state, top_seq, top_log_probs, ends)
        done, ended = self.stopping.after_step(state.done, state.ended, alive_log_probs,
                                               finished[1], finished[2], ends, row_limits)
        kept = batch.kept(done)
        sequences, sentences = run.split(cache)
        sequences = batch.follow(
            sequences,
            tf.reshape(kept[:, tf.newaxis] * beam_size + tf.gather(parents, kept), [-1]))
        names = ("finished_seq", "finished_scores", "finished_flags", "finished_log_probs")
        if not self.with_log_probs:
            names, finished = names[:3], finished[:3]
        finished = batch.written(tuple(getattr(state, name) for name in names), sentence,
                                 finished)
        if not self.with_log_probs:
            finished += (state.finished_log_probs,)
        sentence, done, ended, alive_seq, alive_log_probs, sentences = batch.leave(
            kept, done, (sentence, done, ended, alive_seq, alive_log_probs, sentences))
        return BeamState(t + 1, sentence, done, ended, alive_seq, alive_log_probs, *finished,
                          run.joined(cache, sequences, sentences))

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
        finished_seq = gather_beams(tf.concat([old[0], top_seq], axis=1), finished_choice)
        finished_flags = gather_beams(tf.concat([old[2], ends], axis=1), finished_choice)
        done_before = state.done[:, tf.newaxis]
        new = (tf.where(done_before[:, :, tf.newaxis], old[0], finished_seq),
               tf.where(done_before, old[1], finished_scores),
               tf.where(done_before, old[2], finished_flags))
        if self.with_log_probs:
            log_probs = gather_beams(tf.concat([old[3], top_log_probs], axis=1),
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
        ids = gather_beams(tf.concat([state.finished_seq, alive_seq], axis=1), which)
        scores = gather_beams(tf.concat([state.finished_scores, alive_scores], axis=1), which)
        # A slot of no possible sequence (~NEG_INF: fewer than N exist, as after a prefix cut
        # at the limit): ids 0, score and log probability NEG_INF.
        possible = gather_beams(tf.concat([state.finished_flags, alive_log_probs > NEG_INF / 2],
                                           axis=1), which)
        ids = tf.where(possible[:, :, tf.newaxis], ids, 0)
        scores = tf.where(possible, scores, NEG_INF)
        log_probs = None
        if self.with_log_probs:
            log_probs = tf.where(possible, gather_beams(
                tf.concat([state.finished_log_probs, alive_log_probs], axis=1), which), NEG_INF)
        return Hypotheses(ids[:, :, 1:], scores, log_probs)
