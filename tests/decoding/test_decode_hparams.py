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


def test_an_unknown_name_names_the_flag_and_lists_the_names_of_both():
    with pytest.raises(HParamsError, match=r"^--decode_hparams: unknown decode hparam "
                                           r"'beam_sise'\. Did you mean 'beam_size'\? Known "
                                           r"decode hparams: alignment_layer, alignments, "
                                           r"alpha, batch_size, beam_size, extra_length, "
                                           r"jit_compile, num_hypotheses, parallel_batches, "
                                           r"return_beams, sampling_temperature, "
                                           r"sampling_topk, sampling_topp, stop_after_finished, "
                                           r"write_beam_scores$"):
        parse_decode_hparams("beam_sise=2")


def test_a_value_of_the_wrong_type_names_the_flag():
    with pytest.raises(HParamsError, match=r"^--decode_hparams: .*beam_size='four': expected "
                                           r"int$"):
        parse_decode_hparams("beam_size=four")


def test_the_search_without_its_cache_is_gone():
    """The library has one search, incremental: use_cache is a name like any unknown one."""
    with pytest.raises(HParamsError, match=r"unknown decode hparam 'use_cache'\. Known "):
        parse_decode_hparams("use_cache=false")


@pytest.mark.parametrize("overrides, message", [
    ("beam_size=0", "beam_size=0: must be at least 1"),
    ("batch_size=0", "batch_size=0: must be at least 1"),
    ("parallel_batches=-1", "parallel_batches=-1: must be at least 0"),
    ("stop_after_finished=-1", "stop_after_finished=-1: must be at least 0"),
    ("extra_length=-1", "extra_length=-1: must be at least 0")])
def test_sizes_below_their_least_are_refused(overrides, message):
    with pytest.raises(HParamsError, match=message):
        parse_decode_hparams(overrides)


def test_n_best_and_sampling_settings():
    """return_beams returns the whole beam unless num_hypotheses says fewer (t2t's
    return_beams); num_hypotheses above 1 writes the n-best lists; sampling searches with one
    beam."""
    search, translator = parse_decode_hparams("beam_size=5,return_beams=true")
    assert (search.num_hypotheses, translator.return_beams) == (5, True)
    search, translator = parse_decode_hparams("num_hypotheses=3")
    assert (search.beam_size, search.num_hypotheses, translator.return_beams) == (4, 3, True)
    search, translator = parse_decode_hparams("sampling_topk=10,num_hypotheses=6")
    assert (search.beam_size, search.num_hypotheses, search.sampling_topk) == (1, 6, 10)
    search, _ = parse_decode_hparams("sampling_topk=0,sampling_topp=0.9")
    assert (search.beam_size, search.sampling_topk, search.sampling_topp) == (1, 0, 0.9)
    assert parse_decode_hparams("return_beams=false")[0].num_hypotheses == 1


@pytest.mark.parametrize("overrides, message", [
    ("beam_size=2,num_hypotheses=3", "num_hypotheses=3 is more than beam_size=2"),
    ("sampling_topk=5,beam_size=4", "sampling_topk=5 samples with beam_size=1 only, not "
                                    "beam_size=4"),
    ("sampling_temperature=0", "sampling_temperature=0.0: must be above 0"),
    ("num_hypotheses=0", "num_hypotheses=0: must be at least 1"),
    ("sampling_topk=-1", "sampling_topk=-1: must be 0 (every piece) or more"),
])
def test_n_best_and_sampling_settings_that_cannot_be(overrides, message):
    with pytest.raises(HParamsError) as error:
        parse_decode_hparams(overrides)
    assert str(error.value) == f"--decode_hparams: {message}"
