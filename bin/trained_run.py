"""The model a decoder or exporter uses, as the trainer recorded it in hparams.json: its problem,
model and hparams, with what inference may take other than the record (the dtype it computes
in) and nothing that would change the trained model.

Importing this module changes nothing in the process and loads no TensorFlow.
"""
from absl import logging

from t2t_lite.errors import FlagError

# What decoding or exporting a trained model may take other than its hparams.json records:
# the dtype it computes in (its float32 weights are cast once when loaded).
INFERENCE_SETTINGS = frozenset({"mixed_precision"})


def recorded_run(run_dir: str) -> tuple:
    """(the run recorded in run_dir's hparams.json: storage.run_description.saved_run, {}
    without one; the path of that hparams.json)."""
    from t2t_lite.storage.run_description import description_path, saved_run
    return saved_run(run_dir), description_path(run_dir)


def recorded_names(run: dict, path: str, problem: str = None, model: str = None) -> tuple:
    """(problem name, model name) of the `run` recorded in `path`: the record's. A `problem`
    or `model` requested (None: not asked for) that differs from it is a FlagError naming
    the flag, the recorded and the requested name and `path`: the checkpoint holds the
    recorded model's weights, trained on the recorded problem's data."""
    requested = {"problem": problem, "model": model}
    refused = {name: (run[name], value) for name, value in requested.items()
               if value is not None and value != run[name]}
    if refused:
        given = " ".join(f"--{name}={value}" for name, (_, value) in refused.items())
        several = len(refused) > 1
        raise FlagError(
            f"{given} {'differ' if several else 'differs'} from the trained model: "
            f"{_listed(refused, path)}. A trained model is decoded and exported with the "
            f"problem and model it was trained on: drop {'them' if several else 'it'} from "
            f"the flags")
    return run["problem"], run["model"]


def inference_hparams(recorded, requested, path: str, given: str):
    """The hparams to decode or export the model recorded in `path` (its hparams `recorded`)
    with, when the flags `given` ask for `requested`: the record, with requested
    INFERENCE_SETTINGS ("auto" stands for the recorded choice, as on a resume). A difference
    in what only training reads (hparams_lib.TRAINING_ONLY_HPARAMS) is ignored with a
    warning; any other (the model's shape or computation: num_hidden_layers, hidden_size, the
    norms, the timing signal ...) is a FlagError naming each hparam, the recorded and the
    requested value, and `path`: a checkpoint restores into a model of another shape by
    dropping or missing weights without an error (tensor2tensor's decoder took the flags' hparams as they were)."""
    from t2t_lite.hparams_lib import TRAINING_ONLY_HPARAMS as TRAINING_ONLY
    for name in ("mixed_precision", "length_bucketing"):  # "auto": the trainer's choice
        if getattr(requested, name) == "auto":
            requested = requested.replace(**{name: getattr(recorded, name)})
    before, after = recorded.to_dict(), requested.to_dict()
    changed = {name: (before[name], after[name]) for name in before
               if before[name] != after[name]}
    refused = {name: values for name, values in changed.items()
               if name not in INFERENCE_SETTINGS | TRAINING_ONLY}
    if refused:
        raise FlagError(
            f"{given} changes the trained model: {_listed(refused, path)}. A trained model is "
            f"decoded and exported as it was trained (only mixed_precision may change): drop "
            f"{'them' if len(refused) > 1 else 'it'} from the flags")
    ignored = {name: values for name, values in changed.items() if name in TRAINING_ONLY}
    if ignored:
        logging.warning("%s: ignored, only training reads them: %s", given,
                        _listed(ignored, path))
    return recorded.replace(**{name: after[name] for name in changed
                               if name in INFERENCE_SETTINGS})


def _listed(changes: dict, path: str) -> str:
    return "; ".join(f"{name}: {before!r} in {path}, {after!r} requested"
                     for name, (before, after) in changes.items())
