"""A registered model, built: the one way the trainer, the decoder, the exporter and the tests
make a model from (model name, hparams, vocabulary size)."""
import keras
import tensorflow as tf

from t2t_lite import registry


def build_model(model_name: str, hparams, vocab_size: int, for_inference: bool = False):
    """The registered model with its variables created (by a call on a tiny batch), its layers
    computing in hparams.compute_dtype (mixed_precision; "auto" is float32).

    For training the weights are float32 (Keras' "mixed_bfloat16" / "mixed_float16" policy:
    float32 master weights, cast where a layer uses them). `for_inference` (the decoder, the
    exporter) keeps them in the compute dtype itself (Keras' "bfloat16" / "float16" policy, as
    keras-hub loads a model for inference with dtype="bfloat16"): a checkpoint's float32
    values are then cast once, when they are restored (models.restoring.load_model), rather
    than at every use, which in a search is at every step. The values computed are the same:
    either way the embedding matrix (float32 logits: layers.embedding) and the layer norms'
    scales and offsets (which Keras never casts: layers.sublayer) stay float32."""
    policy = "float32"
    if hparams.compute_dtype != "float32":
        policy = f"{'' if for_inference else 'mixed_'}{hparams.compute_dtype}"
    # Named, not auto-named: the optimizer's slots are named after the model's path
    # ("adam/transformer_..."), which a second model built in one process would change.
    model = registry.model(model_name)(hparams, vocab_size, name=model_name,
                                       dtype=keras.DTypePolicy(policy))
    tokens = tf.ones([1, 2], tf.int32)
    model({"inputs": tokens, "targets": tokens}, training=False)
    return model
