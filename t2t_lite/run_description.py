"""The run description: hparams.json, what a trained model was built from.

The trainer writes it beside the checkpoints, the averager copies it beside an averaged
checkpoint and the exporter beside the SavedModel, so that the decoder and the exporter rebuild
the same model from a folder alone (t2t kept hparams.json in its output_dir for the same use):

    {"problem": "algorithmic_copy", "model": "transformer", "hparams": {HParams.to_dict()},
     "changes": [{"step": 2000, "hparams": {"learning_rate_constant": 1.0}}]}

"hparams" are those the run began with. A resumed run may change some (the trainer's
CHANGEABLE_ON_RESUME: the learning rate, dropout, ...); the record is then kept as it was and
what changed is appended to "changes", with the step of the checkpoint it resumed from (the
updates after it used the new values), so that the record still says what every part of the
run trained with (`record_training`; tensor2tensor, and t2t_lite before, overwrote the file).
The hparams a reader gets are the last ones: "hparams" with every change applied in order. A
run that never changed anything has no "changes".

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
    """{"problem", "model", "hparams" (HParams, every change applied), and "changes" as
    recorded if any} of the run recorded in output_dir, or {} when there is no hparams.json;
    RunDescriptionError when there is one that cannot be read."""
    return _load(output_dir)[1]


def _load(output_dir: str) -> tuple:
    """(the JSON object in output_dir's hparams.json, saved_run's dict), ({}, {}) without one."""
    path = description_path(output_dir)
    if not tf.io.gfile.exists(path):
        return {}, {}
    try:
        with tf.io.gfile.GFile(path) as handle:
            description = json.loads(handle.read())
        return description, _parse_description(description)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RunDescriptionError(
            f"{path} cannot be read: {_reason(error)}. It records the problem, model and hparams "
            f"of the checkpoints in {output_dir}: correct it or put back a copy (for a new run, "
            f"choose a new --output_dir)") from None


def record_training(output_dir: str, problem_name: str, model_name: str, hparams, step: int):
    """Records in output_dir/hparams.json that training goes on from `step` with `hparams`:
    a new record when there is none or no step has been trained yet (step 0); else the record
    kept, with the hparams that differ from its last ones appended to its "changes" as
    {"step": step, "hparams": {name: new value}} (nothing written when none differ). The
    problem and the model must be the recorded ones (the trainer's resumable_hparams)."""
    description, recorded = _load(output_dir)
    if not recorded or step == 0:
        save_run_description(output_dir, problem_name, model_name, hparams)
        return
    changed = differing_values(recorded, problem_name, model_name, hparams)
    if set(changed) & set(_NAMES):
        raise ValueError(f"{description_path(output_dir)} records another run: "
                         f"{sorted(set(changed) & set(_NAMES))} differ")
    if changed:
        change = {"step": step, "hparams": {name: after for name, (_, after) in changed.items()}}
        description = {**description, "changes": [*description.get("changes", []), change]}
        with atomic_write(description_path(output_dir)) as handle:
            handle.write(json.dumps(description, indent=2))


def _reason(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
    if isinstance(error, UnicodeDecodeError):
        return f"not UTF-8 text (byte {error.start})"
    return str(error)


def _parse_description(description) -> dict:
    """saved_run's dict of the JSON object `description`, or ValueError saying what is wrong
    with it."""
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
    hparams = description["hparams"]
    changes = description.get("changes", [])
    if not isinstance(changes, list):
        raise ValueError(f"'changes' is {changes!r}: expected a list")
    for change in changes:
        if not (isinstance(change, dict) and isinstance(change.get("step"), int)
                and isinstance(change.get("hparams"), dict)):
            raise ValueError(f"the change {change!r} is not an object with a \"step\" number "
                             f"and \"hparams\"")
        hparams = {**hparams, **change["hparams"]}
    # HParams.from_dict names an unknown key or a value of the wrong type (an HParamsError is
    # a ValueError); HParams' own checks then name a value out of range.
    return {**description, "hparams": HParams.from_dict(hparams)}


def differing_values(recorded: dict, problem_name: str, model_name: str, hparams) -> dict:
    """{name: (recorded value, requested value)} of the problem, the model and each hparam
    where the `recorded` description (saved_run) and the request differ."""
    requested = {"problem": problem_name, "model": model_name, **hparams.to_dict()}
    before = {key: recorded[key] for key in _NAMES} | recorded["hparams"].to_dict()
    return {name: (before[name], value) for name, value in requested.items()
            if before[name] != value}
