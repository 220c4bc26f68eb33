"""A training step takes its weight gradients through the BLAS op on a CPU without XLA, and
updates the weights as it does with TensorFlow's kernels; under XLA it does without the op."""
import keras
import numpy as np
import tensorflow as tf

from t2t_lite import checkpoints, registry
from t2t_lite.models.building import build_model
from t2t_lite.training import trainer
from t2t_lite.training.step import TrainingSteps

VOCAB = 12
HPARAMS = ("hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1,"
           "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0")


def one_step(jit_compile=False, blas_weight_gradients=True):
    """(the op types of the traced gradient function, the gradients of one batch, every weight
    after one update on it)."""
    hparams = registry.hparams("transformer_tiny").override_from_string(HPARAMS)
    keras.utils.set_random_seed(3)
    model = build_model("transformer", hparams, VOCAB)
    steps = TrainingSteps(model, trainer.make_optimizer(hparams), hparams,
                          jit_compile=jit_compile, blas_weight_gradients=blas_weight_gradients)
    rng = np.random.default_rng(0)
    targets = rng.integers(2, VOCAB, size=(4, 7)).astype(np.int32)
    targets[1, 4:] = 0
    batch = {"inputs": tf.constant(rng.integers(2, VOCAB, size=(4, 6)).astype(np.int32)),
             "targets": tf.constant(targets)}
    tokens = tf.reduce_sum(tf.cast(batch["targets"] > 0, tf.float32))
    _, gradients = steps.replica_gradients(batch, tokens)
    steps.train_step(batch)
    graph = steps.replica_gradients.get_concrete_function(batch, tokens).graph
    types = {op.type for op in graph.get_operations()}
    return (types, [tf.convert_to_tensor(gradient).numpy() for gradient in gradients],
            {path: v.numpy() for path, v in checkpoints.model_variables(model).items()})


def test_same_gradients_and_update_with_and_without_the_blas_op(blas_op):
    blas_types, blas_gradients, with_blas = one_step()
    tf_types, tf_gradients, without = one_step(blas_weight_gradients=False)
    assert "T2tLiteBlasMatMul" in blas_types and "T2tLiteBlasMatMul" not in tf_types
    for got, want in zip(blas_gradients, tf_gradients):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert with_blas.keys() == without.keys()
    for path in with_blas:
        np.testing.assert_allclose(with_blas[path], without[path], rtol=1e-5, atol=1e-6,
                                   err_msg=path)


def test_xla_steps_do_without_the_op():
    types, _, _ = one_step(jit_compile=True)
    assert "T2tLiteBlasMatMul" not in types
