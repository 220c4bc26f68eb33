"""Algorithmic problems that need no download: copy and reverse a random symbol sequence.

The copy task is the Annotated Transformer's first example ("A First Example": learn to copy
random symbols) and t2t's `algorithmic_identity`. Symbols are the integers 1..10, sequences have
1..20 symbols, and the text form of a sequence is a line like "3 7 1". The held-out test
sequences never occur in the training split.
"""
import random

from t2t_lite.data.problem import DEV, TEST, TRAIN, Problem
from t2t_lite.data.vocab import SymbolVocabulary
from t2t_lite.registry import register_problem


class AlgorithmicProblem(Problem):
    """Random symbol sequences mapped by `transform`; one SymbolVocabulary for both sides."""

    num_symbols = 10
    min_symbols = 1
    max_symbols = 20
    num_samples = {TRAIN: 50_000, DEV: 1_000, TEST: 100}
    seeds = {TRAIN: 1, DEV: 2, TEST: 3}

    def transform(self, symbols: list) -> list:
        raise NotImplementedError

    def feature_encoders(self, data_dir: str) -> dict:
        vocabulary = SymbolVocabulary(self.num_symbols)
        return {"inputs": vocabulary, "targets": vocabulary}

    def random_sequences(self, split: str, exclude=frozenset()):
        """`num_samples[split]` random sequences, none of them in `exclude`."""
        rng = random.Random(self.seeds[split])
        count = 0
        while count < self.num_samples[split]:
            length = rng.randint(self.min_symbols, self.max_symbols)
            symbols = tuple(rng.randint(1, self.num_symbols) for _ in range(length))
            if symbols not in exclude:
                count += 1
                yield symbols

    def generate_samples(self, data_dir: str, tmp_dir: str, split: str):
        held_out_from = frozenset(self.random_sequences(TRAIN)) if split == TEST else frozenset()
        for symbols in self.random_sequences(split, exclude=held_out_from):
            yield {"inputs": " ".join(map(str, symbols)),
                   "targets": " ".join(map(str, self.transform(list(symbols))))}


@register_problem
class AlgorithmicCopy(AlgorithmicProblem):
    """Copy the input sequence (t2t's algorithmic_identity)."""

    def transform(self, symbols):
        return symbols


@register_problem
class AlgorithmicReverse(AlgorithmicProblem):
    """Reverse the input sequence (t2t's algorithmic_reverse)."""

    def transform(self, symbols):
        return symbols[::-1]
