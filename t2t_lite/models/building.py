"""A registered model, built: the one way the trainer, the decoder, the exporter and the tests
make a model from (model name, hparams, vocabulary size)."""
import keras
import tensorflow as tf

from t2t_lite import registry


def build_model(model_name: str, hparams, vocab_size: int):
    """The registered model with its variables created (by a call on a tiny batch), its layers
    computing in hparams.mixed_precision with float32 weights."""
    previous_policy = keras.config.dtype_policy()
    if hparams.mixed_precision != "float32":
        keras.config.set_dtype_policy(f"mixed_{hparams.mixed_precision}")
    try:
        model = registry.model(model_name)(hparams, vocab_size)
        tokens = tf.ones([1, 2], tf.int32)
        model({"inputs": tokens, "targets": tokens}, training=False)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    return model
