"""The model's engine (decoding/model_engine.py): each hypothesis' log probability is what its
own scoring gives the pair, on the default one-best path (scores times the length penalty,
nothing carried through the loop) as on the n-best path (carried), and the n-best list's first
is the one-best hypothesis."""
import pytest

from t2t_lite.decoding.model_engine import ModelEngine
from t2t_lite.decoding.search import SearchHParams

from test_scoring import VOCAB_SIZE, model, padded_rows  # noqa: F401 (model: a fixture)


@pytest.fixture(scope="module")
def rows():
    """Source id rows of 1-8 pieces, each ending with EOS."""
    return [[int(i) for i in row if i] for row in padded_rows([8, 3, 5, 1, 6], 8, seed=3)]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_log_probs_are_the_scoring_of_the_hypotheses(model, rows, beam_size):
    one_best = ModelEngine(model, SearchHParams(beam_size=beam_size, extra_length=5)).search(rows)
    n_best = ModelEngine(model, SearchHParams(beam_size=beam_size, extra_length=5,
                                              num_hypotheses=beam_size)).search(rows)
    engine = ModelEngine(model)
    for best, hypotheses in zip(one_best, n_best):
        assert len(best) == 1 and len(hypotheses) == beam_size
        assert hypotheses[0].ids == best[0].ids
        assert hypotheses[0].score == pytest.approx(best[0].score, abs=1e-5)
    sources = [row for row, hypotheses in zip(rows, n_best) for _ in hypotheses]
    targets = [hypothesis.ids for hypotheses in n_best for hypothesis in hypotheses]
    scored = engine.score(sources, targets)
    found = [hypothesis for hypotheses in n_best for hypothesis in hypotheses]
    for hypothesis, target_score in zip(found, scored):
        assert hypothesis.log_prob == pytest.approx(target_score.log_likelihood, abs=1e-4)
    scored = engine.score(rows, [best[0].ids for best in one_best])
    for best, target_score in zip(one_best, scored):
        assert best[0].log_prob == pytest.approx(target_score.log_likelihood, abs=1e-4)
