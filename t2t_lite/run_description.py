"""The run description: hparams.json, what a trained model was built from.

The trainer writes it beside the checkpoints, the averager copies it beside an averaged
checkpoint and the exporter beside the SavedModel, so that the decoder and the exporter rebuild
the same model from a folder alone (t2t kept hparams.json in its output_dir for the same use):

    {"problem": "algorithmic_copy", "model": "transformer", "hparams": {HParams.to_dict()}}

Reading it checks it whole: a file that is not JSON, lacks a key, names an hparam that does not
exist or gives one a value of the wrong type is one RunDescriptionError naming the file and what
is wrong (tensor2tensor, and t2t_lite before, ended in a JSONDecodeError traceback or built a
model that did not fit the checkpoints). An hparam the file does not set takes its default: the
records of earlier versions lack the hparams added since, whose defaults keep what those
versions did.
"""
import json

import tensorflow as tf

from t2t_lite.atomic_files import atomic_write
from t2t_lite.errors import UserError
from t2t_lite.hparams_lib import HParams

HPARAMS_FILE = "hparams.json"
_NAMES = ("problem", "model")  # the keys besides "hparams"


class RunDescriptionError(UserError, ValueError):
    """An hparams.json that cannot be read as the description of a run."""


def description_path(output_dir: str) -> str:
    return tf.io.gfile.join(output_dir, HPARAMS_FILE)


def save_run_description(output_dir: str, problem_name: str, model_name: str, hparams):
    """Writes output_dir/hparams.json atomically (a complete file or none), on any
    tf.io.gfile file system."""
    description = {"problem": problem_name, "model": model_name, "hparams": hparams.to_dict()}
    with atomic_write(description_path(output_dir)) as handle:
        handle.write(json.dumps(description, indent=2))


def saved_run(output_dir: str) -> dict:
    """{"problem", "model", "hparams" (HParams)} as recorded in output_dir, or {} when there is
    no hparams.json; RunDescriptionError when there is one that cannot be read."""
    path = description_path(output_dir)
    if not tf.io.gfile.exists(path):
        return {}
    try:
        with tf.io.gfile.GFile(path) as handle:
            return _parse_description(handle.read())
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RunDescriptionError(
            f"{path} cannot be read: {_reason(error)}. It records the problem, model and hparams "
            f"of the checkpoints in {output_dir}: correct it or put back a copy (for a new run, "
            f"choose a new --output_dir)") from None


def _reason(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
    if isinstance(error, UnicodeDecodeError):
        return f"not UTF-8 text (byte {error.start})"
    return str(error)


def _parse_description(text: str) -> dict:
    """The description in `text`, or ValueError saying what is wrong with it."""
    description = json.loads(text)
    if not isinstance(description, dict):
        raise ValueError(f"it holds {type(description).__name__}, not an object with "
                         f"\"problem\", \"model\" and \"hparams\"")
    for key in (*_NAMES, "hparams"):
        if key not in description:
            raise ValueError(f"it has no {key!r}")
    for key in _NAMES:
        if not isinstance(description[key], str):
            raise ValueError(f"{key!r} is {description[key]!r}: expected a name")
    if not isinstance(description["hparams"], dict):
        raise ValueError(f"'hparams' is {description['hparams']!r}: expected an object")
    # HParams.from_dict names an unknown key or a value of the wrong type (an HParamsError is
    # a ValueError); HParams' own checks then name a value out of range.
    return {**description, "hparams": HParams.from_dict(description["hparams"])}


def differing_values(recorded: dict, problem_name: str, model_name: str, hparams) -> dict:
    """{name: (recorded value, requested value)} of the problem, the model and each hparam
    where the `recorded` description (saved_run) and the request differ."""
    requested = {"problem": problem_name, "model": model_name, **hparams.to_dict()}
    before = {key: recorded[key] for key in _NAMES} | recorded["hparams"].to_dict()
    return {name: (before[name], value) for name, value in requested.items()
            if before[name] != value}
