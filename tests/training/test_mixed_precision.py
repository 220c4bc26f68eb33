"""mixed_precision=bfloat16|float16: layers compute in half precision, weights, logits and the
loss stay float32, float16 gets dynamic loss scaling; a few steps train with finite losses."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.training import trainer


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_half_precision_training_steps(precision):
    hparams = registry.hparams("transformer_tiny").override_from_string(
        f"hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1,"
        f"learning_rate_warmup_steps=5,mixed_precision={precision}")
    model = trainer.build_model("transformer", hparams, 12)
    assert keras.config.dtype_policy().name == "float32"  # the global policy is restored
    assert all(weight.dtype == "float32" for weight in model.weights)
    ids = tf.constant(np.random.default_rng(0).integers(2, 12, size=(8, 6)), tf.int32)
    features = {"inputs": ids, "targets": ids}
    assert model(features).dtype == tf.float32
    optimizer = trainer.make_optimizer(hparams)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer) == (precision == "float16")
    training = trainer.TrainingModel(model, hparams, jit_compile=True)
    training.compile(optimizer=optimizer, jit_compile=False)
    data = tf.data.Dataset.from_tensors(features).repeat()
    history = training.fit(data, epochs=3, steps_per_epoch=4, verbose=0, shuffle=False)
    losses = history.history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
