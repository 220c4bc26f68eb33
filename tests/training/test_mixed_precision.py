"""mixed_precision=bfloat16|float16: layers compute in half precision, weights, logits and the
loss stay float32, float16 gets dynamic loss scaling; a few steps train with finite losses."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
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
