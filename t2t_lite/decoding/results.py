"""What a search engine gives the decoder for each input, and what it asks of an engine.

An engine is the model's own search (decoding.model_engine.ModelEngine) or CTranslate2's
(decoding.ctranslate2_translator.CTranslate2Engine). decoder.Translator reads, batches, orders
and writes; an engine only turns batches of id rows into these results:

    engine.search(rows, prefixes=None, seeds=None) -> [[Hypothesis, ...], ...]
        rows: source ids, each ending with EOS. prefixes: per row, target piece ids (no EOS)
        that its translations begin with (an empty list: none). seeds: for sampling, per row
        a pair of ints, decoder.Translator's (--seed, the line's index in the run). Returns
        per row its search_hparams.num_hypotheses hypotheses, best first.
    engine.score(rows, targets) -> [TargetScore, ...]
        targets: per row, the target ids ending with EOS; teacher-forced, nothing searched.
"""
from typing import NamedTuple, Optional


class Hypothesis(NamedTuple):
    """One output of a search (t2t's beams, OpenNMT-tf's n-best, fairseq's --nbest).

    ids: the output piece ids, EOS last (no start symbol, no padding).
    score: the search's own score: beam search's log probability over the length penalty
        (t2t's and GNMT's ((5 + length) / 6)^alpha; CTranslate2's length^alpha), greedy search's
        and sampling's log probability.
    log_prob: the raw log probability of `ids`, summed over the pieces and EOS: what
        TargetScore.log_likelihood gives for the same pair.
    alignment: when asked, (source piece, target piece) index pairs, 0-based, EOS of neither
        side counted (OpenNMT-tf's and fairseq's hard alignments).
    """
    ids: list
    score: float
    log_prob: float
    alignment: Optional[tuple] = None


class TargetScore(NamedTuple):
    """The model's score of a given translation (OpenNMT-tf's `onmt-main score`, CTranslate2's
    score_batch): the log-likelihood over the target pieces and EOS, and their count; in the
    Python API what was wrong with the pair too (None and 0 for one not scored)."""
    log_likelihood: Optional[float]
    pieces: int
    error: Optional[str] = None

    @property
    def mean(self) -> Optional[float]:
        """The log-likelihood per piece (EOS counted)."""
        return self.log_likelihood / self.pieces if self.pieces else None


class Translation(NamedTuple):
    """A hypothesis as t2t_lite.load(...).translate gives it: its text and Hypothesis' rest."""
    text: str
    score: float
    log_prob: float
    alignment: Optional[tuple] = None


class Translations(NamedTuple):
    """A sentence's Translations, best first ([]: not translated), and `error`: what the
    decoder warns of it (cannot be encoded, cut to max_length; "empty"), or None."""
    hypotheses: list
    error: Optional[str] = None
