"""What t2t_lite.load builds on, without a trained model: decode settings given as keywords go
through --decode_hparams' one parser, and open_run takes a run's record as the decoder does."""
import pytest

from t2t_lite.decoding.decoder import parse_decode_hparams
from t2t_lite.decoding.trained_model import decode_hparams, open_run
from t2t_lite.errors import FlagError
from t2t_lite.hparams_lib import HParamsError


def test_keywords_are_the_decode_hparams_of_the_same_names():
    assert decode_hparams({"beam_size": 2, "alpha": 0.7, "num_hypotheses": 2,
                           "alignments": True, "batch_size": 8}) == parse_decode_hparams(
        "beam_size=2,alpha=0.7,num_hypotheses=2,alignments=true,batch_size=8")
    assert decode_hparams({}) == parse_decode_hparams("")


@pytest.mark.parametrize("settings, message", [
    ({"beam_sise": 2}, "beam_sise"), ({"beam_size": "four"}, "beam_size='four'"),
    ({"beam_size": [1, 2]}, "expected a number or a word"), ({"beam_size": 0}, "at least 1")])
def test_a_bad_keyword_is_one_error_naming_it(settings, message):
    with pytest.raises(HParamsError, match=message):
        decode_hparams(settings)


def test_a_run_opens_as_recorded_and_only_its_precision_may_change(tmp_path):
    from t2t_lite import registry
    from t2t_lite.storage.run_description import save_run_description
    hparams = registry.hparams("transformer_tiny")
    save_run_description(str(tmp_path), "algorithmic_copy", "transformer", hparams,
                         {"data_dir": "/D", "vocab_size": 12, "files": []})
    run = open_run(str(tmp_path), hparams={"mixed_precision": "float32"})
    assert (run.problem_name, run.model_name, run.data_dir) == ("algorithmic_copy",
                                                                "transformer", "/D")
    assert run.hparams == hparams.replace(mixed_precision="float32")
    with pytest.raises(FlagError, match="num_hidden_layers: 2 in .*, 5 requested"):
        open_run(str(tmp_path), hparams="num_hidden_layers=5")
    with pytest.raises(FlagError, match="--problem is required"):
        open_run(str(tmp_path / "no_record"))
