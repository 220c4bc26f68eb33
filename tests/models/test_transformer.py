"""The Transformer model (§3): causality, padding invariance, encode/decode, config, XLA."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.models.transformer import (DecoderLayer, EncoderLayer, Transformer,
                                         shift_right)

VOCAB = 23
# (layer_preprocess_sequence, layer_postprocess_sequence): transformer_base_v1 is post-norm,
# transformer_base pre-norm.
SUBLAYER_STYLES = {"base_v1": "transformer_base_v1", "base": "transformer_base"}


def tiny_hparams(style="base", **changes):
    tiny = dict(hidden_size=16, filter_size=32, num_heads=2, num_hidden_layers=2,
                layer_prepostprocess_dropout=0.1, attention_dropout=0.1, relu_dropout=0.1)
    return registry.hparams(SUBLAYER_STYLES[style]).replace(**{**tiny, **changes})


def features(inputs, targets):
    return {"inputs": tf.constant(inputs, tf.int64), "targets": tf.constant(targets, tf.int64)}


INPUTS = [[5, 8, 3, 9, 1], [7, 4, 1, 0, 0]]
TARGETS = [[6, 2, 9, 4, 11, 1], [3, 12, 1, 0, 0, 0]]


_MODELS = {}


def tiny_model(style):
    """One built model per sublayer style, shared by the tests (eager Keras calls are slow)."""
    if style not in _MODELS:
        _MODELS[style] = Transformer(tiny_hparams(style), VOCAB)
        _MODELS[style](features(INPUTS, TARGETS))
    return _MODELS[style]


@pytest.fixture
def model():
    return tiny_model("base")


both_styles = pytest.mark.parametrize("style", sorted(SUBLAYER_STYLES))


def test_registered_and_logits_shape(model):
    assert registry.model("transformer") is Transformer
    logits = model(features(INPUTS, TARGETS))
    assert logits.dtype == tf.float32 and tuple(logits.shape) == (2, 6, VOCAB)


def test_shift_right_puts_pad_first():
    np.testing.assert_array_equal(shift_right(tf.constant([[4, 5, 1]])), [[0, 4, 5]])


@both_styles
def test_decoder_is_causal(style):
    model = tiny_model(style)
    changed = [row[:3] + [13, 14, 15] for row in TARGETS]
    before = model(features(INPUTS, TARGETS)).numpy()
    after = model(features(INPUTS, changed)).numpy()
    # Position i sees targets[:i]: changing targets[3:] leaves logits[:, :4] untouched.
    np.testing.assert_allclose(after[:, :4], before[:, :4], atol=1e-5)
    assert not np.allclose(after[:, 4:], before[:, 4:], atol=1e-3)


@both_styles
def test_appending_source_padding_changes_nothing(style):
    model = tiny_model(style)
    padded = [row + [0, 0, 0] for row in INPUTS]
    np.testing.assert_allclose(model(features(padded, TARGETS)),
                               model(features(INPUTS, TARGETS)), atol=1e-5)


def test_encode_then_decode_equals_call(model):
    encoder_output, inputs_padding = model.encode(tf.constant(INPUTS))
    assert tuple(encoder_output.shape) == (2, 5, 16)
    np.testing.assert_array_equal(inputs_padding, np.array(INPUTS) == 0)
    logits = model.decode(shift_right(tf.constant(TARGETS)), encoder_output, inputs_padding)
    np.testing.assert_allclose(logits, model(features(INPUTS, TARGETS)), atol=1e-6)


def test_dropout_only_in_training(model):
    batch = features(INPUTS, TARGETS)
    np.testing.assert_allclose(model(batch), model(batch, training=False))
    assert not np.allclose(model(batch, training=True), model(batch), atol=1e-4)


@both_styles
def test_final_layer_norm_only_for_pre_norm(style):
    model = tiny_model(style)
    hparams = model.hparams
    sequences = (hparams.layer_preprocess_sequence, hparams.layer_postprocess_sequence)
    assert sequences == {"base_v1": ("none", "dan"), "base": ("n", "da")}[style]
    # Pre-norm ends each stack with a layer norm (scale and bias); post-norm adds nothing.
    expected = {"base_v1": 0, "base": 2}[style]
    assert len(model.encoder_final.weights) == len(model.decoder_final.weights) == expected


def test_config_round_trip(model):
    config = model.get_config()
    clone = Transformer.from_config(config)
    assert clone.hparams == model.hparams and clone.vocab_size == VOCAB
    batch = features(INPUTS, TARGETS)
    clone(batch)
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(clone(batch), model(batch), atol=1e-6)
    # A JSON round trip turns tuples into lists; from_config restores them.
    config["hparams"]["learning_rate_schedule"] = list(config["hparams"]["learning_rate_schedule"])
    assert Transformer.from_config(config).hparams == model.hparams


def test_layers_take_the_hparams_as_arguments_and_round_trip_their_config(model):
    encoder_layer, decoder_layer = model.encoder_stack[0], model.decoder_stack[0]
    config = encoder_layer.get_config()
    assert {name: config[name] for name in (
        "filter_size", "num_heads", "dropout", "attention_dropout", "relu_dropout",
        "preprocess", "postprocess", "epsilon", "initializer_gain")} == {
        "filter_size": 32, "num_heads": 2, "dropout": 0.1, "attention_dropout": 0.1,
        "relu_dropout": 0.1, "preprocess": "n", "postprocess": "da", "epsilon": 1e-6,
        "initializer_gain": 1.0}
    x = tf.random.stateless_normal([2, 5, 16], seed=[1, 2])
    memory = tf.random.stateless_normal([2, 4, 16], seed=[3, 4])
    for layer, cls, inputs in ((encoder_layer, EncoderLayer, (x,)),
                               (decoder_layer, DecoderLayer, (x, memory))):
        clone = cls.from_config(layer.get_config())
        clone(*inputs)
        clone.set_weights(layer.get_weights())
        np.testing.assert_allclose(clone(*inputs), layer(*inputs), atol=1e-6)


def test_variable_paths_are_the_checkpoint_keys(model):
    # Checkpoints are saved by variable path (training/, serving/): these names must not change.
    # (The model's own name leads each path: "transformer", or "transformer_1" when another
    # model was built first in this process.)
    paths = {variable.path.removeprefix(model.name + "/") for variable in model.weights}
    assert {"shared_embedding/embeddings",
            "encoder_layer_0/self_attention/query/kernel",
            "encoder_layer_1/feed_forward/filter/kernel",
            "encoder_layer_1/self_attention_connection/pre/norm_0/gamma",
            "decoder_layer_1/encoder_decoder_attention/output/kernel",
            "decoder_layer_0/encoder_decoder_connection/pre/norm_0/beta",
            "decoder_layer_0/feed_forward/output/bias",
            "encoder_final/norm_0/gamma", "decoder_final/norm_0/beta"} <= paths
    assert len(paths) == len(model.weights)


def test_runs_under_xla_with_dynamic_shapes():
    # One small model and one compilation: XLA takes seconds per compilation on a CPU (dropout
    # under XLA is checked on the attention layer, in tests/layers/test_attention.py).
    model = Transformer(tiny_hparams("base", num_hidden_layers=1), VOCAB)
    signature = {"inputs": tf.TensorSpec([None, None], tf.int64),
                 "targets": tf.TensorSpec([None, None], tf.int64)}
    compiled = tf.function(lambda batch: model(batch), jit_compile=True,
                           input_signature=[signature])
    batch = features(INPUTS, TARGETS)
    np.testing.assert_allclose(compiled(batch), model(batch), atol=1e-5)


def test_attention_weights_for_pictures(model):
    scores = model.attention_weights(features(INPUTS, TARGETS))
    assert len(scores["encoder"]) == len(scores["decoder"]) == 2
    assert tuple(scores["encoder"][0]["self_attention"].shape) == (2, 2, 5, 5)
    assert tuple(scores["decoder"][1]["self_attention"].shape) == (2, 2, 6, 6)
    cross = scores["decoder"][1]["encoder_decoder"].numpy()
    assert cross.shape == (2, 2, 6, 5) and np.all(cross[1, :, :, 3:] < 1e-9)


def test_shared_embedding_is_one_variable_everywhere(model):
    embeddings = [v for v in model.weights if "embedding" in v.path]
    assert len(embeddings) == 1
    assert model.source_embedding is model.target_embedding is model.softmax_embedding


def test_unshared_embeddings_and_paper_timing_signal():
    hparams = tiny_hparams("base_v1", shared_embedding_and_softmax_weights=False,
                           timing_signal="interleaved", num_encoder_layers=1,
                           num_decoder_layers=2)
    model = Transformer(hparams, VOCAB)
    model(features(INPUTS, TARGETS))
    assert len([v for v in model.weights if "embedding" in v.path]) == 3
    assert (len(model.encoder_stack), len(model.decoder_stack)) == (1, 2)
    assert model.add_timing_signal.form == "interleaved"
