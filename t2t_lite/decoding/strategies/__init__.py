"""The search strategies by name, in the order they are chosen, each with the settings it takes
(t2t's registries; OpenNMT-tf's DecodingStrategy.from_params). A strategy class has: `name`;
`settings`, the SearchHParams fields it reads beside beam_size, extra_length and
num_hypotheses; `chosen(settings)`, whether settings (a dict of every field) ask for it;
`implies`, settings it takes unless given; `samples`, whether it draws (and needs a seed);
`of_hparams(hp, seed, with_log_probs)`; `ctranslate2(hp)`, its translate_batch options, and
`ctranslate2_lacks`, its settings CTranslate2 has not; `n_best(settings)`, the hypotheses of
its whole n-best list; `help`; and the loop's methods (loop.py)."""
import dataclasses

from t2t_lite.decoding.strategies.beam import BeamStrategy
from t2t_lite.decoding.strategies.greedy import GreedyStrategy
from t2t_lite.decoding.strategies.sampling import SamplingStrategy

STRATEGIES = {strategy.name: strategy
              for strategy in (SamplingStrategy, GreedyStrategy, BeamStrategy)}


def chosen(settings):
    """The strategy class that search settings (SearchHParams, or a dict of every field) ask
    for: the first in STRATEGIES whose `chosen` says so."""
    if not isinstance(settings, dict):
        settings = dataclasses.asdict(settings)
    return next(strategy for strategy in STRATEGIES.values() if strategy.chosen(settings))


def samples(settings) -> bool:
    """Whether search settings ask for a strategy that draws at random."""
    return chosen(settings).samples


def sampling_settings() -> tuple:
    """The settings of the strategies that draw at random."""
    return tuple(name for strategy in STRATEGIES.values() if strategy.samples
                 for name in strategy.settings)


def ctranslate2_lacks() -> tuple:
    """The settings CTranslate2's search has no counterpart of."""
    return tuple(name for strategy in STRATEGIES.values() for name in strategy.ctranslate2_lacks)


def settings_help() -> str:
    """What each strategy's settings do, for --decode_hparams' help."""
    return "; ".join(strategy.help for strategy in reversed(STRATEGIES.values()))
