"""The run description: hparams.json, what a trained model was built from.

The trainer writes it beside the checkpoints, the averager copies it beside an averaged
checkpoint and the exporter beside the SavedModel, so that the decoder and the exporter rebuild
the same model from a folder alone (t2t kept hparams.json in its output_dir for the same use):

    {"problem": "algorithmic_copy", "model": "transformer", "hparams": {HParams.to_dict()}}
"""
import json
import os

from t2t_lite.hparams_lib import HParams

HPARAMS_FILE = "hparams.json"


def save_run_description(output_dir: str, problem_name: str, model_name: str, hparams):
    """Writes output_dir/hparams.json atomically (a complete file or none)."""
    description = {"problem": problem_name, "model": model_name, "hparams": hparams.to_dict()}
    path = os.path.join(output_dir, HPARAMS_FILE)
    with open(path + ".tmp", "w") as handle:
        json.dump(description, handle, indent=2)
    os.replace(path + ".tmp", path)


def saved_run(output_dir: str) -> dict:
    """{"problem", "model", "hparams" (HParams)} as recorded in output_dir, or {} when there is
    no hparams.json."""
    path = os.path.join(output_dir, HPARAMS_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        description = json.load(handle)
    description["hparams"] = HParams.from_dict(description["hparams"])
    return description
