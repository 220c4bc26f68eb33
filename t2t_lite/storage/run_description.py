"""hparams.json: the problem, model, hparams and vocabulary a run was built from, beside its
checkpoints, so that the decoder and the exporter rebuild the same model from a folder alone
(docs/architecture.md, "The run description")."""
import hashlib
import json
import os

import tensorflow as tf

from t2t_lite.storage import output_paths
from t2t_lite.storage.atomic_files import atomic_write
from t2t_lite.errors import UserError
from t2t_lite.hparams_lib import HParams

HPARAMS_FILE = "hparams.json"
_NAMES = ("problem", "model")  # the keys besides "hparams"
VOCABULARY = "vocabulary"  # the key of the vocabulary's record
WARM_START = "warm_start"  # the key of where a warm-started run's weights came from
SHORT_SHA256 = 12  # hex digits of a fingerprint in messages


class RunDescriptionError(UserError, ValueError):
    """An hparams.json that cannot be read as the description of a run."""


class VocabularyError(UserError, ValueError):
    """A data folder whose vocabulary is not the one the model was trained with."""


def description_path(output_dir: str) -> str:
    return tf.io.gfile.join(output_dir, HPARAMS_FILE)


def save_run_description(output_dir: str, problem_name: str, model_name: str, hparams,
                         vocabulary: dict, warm_start: dict = None):
    """Writes output_dir/hparams.json atomically (a complete file or none), on any
    tf.io.gfile file system; with the `vocabulary` record (vocabulary_record) and the
    `warm_start` record (training.warm_start.start_record) when given."""
    description = {"problem": problem_name, "model": model_name,
                   VOCABULARY: vocabulary,
                   **({WARM_START: warm_start} if warm_start else {}),
                   "hparams": hparams.to_dict()}
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


def record_training(output_dir: str, problem_name: str, model_name: str, hparams, step: int,
                    vocabulary: dict, warm_start: dict = None):
    """Records in output_dir/hparams.json that training goes on from `step` with `hparams`:
    a new record when there is none or no step has been trained yet (step 0), with the
    `warm_start` record when given; else the record kept (its "warm_start" too), with the
    hparams that differ from its last ones appended to its "changes" as {"step": step,
    "hparams": {name: new value}} (nothing written when nothing is new). The problem, the
    model and the vocabulary must be the recorded ones (resumable_hparams, checked_vocabulary)."""
    description, recorded = _load(output_dir)
    if not recorded or step == 0:
        save_run_description(output_dir, problem_name, model_name, hparams, vocabulary,
                             warm_start)
        return
    changed = differing_values(recorded, problem_name, model_name, hparams)
    if set(changed) & set(_NAMES):
        raise ValueError(f"{description_path(output_dir)} records another run: "
                         f"{sorted(set(changed) & set(_NAMES))} differ")
    if not changed:
        return
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
    for key in (*_NAMES, "hparams", VOCABULARY):
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
    _check_vocabulary_record(description[VOCABULARY])
    if WARM_START in description:
        _check_warm_start_record(description[WARM_START])
    # HParams.from_dict names an unknown key or a value of the wrong type (an HParamsError is
    # a ValueError); HParams' own checks then name a value out of range.
    return {**description, "hparams": HParams.from_dict(hparams)}


def _check_vocabulary_record(record):
    """ValueError saying what is wrong with a "vocabulary" record that vocabulary_record did
    not write."""
    files = record.get("files") if isinstance(record, dict) else None
    if not (isinstance(files, list) and isinstance(record.get("vocab_size"), int)
            and isinstance(record.get("data_dir", ""), str)):
        raise ValueError(f"'vocabulary' is {record!r}: expected an object with \"vocab_size\" "
                         f"and \"files\"")
    for file in files:
        if not (isinstance(file, dict) and isinstance(file.get("name"), str)
                and isinstance(file.get("sha256"), str)):
            raise ValueError(f"the vocabulary file {file!r} is not an object with a \"name\" "
                             f"and a \"sha256\"")


def _check_warm_start_record(record):
    """ValueError saying what is wrong with a "warm_start" record that the trainer did not
    write."""
    if not (isinstance(record, dict) and isinstance(record.get("checkpoint"), str)
            and isinstance(record.get("step"), int)
            and isinstance(record.get("run_dir"), (str, type(None)))):
        raise ValueError(f"'warm_start' is {record!r}: expected an object with a "
                         f"\"checkpoint\" path, a \"step\" number and a \"run_dir\"")


def differing_values(recorded: dict, problem_name: str, model_name: str, hparams) -> dict:
    """{name: (recorded value, requested value)} of the problem, the model and each hparam
    where the `recorded` description (saved_run) and the request differ."""
    requested = {"problem": problem_name, "model": model_name, **hparams.to_dict()}
    before = {key: recorded[key] for key in _NAMES} | recorded["hparams"].to_dict()
    return {name: (before[name], value) for name, value in requested.items()
            if before[name] != value}


def listed_changes(changes: dict, path: str) -> str:
    """"name: RECORDED in PATH, REQUESTED requested; ..." of {name: (recorded, requested)}."""
    return "; ".join(f"{name}: {before!r} in {path}, {after!r} requested"
                     for name, (before, after) in changes.items())


def vocabulary_record(problem, data_dir: str) -> dict:
    """The record of the vocabulary that `problem` (a data.problem.Problem) reads in data_dir:
    the folder (absolute), the number of ids, and the name and sha256 of each of its
    vocabulary_files."""
    files = [{"name": os.path.basename(path), "sha256": _sha256(path)}
             for path in problem.vocabulary_files(data_dir)]
    return {"data_dir": output_paths.absolute(data_dir),
            "vocab_size": problem.vocab_size(data_dir),
            "files": files}


def checked_vocabulary(output_dir: str, problem, data_dir: str, resuming: bool = False) -> dict:
    """The vocabulary record to keep with the model in output_dir when it is used with
    data_dir's vocabulary: the one output_dir's hparams.json records, when data_dir's is the
    same (`same_vocabulary`), or data_dir's when there is no hparams.json (a new run). Another
    vocabulary is a VocabularyError naming both files; `resuming` gives the trainer's advice."""
    current = vocabulary_record(problem, data_dir)
    description, recorded = _load(output_dir)
    if not recorded:
        return current
    path = description_path(output_dir)
    before = description[VOCABULARY]
    if same_vocabulary(before, current):
        return before
    if resuming:
        advice = ("To resume that run, pass the --data_dir it was trained with; to train on "
                  "this data, choose a new --output_dir")
    else:
        advice = "Use the --data_dir the model was trained with, or one with a copy of its file"
    raise VocabularyError(
        f"--data_dir={data_dir} holds another vocabulary than the "
        f"{'run in --output_dir=' if resuming else 'model in '}{output_dir} was trained with: "
        f"{vocabulary_difference(before, path, current)}. {advice}")


def recorded_vocabulary(output_dir: str) -> dict:
    """The vocabulary record of output_dir's hparams.json; None without one."""
    return _load(output_dir)[0].get(VOCABULARY)


def same_vocabulary(record: dict, other: dict) -> bool:
    """Whether two vocabulary records are of the same vocabulary: files of the same contents
    (sha256), whatever their names (a vocabulary that datagen's --vocab_from copied under
    another problem's file name is the same), or, without files, the same size."""
    return _fingerprint(record) == _fingerprint(other)


def vocabulary_difference(recorded: dict, recorded_in: str, other: dict) -> str:
    """"FILE (sha256 ...) is not RECORDED FILE (sha256 ...), which PATH records": the files of
    two vocabulary records that differ, the `recorded` one read from `recorded_in`."""
    return (f"{described_vocabulary(other)} is not {described_vocabulary(recorded)}, which "
            f"{recorded_in} records")


def described_vocabulary(record: dict) -> str:
    """The files of a vocabulary record, as paths with the start of their sha256."""
    files = [f"{_joined(record.get('data_dir'), file['name'])} (sha256 "
             f"{file['sha256'][:SHORT_SHA256]})" for file in record["files"]]
    return " and ".join(files) or f"a vocabulary of {record['vocab_size']} ids without a file"


def _fingerprint(record: dict):
    """What tells two vocabularies apart: their files' contents (sha256s, in order; not their
    names, so that a copy under another problem's name, datagen's --vocab_from, is the same
    vocabulary), else (no file) their size."""
    files = tuple(file["sha256"] for file in record["files"])
    return files or record["vocab_size"]


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _joined(folder: str, name: str) -> str:
    return tf.io.gfile.join(folder, name) if folder else name
