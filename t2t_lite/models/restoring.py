"""A trained model restored from its checkpoint for inference: the one way the decoder, the
exporters and the benchmarks get the model that translates."""
import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints
from t2t_lite.models.building import build_model


def load_model(model_name: str, hparams, vocab_size: int, output_dir: str,
               checkpoint_path: str = None):
    """Builds the model for inference and restores `checkpoint_path` (default: the latest in
    output_dir). With hparams.mixed_precision bfloat16 or float16 it computes in that dtype
    with its weights in it too (build_model's for_inference), the checkpoint's float32 values
    cast once here, whether the model was trained so or in float32 (decoding a float32 model
    in bfloat16 is hparams.mixed_precision=bfloat16 over its recorded hparams)."""
    checkpoint_path = checkpoints.resolve(output_dir, checkpoint_path)
    model = build_model(model_name, hparams, vocab_size, for_inference=True)
    if hparams.compute_dtype == "float32":
        checkpoints.restore(checkpoint_path, model)
        logging.info("restored %s", checkpoint_path)
    else:
        _restore_cast(checkpoint_path, model)
        logging.info("restored %s, its weights cast to %s", checkpoint_path,
                     hparams.compute_dtype)
    return model


def _restore_cast(checkpoint_path: str, model):
    """checkpoints.restore into variables of another dtype than the checkpoint's (TensorFlow
    restores a variable only in the dtype it was saved in): each stored value is read and
    cast."""
    checkpoints.check_compatible(checkpoint_path, model)
    stored = checkpoints.reader(checkpoint_path)
    for path, variable in checkpoints.model_variables(model).items():
        value = stored.get_tensor(checkpoints.checkpoint_key(path))
        variable.assign(tf.cast(value, variable.dtype))
