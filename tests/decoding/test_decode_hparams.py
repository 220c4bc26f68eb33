"""--decode_hparams: one string for the search's settings and the Translator's, each name given to
the settings that have it."""
import pytest

from t2t_lite.decoding.decoder import TranslatorHParams, parse_decode_hparams
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.hparams_lib import HParamsError


def test_each_name_goes_to_its_settings():
    search, translator = parse_decode_hparams("beam_size=2,alpha=0.6,batch_size=8,"
                                              "jit_compile=true,parallel_batches=3,"
                                              "stop_after_finished=2")
    assert search == SearchHParams(beam_size=2, alpha=0.6, stop_after_finished=2)
    assert translator == TranslatorHParams(batch_size=8, jit_compile=True, parallel_batches=3)


def test_an_empty_string_is_the_defaults():
    assert parse_decode_hparams("") == (SearchHParams(), TranslatorHParams())


def test_an_unknown_name_lists_the_names_of_both():
    with pytest.raises(HParamsError, match=r"unknown hparam 'beam_sise'\. Did you mean "
                                           r"'beam_size'\? Known hparams: alpha, batch_size, "
                                           r"beam_size, extra_length, jit_compile, "
                                           r"parallel_batches, stop_after_finished$"):
        parse_decode_hparams("beam_sise=2")


def test_the_search_without_its_cache_is_gone():
    """The library has one search, incremental: use_cache is a name like any unknown one."""
    with pytest.raises(HParamsError, match=r"unknown hparam 'use_cache'\. Known hparams: "):
        parse_decode_hparams("use_cache=false")


@pytest.mark.parametrize("overrides, message", [
    ("beam_size=0", "beam_size=0: must be at least 1"),
    ("batch_size=0", "batch_size=0: must be at least 1"),
    ("parallel_batches=-1", "parallel_batches=-1: must be at least 0"),
    ("stop_after_finished=-1", "stop_after_finished=-1: must be at least 0")])
def test_sizes_below_their_least_are_refused(overrides, message):
    with pytest.raises(HParamsError, match=message):
        parse_decode_hparams(overrides)
