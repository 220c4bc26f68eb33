"""Search for the most probable output sequences (paper §6.1), or samples of them: a strategy
(strategies/) over the one loop (loop.py) through the model's step function, inside
`tf.function`; the decoder, BLEU during training and the exported model call these functions.
docs/decoding.md says how the search runs and why its shapes are as they are."""
import dataclasses

import tensorflow as tf

from t2t_lite.data.vocab import PAD_ID
from t2t_lite.decoding import strategies
from t2t_lite.decoding.loop import (CACHE_CHUNK, ROW_MULTIPLE, SOURCE_MULTIPLE,  # noqa: F401
                                    Hypotheses, decode, log_probs_without_pad)
from t2t_lite.decoding.strategies.beam import BeamStrategy, length_penalty  # noqa: F401
from t2t_lite.decoding.strategies.greedy import GreedyStrategy
from t2t_lite.hparams_lib import HParamsError
from t2t_lite.layers.attention import NEG_INF  # noqa: F401


@dataclasses.dataclass(frozen=True)
class SearchHParams:
    """The search's part of t2t's --decode_hparams (the Translator's is
    decoder.TranslatorHParams), checked where made (check_search_hparams). beam_size 4 and
    alpha 0.6 are the paper's (§6.1). extra_length: tokens allowed past the input length.
    stop_after_finished: 0 stops a sentence's beam search by t2t's exact bound; N > 0 also once
    N hypotheses have ended among its K best candidates (CTranslate2's and fairseq's rule)."""
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
    # Nucleus sampling (CTranslate2's sampling_topp): among the top-k, of logits / temperature,
    # the fewest most probable pieces whose probability reaches p (1: every piece).
    sampling_topp: float = 1.0

    def __post_init__(self):
        check_search_hparams(self)


class SearchSettingError(HParamsError):
    """Search hparams that cannot go together (a user's --decode_hparams)."""


def greedy_search(model, inputs, extra_length: int = 50, fixed_shapes: bool = False):
    """Greedy decoding of padded `inputs` [B, S] (GreedyStrategy): ids [B, S + extra_length]
    and their log probabilities [B]."""
    found = decode(GreedyStrategy(), model.decoding_steps(fixed_shapes), inputs, extra_length,
                   fixed_shapes)
    return found.ids[:, 0], found.scores[:, 0]


def beam_search(model, inputs, beam_size: int = 4, alpha: float = 0.6, extra_length: int = 50,
                fixed_shapes: bool = False, stop_after_finished: int = 0):
    """Beam search of padded `inputs` [B, S] (BeamStrategy). Returns ids [B, S + extra_length]
    (the best finished sequence of each input, or the best alive one if none finished) and
    their scores [B]."""
    strategy = BeamStrategy(beam_size, alpha, stop_after_finished, with_log_probs=False)
    found = decode(strategy, model.decoding_steps(fixed_shapes), inputs, extra_length,
                   fixed_shapes)
    return found.ids[:, 0], found.scores[:, 0]


def check_search_hparams(hp: SearchHParams):
    """SearchSettingError naming the hparams that cannot go together (docs/decoding.md)."""
    def refuse(message):
        raise SearchSettingError(f"--decode_hparams: {message}")
    if hp.num_hypotheses < 1:
        refuse(f"num_hypotheses={hp.num_hypotheses}: must be at least 1")
    if hp.sampling_topk < 0:
        refuse(f"sampling_topk={hp.sampling_topk}: must be 0 (every piece) or more")
    if not hp.sampling_temperature > 0:
        refuse(f"sampling_temperature={hp.sampling_temperature}: must be above 0")
    if not 0 < hp.sampling_topp <= 1:
        refuse(f"sampling_topp={hp.sampling_topp}: must be above 0 and at most 1")
    if hp.sampling_topp < 1 and not strategies.samples(hp):
        refuse(f"sampling_topp={hp.sampling_topp} samples with a sampling_topk other than 1 "
               "only (0: every piece)")
    if strategies.samples(hp) and hp.beam_size != 1:
        refuse(f"sampling_topk={hp.sampling_topk} samples with beam_size=1 only, not "
               f"beam_size={hp.beam_size}")
    if not strategies.samples(hp) and hp.num_hypotheses > hp.beam_size:
        refuse(f"num_hypotheses={hp.num_hypotheses} is more than beam_size={hp.beam_size}")
    if 0 < hp.stop_after_finished < hp.num_hypotheses and hp.beam_size > 1:
        refuse(f"stop_after_finished={hp.stop_after_finished} is below "
               f"num_hypotheses={hp.num_hypotheses}")


def _strategy(hp: SearchHParams, seed, with_log_probs):
    """The strategy search hparams `hp` ask for (strategies.chosen)."""
    return strategies.chosen(hp).of_hparams(hp, seed, with_log_probs)


def search_hypotheses(model, inputs, search_hparams: SearchHParams, fixed_shapes: bool = False,
                      prefixes=None, seed=None) -> Hypotheses:
    """The search_hparams.num_hypotheses (N) best hypotheses of each input, best first
    (Hypotheses: ids int32 [B, N, S + extra_length], scores and log_probs float32 [B, N]):
    beam search's N best finished (t2t's return_beams), greedy search's one, or N samples.

    inputs: int32 [B, S] source ids, EOS last, padded with 0; searched padded to a multiple of
    SOURCE_MULTIPLE as in `search`. prefixes: None, or int32 [B, P] target pieces each
    output begins with (no EOS), padded with 0; a row of 0 searches as without. A prefix
    counts within the row's limit (input length + extra_length): a longer one is cut there,
    its output the cut prefix. seed: int32 [B, 2], each input's seed of its samples, or [2],
    every input's (required when sampling: ValueError without; SamplingStrategy).
    fixed_shapes as in `search`. Traces inside tf.function with [None, None] shapes and under
    jit_compile with fixed_shapes."""
    hp = search_hparams
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    width = tf.shape(inputs)[1] + hp.extra_length
    if prefixes is not None:
        prefixes = tf.convert_to_tensor(prefixes, tf.int32)
    found = decode(_strategy(hp, seed, with_log_probs=True), model.decoding_steps(fixed_shapes),
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
    seed = tf.zeros([2], tf.int32) if strategies.samples(hp) else None
    found = decode(_strategy(hp, seed, with_log_probs=False), model.decoding_steps(fixed_shapes),
                   padded_to_multiple(inputs), hp.extra_length, fixed_shapes)
    return found.ids[:, 0, :width], found.scores[:, 0]


def padded_to_multiple(ids, multiple: int = SOURCE_MULTIPLE):
    """int32 ids [B, S] padded with PAD to a length that is a multiple of `multiple`."""
    length = tf.shape(ids)[1]
    return tf.pad(ids, [[0, 0], [0, -length % multiple]], constant_values=PAD_ID)
