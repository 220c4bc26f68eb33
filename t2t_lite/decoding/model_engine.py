"""The model's own search as the decoder's engine (results.py's contract): batches of id rows
padded into tensors, searched by decoding.search, the results back as Hypotheses; the scores
of given translations by one teacher-forced pass (decoding.scoring); alignments from the
encoder-decoder attention of the hypotheses found (decoding.alignments).

Each kind of call is one tf.function, traced once for every batch shape (input_signature
[None, None]); XLA (jit_compile) still compiles each shape it meets, so that with it a batch
is padded to batch_size rows and its lengths to a multiple of LENGTH_MULTIPLE, and the search
keeps fixed shapes.
"""
import keras
import numpy as np
import tensorflow as tf

from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding import alignments, scoring, strategies
from t2t_lite.decoding.results import Hypothesis, TargetScore
from t2t_lite.decoding.search import (Hypotheses, SearchHParams, length_penalty, search,
                                      search_hypotheses)
from t2t_lite.layers.attention import NEG_INF

LENGTH_MULTIPLE = 16
IDS = tf.TensorSpec([None, None], tf.int32)
SEEDS = tf.TensorSpec([None, 2], tf.int32)


def padded(rows: list, length: int = 0) -> np.ndarray:
    """int32 [len(rows), max(longest, length)] of id rows padded with PAD."""
    length = max([length] + [len(row) for row in rows])
    return keras.utils.pad_sequences(rows, maxlen=length, padding="post",
                                     value=PAD_ID).astype(np.int32)


def hypothesis_ids(row) -> list:
    """A searched id row up to its EOS (kept), without the padding after; the whole row when
    the length limit ended it before an EOS."""
    row = [int(i) for i in row]
    return row[:row.index(EOS_ID) + 1] if EOS_ID in row else [i for i in row if i != PAD_ID]


class ModelEngine:
    """search(rows, prefixes, seed) and score(rows, targets) of results.py, with `model`.

    Args:
        model: the Transformer (models.restoring.load_model's, or one being trained).
        search_hparams: SearchHParams.
        jit_compile: the search compiled with XLA (few shapes: the module docstring).
        batch_size: the rows a batch is padded to under XLA.
        alignment_layer: None for no alignments, else the decoder layer whose
            encoder-decoder attention, averaged over heads, aligns each hypothesis.
    """

    def __init__(self, model, search_hparams: SearchHParams = None, jit_compile: bool = False,
                 batch_size: int = 32, alignment_layer: int = None):
        self.model = model
        self.search_hparams = search_hparams or SearchHParams()
        self.jit_compile, self.batch_size = jit_compile, batch_size
        self.alignment_layer = alignment_layer
        self.sampling = strategies.samples(self.search_hparams)
        # Every function made here, not at a first batch: batches searched at once from
        # several threads share each one, traced once.
        self._searches = {prefixed: self._search_function(prefixed)
                          for prefixed in (False, True)}
        self._scoring = tf.function(
            lambda inputs, targets: scoring.target_log_likelihoods(model, inputs, targets),
            input_signature=[IDS, IDS])
        layer = -1 if alignment_layer is None else alignment_layer
        self._attention = tf.function(
            lambda inputs, targets: alignments.attention_to_source(model, inputs, targets,
                                                                   layer),
            input_signature=[IDS, IDS])

    def _search_function(self, prefixed: bool):
        """The tf.function searching (inputs[, prefixes][, seeds]) -> Hypotheses: the seeds only
        when sampling, the prefixes only when some row has one. The default, one hypothesis
        of a search without prefixes or sampling, is `search` itself, whose loop carries no
        log probabilities: a hypothesis' log probability is then its score times the length
        penalty of its pieces (greedy search's: its score), computed once at the end."""
        signature = [IDS] + [IDS] * prefixed + [SEEDS] * self.sampling
        if not (prefixed or self.sampling or self.search_hparams.num_hypotheses > 1):
            return tf.function(self._best, jit_compile=self.jit_compile,
                               input_signature=signature)

        def searched(inputs, *extra):
            prefixes = extra[0] if prefixed else None
            seed = extra[-1] if self.sampling else None
            return search_hypotheses(self.model, inputs, self.search_hparams,
                                     fixed_shapes=self.jit_compile, prefixes=prefixes,
                                     seed=seed)
        return tf.function(searched, jit_compile=self.jit_compile, input_signature=signature)

    def _best(self, inputs):
        """Hypotheses [B, 1, ...] of `search`, log probabilities from its scores."""
        hp = self.search_hparams
        ids, scores = search(self.model, inputs, hp, fixed_shapes=self.jit_compile)
        log_probs = scores
        if hp.beam_size > 1:
            pieces = tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), axis=1)
            log_probs = scores * length_penalty(pieces, hp.alpha)
        return Hypotheses(ids[:, tf.newaxis], scores[:, tf.newaxis],
                          log_probs[:, tf.newaxis])

    def _batch(self, rows: list) -> np.ndarray:
        """The source batch: under XLA padded to batch_size rows (of a lone EOS) and a
        multiple of LENGTH_MULTIPLE tokens, for few compilations."""
        if not self.jit_compile:
            return padded(rows)
        rows = rows + [[EOS_ID]] * (self.batch_size - len(rows))
        length = max(map(len, rows))
        return padded(rows, -(-length // LENGTH_MULTIPLE) * LENGTH_MULTIPLE)

    def search(self, rows: list, prefixes: list = None, seeds: list = None) -> list:
        """results.py's search: per row its num_hypotheses Hypotheses, best first; a row's
        samples are decided by its seed pair alone (SamplingStrategy)."""
        inputs = self._batch(rows)
        prefixed = bool(prefixes) and any(prefixes)
        arguments = [inputs]
        if prefixed:
            prefix_rows = list(prefixes) + [[]] * (len(inputs) - len(prefixes))
            arguments.append(padded(prefix_rows, 1))
        if self.sampling:
            seeds = list(seeds or [(0, 0)] * len(rows))
            arguments.append(np.array(seeds + [(0, 0)] * (len(inputs) - len(seeds)), np.int32))
        found = self._searches[prefixed](*arguments)
        ids, scores, log_probs = (found.ids.numpy(), found.scores.numpy(),
                                  found.log_probs.numpy())
        # A slot no sequence fills (fewer than num_hypotheses exist) has a NEG_INF score.
        results = [[Hypothesis(hypothesis_ids(ids[row, n]), float(scores[row, n]),
                               float(log_probs[row, n])) for n in range(ids.shape[1])
                    if scores[row, n] > NEG_INF / 2]
                   for row in range(len(rows))]
        if self.alignment_layer is not None:
            results = self._aligned(rows, results)
        return results

    def _aligned(self, rows: list, results: list) -> list:
        """The hypotheses with their alignments: one teacher-forced pass over every
        (source, hypothesis) pair."""
        sources = [row for row, hypotheses in zip(rows, results) for _ in hypotheses]
        targets = [hypothesis.ids for hypotheses in results for hypothesis in hypotheses]
        weights = self._attention(padded(sources), padded(targets)).numpy()
        # Piece counts with EOS; a hypothesis the length limit ended has none of its own.
        pairs = iter(alignments.hard_alignment(row_weights, len(source),
                                               len(target) + (target[-1] != EOS_ID))
                     for row_weights, source, target in zip(weights, sources, targets))
        return [[hypothesis._replace(alignment=next(pairs)) for hypothesis in hypotheses]
                for hypotheses in results]

    def score(self, rows: list, targets: list) -> list:
        """results.py's score: per row the TargetScore of its target (ids ending with EOS)."""
        log_likelihoods, pieces = self._scoring(padded(rows), padded(targets))
        return [TargetScore(float(value), int(count))
                for value, count in zip(log_likelihoods.numpy(), pieces.numpy())]
