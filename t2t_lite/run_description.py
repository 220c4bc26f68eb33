"""The run description: hparams.json, what a trained model was built from.

The trainer writes it beside the checkpoints, the averager copies it beside an averaged
checkpoint and the exporter beside the SavedModel, so that the decoder and the exporter rebuild
the same model from a folder alone (t2t kept hparams.json in its output_dir for the same use):

    {"problem": "algorithmic_copy", "model": "transformer", "hparams": {HParams.to_dict()}}
"""
import json

import tensorflow as tf

from t2t_lite.atomic_files import atomic_write
from t2t_lite.hparams_lib import HParams

HPARAMS_FILE = "hparams.json"


def save_run_description(output_dir: str, problem_name: str, model_name: str, hparams):
    """Writes output_dir/hparams.json atomically (a complete file or none), on any
    tf.io.gfile file system."""
    description = {"problem": problem_name, "model": model_name, "hparams": hparams.to_dict()}
    with atomic_write(tf.io.gfile.join(output_dir, HPARAMS_FILE)) as handle:
        handle.write(json.dumps(description, indent=2))


def saved_run(output_dir: str) -> dict:
    """{"problem", "model", "hparams" (HParams)} as recorded in output_dir, or {} when there is
    no hparams.json."""
    path = tf.io.gfile.join(output_dir, HPARAMS_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as handle:
        description = json.loads(handle.read())
    description["hparams"] = HParams.from_dict(description["hparams"])
    return description
