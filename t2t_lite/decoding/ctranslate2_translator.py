"""Searching and scoring with a CTranslate2 model folder (`t2t_lite-decoder
--ctranslate2_model=E`, `t2t_lite.load(E)`): CTranslate2Engine runs translate_batch and
score_batch on batches of t2t_lite's source ids under the decoder's Translator, so that only the
search changes hands. Its length penalty, stopping rule and length limit are CTranslate2's
(docs/decoding.md, "With CTranslate2"); min_decoding_length=0 keeps EOS in the first step."""
import json
import os
import threading
import zlib

import numpy as np

from t2t_lite.data.vocab import EOS_ID
from t2t_lite.decoding import strategies
from t2t_lite.decoding.results import Hypothesis, TargetScore
from t2t_lite.errors import UserError

CTRANSLATE2_EXTRA = "pip install 't2t_lite[ctranslate2]'"
SENTENCEPIECE_MODEL = "sentencepiece.model"  # beside model.bin, for SentencePiece problems
EXPORT_RECORD = "t2t_lite_export.json"  # what the exporter wrote the folder from
# Held while a seeded sampling search runs: CTranslate2's seed is the process's.
_SEEDED_SAMPLING = threading.Lock()


class CTranslate2Error(UserError, RuntimeError):
    """CTranslate2 is not installed, a folder is not a CTranslate2 model t2t_lite wrote, or the
    search settings ask for what CTranslate2 does not do."""


def import_ctranslate2():
    """The ctranslate2 module, or one CTranslate2Error naming the extra that installs it."""
    try:
        import ctranslate2
    except ImportError as error:
        raise CTranslate2Error(f"CTranslate2 is not installed ({error}): {CTRANSLATE2_EXTRA}") \
            from error
    return ctranslate2


def export_record(folder: str) -> dict:
    """The exporter's record of `folder` (checkpoint, quantization, max_positions), or a
    CTranslate2Error when the folder is not one t2t_lite-exporter wrote."""
    path = os.path.join(folder, EXPORT_RECORD)
    if not os.path.isfile(os.path.join(folder, "model.bin")) or not os.path.isfile(path):
        raise CTranslate2Error(f"--ctranslate2_model={folder} is not a CTranslate2 model "
                               f"written by t2t_lite-exporter --format=ctranslate2 (no "
                               f"model.bin and {EXPORT_RECORD} there)")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def hard_alignment(attention, source_pieces: int, target_pieces: int) -> tuple:
    """OpenNMT's and fairseq's hard alignment of one hypothesis from CTranslate2's attention.

    Args:
        attention: CTranslate2's TranslationResult.attention of the hypothesis, one row per
            target token (its EOS last), one column per source token.
        source_pieces: the source's pieces, EOS not counted; a column for the source EOS
            (add_source_eos), when CTranslate2 returns one, is left out.
        target_pieces: the hypothesis' pieces, EOS not counted (the EOS row is left out).
    Returns:
        ((source index, target index), ...), 0-based: per target piece the source piece it
        attends to most.
    """
    return tuple((int(np.argmax(row[:source_pieces])), target)
                 for target, row in enumerate(attention[:target_pieces]))


def raw_log_prob(score: float, tokens: int, alpha: float) -> float:
    """The log probability of a hypothesis from CTranslate2 4.x's score of it, its log
    probability over length^length_penalty (decoding.cc's finalize_hypothesis_score).

    Args:
        score: the hypothesis' score (TranslationResult.scores).
        tokens: the hypothesis' tokens as CTranslate2 counts them for the penalty: its pieces
            and, when it ended, the EOS (what return_end_token=True returns).
        alpha: the length_penalty it was searched with.
    """
    return score * tokens ** alpha


def batch_seed(seeds: list) -> int:
    """ctranslate2.set_random_seed's seed (32 bits) of a batch of rows' seed pairs."""
    return zlib.crc32(np.asarray(seeds, np.int64).tobytes())


class CTranslate2Engine:
    """The engine of decoding/results.py done by CTranslate2: `search` (translate_batch) and
    `score` (score_batch) over a folder of t2t_lite-exporter --format=ctranslate2.

    Rows are source ids, each ending with EOS (Translator.encode's); the EOS is left to the
    model's config (add_source_eos). Every output ends with EOS.

    Args:
        folder: the exported model folder.
        tokens: the vocabulary's tokens in id order (vocabulary.tokens), the folder's too.
        search_hparams: SearchHParams: extra_length, num_hypotheses and the strategy's
            settings, mapped to translate_batch's options by the strategy (`ctranslate2`).
        parallel_batches: batches searched at once (CTranslate2's inter_threads).
        threads: the threads of each (intra_threads; the decoder's intra-op choice).
        alignments: give each Hypothesis its hard alignment (return_attention=True).
    Raises:
        CTranslate2Error: num_hypotheses is more than beam search returns.
    """

    def __init__(self, folder: str, tokens: list, search_hparams, parallel_batches: int = 1,
                 threads: int = 1, alignments: bool = False):
        self.ctranslate2 = import_ctranslate2()
        self.folder = folder
        self.max_positions = export_record(folder)["max_positions"]
        self.tokens = tokens
        self.ids = {token: i for i, token in enumerate(tokens)}
        self.search_hparams = search_hparams
        self.alignments = alignments
        self.threads = threads
        self.translator = self._translator(parallel_batches)

    def _translator(self, parallel_batches: int):
        return self.ctranslate2.Translator(
            self.folder, device="cpu", compute_type="default", inter_threads=parallel_batches,
            intra_threads=self.threads)

    @property
    def sampling(self) -> bool:
        return strategies.samples(self.search_hparams)

    def search(self, rows: list, prefixes: list = None, seeds: list = None) -> list:
        """Per row its num_hypotheses Hypothesis, best first (results.py's engine.search).

        translate_batch(num_hypotheses=N, return_scores=True): Hypothesis.score is
        CTranslate2's score; log_prob is that score times length^alpha (raw_log_prob), or,
        where the score does not hold the whole log probability (a target prefix, whose
        pieces CTranslate2 leaves out of the score; a hypothesis cut by the length limit,
        which has no EOS, appended here), score_batch's of the same pair.

        Args:
            rows: source ids, each ending with EOS.
            prefixes: per row, target ids its hypotheses begin with (translate_batch's
                target_prefix; an empty list: none). The hypotheses include the prefix.
            seeds: with sampling, per row its pair of ints (results.py); CTranslate2 takes
                one seed per call, so the batch's draws are decided by them all together
                (`batch_seed`).
        """
        if not rows:
            return []
        # Each row's limit (input length + extra_length), within which a prefix counts, as in
        # t2t_lite's search (loop.py): a longer prefix is cut there, and a row whose prefix
        # fills it is not searched (its one hypothesis is the prefix).
        limits = [len(row) + self.search_hparams.extra_length for row in rows]
        if prefixes is not None:
            prefixes = [list(prefix[:limit]) for prefix, limit in zip(prefixes, limits)]
        filled = {i for i, prefix in enumerate(prefixes or ())
                  if prefix and len(prefix) == limits[i]}
        hypotheses = [[(Hypothesis(prefixes[i] + [EOS_ID], 0.0, None), True)]
                      if i in filled else None for i in range(len(rows))]
        searched = [i for i in range(len(rows)) if i not in filled]
        if searched:
            sources = [self._pieces(rows[i][:-1]) for i in searched]  # source EOS: the config's
            target_prefix = None
            if prefixes is not None and any(prefixes[i] for i in searched):
                target_prefix = [self._pieces(prefixes[i]) or None for i in searched]
            limit = self._limit([rows[i] for i in searched],
                                prefixes and [prefixes[i] for i in searched])
            seed = None if seeds is None else batch_seed([seeds[i] for i in searched])
            results = self._translate(sources, target_prefix, limit, seed)
            for i, source, result, prefix in zip(searched, sources, results,
                                                 target_prefix or [None] * len(searched)):
                hypotheses[i] = self._row_hypotheses(source, result, bool(prefix))
        self._rescore(rows, hypotheses)
        for i in filled:  # the score of its log probability, as _row_hypotheses' (no EOS)
            hypothesis = hypotheses[i][0][0]
            score = hypothesis.log_prob / len(prefixes[i]) ** self._penalty()
            hypotheses[i] = [(hypothesis._replace(score=score), False)]
        return [[hypothesis for hypothesis, _ in row] for row in hypotheses]

    def score(self, rows: list, targets: list) -> list:
        """Per row the TargetScore of its target (results.py's engine.score): score_batch,
        whose log probabilities are of every target piece and of the EOS it appends (the
        source's EOS is the config's add_source_eos, as in search).

        Args:
            rows: source ids, each ending with EOS.
            targets: per row the target ids, ending with EOS.
        """
        if not rows:
            return []
        results = self.translator.score_batch(
            [self._pieces(row[:-1]) for row in rows],
            [self._pieces(target[:-1]) for target in targets], max_input_length=0)
        return [TargetScore(float(sum(result.log_probs)), len(result.log_probs))
                for result in results]

    def _pieces(self, ids) -> list:
        return [self.tokens[i] for i in ids]

    def _limit(self, rows: list, prefixes) -> int:
        """CTranslate2's max_decoding_length for the batch: its longest input + extra_length,
        at least one more than its longest prefix (the limit counts the prefix), at most the
        folder's positions."""
        limit = max(map(len, rows)) + self.search_hparams.extra_length
        longest_prefix = max(map(len, prefixes)) if prefixes else 0
        return min(max(limit, longest_prefix + 1), self.max_positions)

    def _penalty(self) -> float:
        """CTranslate2's length_penalty: alpha for beam search; 0 for greedy search and
        sampling, whose score is then the log probability, as t2t_lite's own (results.py)."""
        return self._options(0)["length_penalty"]

    def _options(self, limit: int) -> dict:
        """translate_batch's options: the strategy's (strategies: `ctranslate2`) and ours."""
        hp = self.search_hparams
        return dict(
            strategies.chosen(hp).ctranslate2(hp), num_hypotheses=hp.num_hypotheses,
            max_decoding_length=limit, min_decoding_length=0, max_input_length=0,
            return_scores=True, return_end_token=True, return_attention=self.alignments)

    def _translate(self, sources: list, target_prefix, limit: int, seed):
        """translate_batch. With sampling and a seed, in a translator of its own: CTranslate2
        4.x seeds each worker thread's generator once, at the thread's first draw, from the
        seed set then, so a new thread (a new translator, one thread) makes the draws depend
        on the seed alone; the seed being the process's, one seeded batch is searched at a
        time."""
        options = self._options(limit)
        if not (self.sampling and seed is not None):
            return self.translator.translate_batch(sources, target_prefix, **options)
        with _SEEDED_SAMPLING:
            self.ctranslate2.set_random_seed(seed)
            translator = self._translator(parallel_batches=1)
            return translator.translate_batch(sources, target_prefix, **options)

    def _row_hypotheses(self, source: list, result, prefixed: bool) -> list:
        """[(Hypothesis, whether its log_prob needs score_batch)] of one TranslationResult."""
        row = []
        for rank, (tokens, score) in enumerate(zip(result.hypotheses, result.scores)):
            ended = bool(tokens) and tokens[-1] == self.tokens[EOS_ID]
            ids = [self.ids[token] for token in tokens] + ([] if ended else [EOS_ID])
            alignment = None
            if self.alignments:
                alignment = hard_alignment(result.attention[rank], len(source), len(ids) - 1)
            log_prob = raw_log_prob(score, len(tokens), self._penalty())
            row.append((Hypothesis(ids, score, log_prob, alignment), prefixed or not ended))
        return row

    def _rescore(self, rows: list, hypotheses: list):
        """Gives the hypotheses flagged so score_batch's log probability of them, in place."""
        flagged = [(i, j) for i, row in enumerate(hypotheses)
                   for j, (_, needs_scoring) in enumerate(row) if needs_scoring]
        if not flagged:
            return
        scores = self.score([rows[i] for i, _ in flagged],
                            [hypotheses[i][j][0].ids for i, j in flagged])
        for (i, j), target_score in zip(flagged, scores):
            hypothesis = hypotheses[i][j][0]
            hypotheses[i][j] = (hypothesis._replace(log_prob=target_score.log_likelihood), False)
