"""Decoding in bfloat16 (hparams.mixed_precision=bfloat16): a copy model trained in float32 is
loaded with its weights cast to bfloat16 once (restoring.load_model), its search multiplies in
bfloat16 with float32 logits, log probabilities and scores, and it translates as the float32
model does."""
import collections
import os

from keras.layers import Dense
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import checkpoints, registry
from t2t_lite.decoding import decoder
from t2t_lite.models import restoring
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.models.building import build_model

from program_runs import run_program

SEARCH = SearchHParams(beam_size=4, alpha=0.6)


@pytest.fixture(scope="module")
def trained(trained_copy_model):
    """(data_dir, output_dir, float32 hparams) of conftest's copy model trained in float32."""
    return trained_copy_model


def bfloat16(hparams):
    return hparams.override_from_string("mixed_precision=bfloat16")


def loaded(trained, hparams):
    data_dir, output_dir, _ = trained
    return restoring.load_model("transformer", hparams,
                                registry.problem("algorithmic_copy").vocab_size(data_dir),
                                output_dir)


def translator_of(trained, model, **translator_hparams):
    problem = registry.problem("algorithmic_copy")
    return decoder.Translator(model, problem.feature_encoders(trained[0]), SEARCH,
                              problem.max_length,
                              translator_hparams=decoder.TranslatorHParams(**translator_hparams))


@pytest.fixture(scope="module")
def test_lines(trained):
    with open(os.path.join(trained[0], "algorithmic_copy-test.inputs.txt")) as handle:
        lines = handle.read().splitlines()
    assert len(lines) == 100
    return lines


def test_the_float32_weights_are_cast_to_bfloat16_once_when_loaded(trained):
    """Every weight in bfloat16, the checkpoint's float32 value rounded (so no step of a search
    casts one again), but the embedding matrix, which stays float32 for float32 logits, and
    the layer norms' scales and offsets, float32 as under mixed precision (Keras never casts
    them)."""
    float32_model = loaded(trained, trained[2])
    model = loaded(trained, bfloat16(trained[2]))
    want = checkpoints.model_variables(float32_model)
    got = checkpoints.model_variables(model)
    assert got.keys() == want.keys()
    assert {path: variable.dtype for path, variable in got.items()
            if variable.dtype != "bfloat16"} == {
                path: "float32" for path in got if path.endswith(("embeddings", "gamma", "beta"))}
    assert all(variable.dtype == "float32" for variable in want.values())
    for path, variable in got.items():
        np.testing.assert_array_equal(
            tf.cast(variable, tf.float32).numpy(),
            tf.cast(tf.cast(want[path], variable.dtype), tf.float32).numpy(), err_msg=path)


def loop_body_ops(function, *args):
    """[(op type, node, its body's nodes by name) ...] of the while loops' bodies of the traced
    `function`: what runs at every step of the search."""
    graph = function.get_concrete_function(*args).graph.as_graph_def()
    return [(node.op, node, {n.name: n for n in body.node_def})
            for body in graph.library.function if "while_body" in body.signature.name
            for node in body.node_def]


def test_the_search_multiplies_in_bfloat16_and_scores_in_float32(trained):
    model = loaded(trained, bfloat16(trained[2]))
    dense = [layer for layer in model._flatten_layers() if isinstance(layer, Dense)]
    assert dense and all(layer.compute_dtype == "bfloat16" for layer in dense)
    inputs = tf.constant([[3, 4, 5, 1], [6, 1, 0, 0]])
    encoder_output, inputs_padding = model.encode(inputs)
    assert encoder_output.dtype == tf.bfloat16
    cache = model.initial_cache(encoder_output, inputs_padding, 8)  # keys and values: bfloat16
    keys_and_values = tf.nest.flatten((cache.self_attention, cache.memory))
    assert {tensor.dtype for tensor in keys_and_values} == {tf.bfloat16}
    logits, _ = model.decode_step(tf.zeros([2], tf.int32), 0, cache)
    assert logits.dtype == tf.float32
    # The pre-softmax projection, called from outside the model as decode_step calls it:
    # float32 products of the float32 matrix, to float32 rounding (1e-5); the matrix rounded
    # to bfloat16 would be off by up to 2^-9 = 2e-3 of a logit.
    hidden = tf.cast(tf.random.stateless_normal([5, 32], [1, 2]), tf.bfloat16)
    np.testing.assert_allclose(
        model.softmax_embedding(hidden, reverse=True).numpy(),
        tf.matmul(tf.cast(hidden, tf.float32), model.softmax_weights, transpose_b=True).numpy(),
        rtol=1e-5, atol=1e-6)

    translator = translator_of(trained, model)
    ops = loop_body_ops(translator.engine._searches[False],
                        tf.TensorSpec([None, None], tf.int32))
    dtypes = collections.Counter((op, tf.as_dtype(node.attr["T"].type).name)
                                 for op, node, _ in ops if op in ("MatMul", "LogSoftmax"))
    # A step's products: per decoder layer the self-attention's q, k, v and output, the
    # encoder-decoder attention's q and output, the feed-forward network's two: bfloat16; the
    # pre-softmax projection and the log-softmax: float32.
    assert dtypes == {("MatMul", "bfloat16"): 8 * len(model.decoder_stack),
                      ("MatMul", "float32"): 1, ("LogSoftmax", "float32"): 1}
    # No weight is cast at a step: each was cast once, when loaded, or is used as it is.
    weight_casts = [node.name for op, node, body in ops if op == "Cast"
                    and body.get(node.input[0].split(":")[0], node).op == "ReadVariableOp"]
    assert weight_casts == []


def test_bfloat16_translates_as_float32_on_most_sentences(trained, test_lines):
    """bfloat16 keeps 8 significant bits: each product is off by up to 2^-9 of its size, so a
    step's log probabilities move by up to some hundredths and only a choice between two tokens
    that close can change. The trained copy model is far from such ties (it copies the held-out
    sequences), so at least 95 of the 100 sentences must get float32's translation, with its
    score to 0.05 (a sentence's score sums its tokens' log probabilities); we see all 100,
    their scores within 0.002."""
    float32 = translator_of(trained, loaded(trained, trained[2]))
    bfloat16_translator = translator_of(trained, loaded(trained, bfloat16(trained[2])))
    want, want_scores = float32.translate_with_scores(test_lines, show_progress=False)
    got, got_scores = bfloat16_translator.translate_with_scores(test_lines, show_progress=False)
    same = [i for i in range(len(test_lines)) if got[i] == want[i]]
    assert len(same) >= 95
    np.testing.assert_allclose([got_scores[i] for i in same], [want_scores[i] for i in same],
                               atol=0.05)
    assert sum(out == line for out, line in zip(got, test_lines)) >= 90  # trained weights


def test_weights_cast_at_load_translate_as_weights_cast_at_each_use(trained, test_lines):
    """The model as the trainer builds it (float32 weights that Keras casts to bfloat16 where
    a layer uses them: what BLEU during training decodes with) and the one the decoder loads
    (weights cast once) compute the same values: the same translations and scores."""
    hparams = bfloat16(trained[2])
    at_each_use = build_model("transformer", hparams, loaded(trained, hparams).vocab_size)
    checkpoints.restore(checkpoints.resolve(trained[1]), at_each_use)
    assert all(weight.dtype == "float32" for weight in at_each_use.weights)
    lines = test_lines[:40]
    want = translator_of(trained, at_each_use).translate_with_scores(lines, show_progress=False)
    got = translator_of(trained, loaded(trained, hparams)).translate_with_scores(
        lines, show_progress=False)
    assert got == want


def test_the_xla_compiled_bfloat16_search_translates_as_without_xla(trained, test_lines):
    """jit_compile: the fixed-size bfloat16 caches written with masks (the export's XLA search
    too)."""
    model = loaded(trained, bfloat16(trained[2]))
    lines = test_lines[:8]
    want = translator_of(trained, model).translate(lines, show_progress=False)
    assert translator_of(trained, model, batch_size=8, jit_compile=True).translate(
        lines, show_progress=False) == want


def test_the_decoder_program_decodes_in_bfloat16_when_asked(trained, tmp_path, test_lines):
    """t2t_lite-decoder --hparams=mixed_precision=bfloat16 over the float32 run's hparams.json:
    the weights are cast to bfloat16 (logged), and the copy model still copies."""
    data_dir, output_dir, _ = trained
    source = os.path.join(data_dir, "algorithmic_copy-test.inputs.txt")
    target = str(tmp_path / "out.txt")
    result = run_program("decoder", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                         f"--decode_from_file={source}", f"--decode_to_file={target}",
                         "--hparams=mixed_precision=bfloat16")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "its weights cast to bfloat16" in result.stderr
    with open(target) as handle:
        outputs = handle.read().splitlines()
    assert sum(out == line for out, line in zip(outputs, test_lines)) >= 90
