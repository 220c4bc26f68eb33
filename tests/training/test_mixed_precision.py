"""mixed_precision=bfloat16|float16: layers compute in half precision, weights, logits and the
loss stay float32, float16 gets dynamic loss scaling; a few steps train with finite losses, and
a bfloat16 step computes where it should and loses as float32's does."""
import collections

import keras
from keras.layers import Dense
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import checkpoints, registry
from t2t_lite.models.building import build_model
from t2t_lite.training import trainer
from t2t_lite.training.step import TrainingSteps


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_half_precision_training_steps(precision):
    hparams = registry.hparams("transformer_tiny").override_from_string(
        f"hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1,"
        f"learning_rate_warmup_steps=5,mixed_precision={precision}")
    model = build_model("transformer", hparams, 12)
    assert keras.config.dtype_policy().name == "float32"  # the global policy is restored
    assert all(weight.dtype == "float32" for weight in model.weights)
    ids = tf.constant(np.random.default_rng(0).integers(2, 12, size=(8, 6)), tf.int32)
    features = {"inputs": ids, "targets": ids}
    assert model(features).dtype == tf.float32
    optimizer = trainer.make_optimizer(hparams)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer) == (precision == "float16")
    steps = TrainingSteps(model, optimizer, hparams, jit_compile=True)
    losses = []
    for _ in range(12):
        counts = steps.train_step(features)
        losses.append(float(counts["loss_sum"] / counts["target_tokens"]))
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


HPARAMS = ("hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1,"
           "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0")
VOCAB = 12


def steps_of(precision, jit_compile, weights=None):
    """TrainingSteps of a tiny model computing in `precision`, with the weights of `weights`
    (a model, matched by Keras path) or seeded ones."""
    hparams = registry.hparams("transformer_tiny").override_from_string(
        f"{HPARAMS},mixed_precision={precision}")
    keras.utils.set_random_seed(3)
    model = build_model("transformer", hparams, VOCAB)
    if weights is not None:
        source = checkpoints.model_variables(weights)
        for path, variable in checkpoints.model_variables(model).items():
            variable.assign(source[path])
    return TrainingSteps(model, trainer.make_optimizer(hparams), hparams,
                         jit_compile=jit_compile)


def batch():
    """(features, their real target tokens): 8 sentences, one with padding."""
    rng = np.random.default_rng(0)
    targets = rng.integers(2, VOCAB, size=(8, 7)).astype(np.int32)
    targets[1, 4:] = 0
    features = {"inputs": tf.constant(rng.integers(2, VOCAB, size=(8, 6)).astype(np.int32)),
                "targets": tf.constant(targets)}
    return features, tf.reduce_sum(tf.cast(features["targets"] > 0, tf.float32))


def op_dtypes(function, *args) -> collections.Counter:
    """Counter of (op type, dtype) of the traced `function`'s ops, those of the functions it
    calls (the output layer's loop) included."""
    graph = function.get_concrete_function(*args).graph.as_graph_def()
    nodes = list(graph.node) + [node for body in graph.library.function
                                for node in body.node_def]
    return collections.Counter(
        (node.op, tf.as_dtype(node.attr["T"].type).name)
        for node in nodes if "T" in node.attr and node.attr["T"].type)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_a_bfloat16_step_multiplies_in_bfloat16_and_keeps_float32_where_it_matters(jit_compile):
    """Master weights, their gradients and the loss in float32; every dense projection in
    bfloat16 (forward, input and kernel gradients: 3 products each); layer norm (Rsqrt), the
    attention softmax and the output layer's log-sum-exp (Exp, Log) in float32."""
    steps = steps_of("bfloat16", jit_compile)
    model = steps.model
    features, tokens = batch()
    counts, gradients = steps.replica_gradients(features, tokens)
    assert counts["loss_sum"].dtype == tf.float32
    assert all(weight.dtype == "float32" for weight in model.weights)
    assert all(tf.convert_to_tensor(gradient).dtype == tf.float32 for gradient in gradients)
    dense = [layer for layer in model._flatten_layers() if isinstance(layer, Dense)]
    assert len(dense) == 16 and {layer.compute_dtype for layer in dense} == {"bfloat16"}
    assert model.decoder_output(features).dtype == tf.bfloat16
    ops = op_dtypes(steps.replica_gradients, features, tokens)
    assert ops[("MatMul", "bfloat16")] == 3 * len(dense)
    for op in ("Softmax", "Exp", "Log", "Rsqrt"):
        assert {dtype for (kind, dtype) in ops if kind == op} == {"float32"}, op


@pytest.mark.parametrize("jit_compile", [True, False])
def test_a_bfloat16_step_loses_and_descends_as_float32_does(jit_compile):
    """The same batch and weights in float32 and bfloat16. bfloat16 keeps 8 significant bits,
    so each product and activation is off by up to 2^-9 = 0.2% of its size; the loss, a mean
    in float32 of float32 log-sum-exps over 53 tokens, averages those errors of either sign:
    it must be within 1% of float32's (we see 0.03% at most). A gradient entry sums many rounded
    products and can be off by a few percent (the whole vector by 2.3% in L2), but its
    direction, what the update follows, must stay within cos = 0.99 (we see 0.9997)."""
    float32 = steps_of("float32", jit_compile)
    half = steps_of("bfloat16", jit_compile, weights=float32.model)
    features, tokens = batch()
    (want, want_gradients), (got, got_gradients) = (
        steps.replica_gradients(features, tokens) for steps in (float32, half))
    np.testing.assert_allclose(float(got["loss_sum"]), float(want["loss_sum"]), rtol=1e-2)
    want_vector, got_vector = (
        np.concatenate([tf.reshape(tf.convert_to_tensor(g), [-1]).numpy() for g in gradients])
        for gradients in (want_gradients, got_gradients))
    cosine = want_vector @ got_vector / np.linalg.norm(want_vector) / np.linalg.norm(got_vector)
    assert cosine > 0.99


def test_the_softmax_matrix_stays_float32_outside_the_models_call():
    """The training loss (decoder_output) and the decoding steps (decode_step) call the
    embedding from outside the model's own call, where Keras would cast a mixed layer's
    variables to bfloat16 even with autocast off: the lookups are the float32 rows scaled in
    float32 (then rounded once), the logits float32 products of the float32 matrix."""
    model = steps_of("bfloat16", jit_compile=False).model
    weights = tf.convert_to_tensor(model.softmax_weights)
    assert weights.dtype == tf.float32
    ids = tf.constant([[3, 7, 0]])
    np.testing.assert_array_equal(
        tf.cast(model.target_embedding(ids), tf.float32).numpy(),
        tf.cast(tf.cast(tf.gather(weights, ids) * 16**0.5 * [[[1.0], [1.0], [0.0]]],
                        tf.bfloat16), tf.float32).numpy())
    hidden = tf.cast(tf.random.stateless_normal([5, 16], [1, 2]), tf.bfloat16)
    np.testing.assert_allclose(  # to float32 rounding; a bfloat16 matrix: 2^-9 off
        model.softmax_embedding(hidden, reverse=True).numpy(),
        tf.matmul(tf.cast(hidden, tf.float32), weights, transpose_b=True).numpy(),
        rtol=1e-5, atol=1e-6)
