import pytest

from t2t_lite import registry
from t2t_lite.hparams_lib import SUBLAYER_OPERATIONS, TIMING_SIGNALS, HParams, HParamsError
from t2t_lite.layers.sublayer import OPERATIONS
from t2t_lite.layers.timing_signal import FORMS


def test_override_parses_each_field_with_its_type():
    hparams = registry.hparams("transformer_base").override_from_string(
        "num_hidden_layers=2,learning_rate_warmup_steps=400,label_smoothing=0.2,"
        "shared_embedding_and_softmax_weights=false,timing_signal=interleaved,"
        "learning_rate_schedule=constant*linear_warmup")
    assert hparams.num_hidden_layers == 2 and isinstance(hparams.num_hidden_layers, int)
    assert hparams.learning_rate_warmup_steps == 400
    assert hparams.label_smoothing == 0.2
    assert hparams.shared_embedding_and_softmax_weights is False
    assert hparams.timing_signal == "interleaved"
    assert hparams.learning_rate_schedule == ("constant", "linear_warmup")
    assert hparams.hidden_size == 512  # untouched


def test_unknown_override_names_the_key_and_suggests_the_closest():
    with pytest.raises(HParamsError, match=r"unknown hparam 'num_hiden_layers'.*"
                                           r"Did you mean 'num_hidden_layers'"):
        HParams().override_from_string("num_hiden_layers=2")


@pytest.mark.parametrize("override, expected", [
    ("num_hidden_layers=two", r"num_hidden_layers='two': expected int"),
    ("label_smoothing=abc", r"label_smoothing='abc': expected float"),
    ("shared_embedding_and_softmax_weights=maybe", r"expected bool"),
    ("num_heads", r"expected name=value"),
])
def test_mistyped_override_names_the_key_and_the_expected_type(override, expected):
    with pytest.raises(HParamsError, match=expected):
        HParams().override_from_string(override)


@pytest.mark.parametrize("override, expected", [
    ("num_heads=7", "not divisible"),
    ("layer_postprocess_sequence=dx", "layer_postprocess_sequence"),
    ("layer_preprocess_sequence=", "layer_preprocess_sequence='': use 'none' or letters"),
    ("layer_preprocess_sequence=na", "'na': 'a' adds the residual, which exists only after"),
    ("timing_signal=rotary", "timing_signal"),
    ("length_bucketing=both", "length_bucketing=.both.: expected one of"),
    ("learning_rate_schedule=constant*cosine", "unknown factor 'cosine'"),
    ("attention_dropout=1.5", "attention_dropout"),
])
def test_invalid_values_are_rejected(override, expected):
    with pytest.raises(HParamsError, match=expected):
        HParams().override_from_string(override)


def test_the_values_allowed_are_those_the_layers_compute():
    """hparams_lib and the layers each spell them (neither imports the other)."""
    assert sorted(SUBLAYER_OPERATIONS) == sorted(OPERATIONS)
    assert sorted(TIMING_SIGNALS) == sorted(FORMS)


def test_paper_and_updated_defaults():
    v1 = registry.hparams("transformer_base_v1")
    assert (v1.hidden_size, v1.filter_size, v1.num_heads, v1.num_hidden_layers) == (512, 2048, 8, 6)
    assert (v1.layer_preprocess_sequence, v1.layer_postprocess_sequence) == ("none", "dan")
    assert (v1.optimizer_adam_beta1, v1.optimizer_adam_beta2, v1.optimizer_adam_epsilon) == (
        0.9, 0.98, 1e-9)
    assert (v1.attention_dropout, v1.relu_dropout, v1.layer_prepostprocess_dropout) == (0, 0, 0.1)
    assert v1.learning_rate_warmup_steps == 4000 and v1.batch_size == 4096
    assert v1.label_smoothing == 0.1 and v1.shared_embedding_and_softmax_weights
    base = registry.hparams("transformer_base")
    assert (base.layer_preprocess_sequence, base.layer_postprocess_sequence) == ("n", "da")
    assert (base.attention_dropout, base.relu_dropout) == (0.1, 0.1)
    assert base.optimizer_adam_beta2 == 0.997 and base.learning_rate_warmup_steps == 8000
    assert base.norm_epsilon == 1e-6 and base.learning_rate_constant == 2.0
    big = registry.hparams("transformer_big")
    assert (big.hidden_size, big.filter_size, big.num_heads) == (1024, 4096, 16)
    assert big.layer_prepostprocess_dropout == 0.3
    small = registry.hparams("transformer_small")
    assert (small.hidden_size, small.filter_size, small.num_heads, small.num_hidden_layers,
            small.max_length) == (256, 1024, 4, 3, 100)


def test_from_dict_inverts_to_dict_after_json():
    import json
    hparams = registry.hparams("transformer_base_v1").replace(num_hidden_layers=2)
    assert HParams.from_dict(json.loads(json.dumps(hparams.to_dict()))) == hparams


@pytest.mark.parametrize("values, expected", [
    ({"hidden_size": "32"}, r"^hparam hidden_size='32': expected int$"),
    ({"hidden_size": 32.0}, r"hidden_size=32.0: expected int"),
    ({"label_smoothing": True}, r"label_smoothing=True: expected float"),
    ({"shared_embedding_and_softmax_weights": 1}, r"expected bool"),
    ({"learning_rate_schedule": "constant"}, r"learning_rate_schedule='constant': expected a "
                                             r"list of names"),
    ({"learning_rate_schedule": ["constant", 2]}, r"expected a list of names"),
    ({"hidden_sise": 32}, r"unknown hparam 'hidden_sise'. Did you mean 'hidden_size'"),
])
def test_from_dict_checks_the_names_and_the_types_of_the_values(values, expected):
    """As an override does: the checks of both ways in are one (hparams.json, Keras configs)."""
    with pytest.raises(HParamsError, match=expected):
        HParams.from_dict(values)


def test_from_dict_takes_json_numbers_and_lists():
    hparams = HParams.from_dict({"label_smoothing": 0, "learning_rate_schedule": ["constant"]})
    assert hparams.label_smoothing == 0.0 and isinstance(hparams.label_smoothing, float)
    assert hparams.learning_rate_schedule == ("constant",)
    assert hparams.hidden_size == HParams().hidden_size  # a name left out takes its default


def test_what_only_training_reads_names_hparams_that_exist():
    """The trainer's changes on resume and what decoding ignores beside a record are hparams,
    the first among the second."""
    from t2t_lite.hparams_lib import OPTIMIZATION_HPARAMS, TRAINING_ONLY_HPARAMS
    fields = set(HParams().to_dict())
    assert OPTIMIZATION_HPARAMS < TRAINING_ONLY_HPARAMS <= fields
    assert not TRAINING_ONLY_HPARAMS & {"hidden_size", "num_hidden_layers", "mixed_precision",
                                        "timing_signal", "layer_preprocess_sequence"}
