"""Checkpoint averaging (paper §6.1: the last 5 checkpoints for base models, 20 for big;
tensor2tensor's `avg_checkpoints.py`): the model's variables only, for decoding.

An average is replaced as a unit (docs/training.md): `P` is a folder holding the average under
a name of its own (`average-STEP-TOKEN`) and TensorFlow's `checkpoint` file naming it; the new
one is written whole beside the old, the `checkpoint` file replaced in one rename, then the old
one removed, so that a kill at any point leaves one complete average. An average in the layout
of 0.1.x (`P.index`, `P.data-*`) is removed once the new one is in place. The hparams.json
copied beside it carries the vocabulary's record; one there that records another vocabulary is
refused before anything is written (`check_kept_vocabulary`).
"""
import os
import uuid

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints
from t2t_lite.storage import atomic_files, output_paths
from t2t_lite.checkpoints import CheckpointError
from t2t_lite.errors import FlagError
from t2t_lite.storage.run_description import (HPARAMS_FILE, VocabularyError, description_path,
                                      described_vocabulary, recorded_vocabulary, same_vocabulary)

AVERAGE_NAME = "average"  # an average's prefix in P: average-STEP-TOKEN
STATE_FILE = "checkpoint"  # TensorFlow's CheckpointState, which tf.train.latest_checkpoint reads


def last_checkpoints(output_dir: str, num_last: int) -> list:
    """The last `num_last` checkpoints the trainer's CheckpointManager lists in output_dir,
    oldest first."""
    if num_last < 1:
        raise CheckpointError(f"the number of checkpoints to average must be at least 1, not "
                         f"{num_last}")
    state = tf.train.get_checkpoint_state(output_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    if not paths:
        raise CheckpointError(f"no checkpoints in {output_dir}: train first "
                              f"(t2t_lite-trainer --output_dir={output_dir})")
    if len(paths) < num_last:
        raise CheckpointError(f"{output_dir} has {len(paths)} checkpoint"
                              f"{'s' if len(paths) != 1 else ''}, fewer than the {num_last} "
                              f"to average: {', '.join(os.path.basename(p) for p in paths)}")
    chosen = paths[-num_last:]
    for path in chosen:
        if not tf.io.gfile.exists(path + ".index"):
            raise CheckpointError(f"{path} is listed in {output_dir}/checkpoint but its files "
                                  f"are missing")
    return chosen


def listed_checkpoints(listed: list) -> list:
    """The checkpoints of the averager's --checkpoints (t2t's avg_checkpoints flag), oldest
    (lowest step) first: each a checkpoint prefix (O/model.ckpt-1000) or a folder with a
    `checkpoint` state file (O/best, another run's output folder), for the checkpoint it
    names last. A
    CheckpointError names one that is neither; a FlagError an empty list or a checkpoint named
    twice (it would weigh twice in the mean)."""
    if not listed:
        raise FlagError("--checkpoints: expected a comma-separated list of checkpoints")
    paths = []
    for given in listed:
        path = checkpoints.named_by(given)
        if path is None:
            raise CheckpointError(f"--checkpoints: {given} is no checkpoint (a prefix such as "
                                  f"O/model.ckpt-1000, without .index) nor a folder with a "
                                  f"{STATE_FILE} file naming one (such as O/best)")
        if path in paths:
            raise FlagError(f"--checkpoints: {path} is named twice"
                            f"{f' ({given} names it)' if given != path else ''}: each "
                            f"checkpoint is averaged once")
        paths.append(path)
    return sorted(paths, key=checkpoints.step_of)  # oldest first, as last_checkpoints


def check_of_output_run(paths: list, output_dir: str):
    """Raises CheckpointError when a listed checkpoint is of another run than output_dir's
    latest checkpoint, whose hparams.json the average is described by."""
    latest = checkpoints.latest(output_dir)
    own = checkpoints.run_id_of(latest) if latest else None
    if own is None:
        return
    for path in paths:
        run_id = checkpoints.run_id_of(path)
        if run_id is not None and run_id != own:
            raise CheckpointError(
                f"--checkpoints: {path} is of run {run_id}, not of the run in "
                f"--output_dir={output_dir} ({own}, {latest}), whose hparams.json describes "
                f"the average: pass that run's --output_dir")


def check_one_run(paths: list):
    """Raises CheckpointError when the checkpoints `paths` hold different run ids (the trainer
    saves its run's in each; the weights of two runs do not average into a model); checkpoints
    without one are averaged with a warning."""
    run_ids = {path: checkpoints.run_id_of(path) for path in paths}
    unknown = [path for path, run_id in run_ids.items() if run_id is None]
    if unknown:
        logging.warning("%s hold%s no run id: averaged without knowing whether they are of "
                        "one run", ", ".join(unknown),
                        "s" if len(unknown) == 1 else "")
    runs = {}
    for path, run_id in run_ids.items():
        if run_id is not None:
            runs.setdefault(run_id, []).append(path)
    if len(runs) > 1:
        listed = "; ".join(f"{', '.join(paths_of_run)} of run {run_id}"
                           for run_id, paths_of_run in runs.items())
        raise CheckpointError(f"the checkpoints to average are of different runs ({listed}): "
                              f"the weights of two runs do not average into a model; average "
                              f"the checkpoints of one run")


def _model_variables(reader, checkpoint_path: str) -> dict:
    """{key: (shape, dtype)} of the checkpoint's model variables."""
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    found = {key: (list(shape), dtypes[key]) for key, shape in shapes.items()
             if checkpoints.is_model_key(key)}
    if not found:
        raise CheckpointError(f"{checkpoint_path} has no model variables")
    return found


def _step(checkpoint_path: str) -> str:
    """The global step in a "model.ckpt-STEP" name."""
    return os.path.basename(checkpoint_path).rsplit("-", 1)[-1]


def _current_name(out_path: str):
    """The name of the average that out_path's state file names, or None."""
    state = tf.train.get_checkpoint_state(out_path)
    return os.path.basename(state.model_checkpoint_path) if state else None


def check_out(out_path: str):
    """Raises FlagError if out_path is a folder whose state file names other checkpoints than
    averages (a trainer's output_dir, say), which writing an average there would replace."""
    name = _current_name(out_path)
    if name and not name.startswith(AVERAGE_NAME + "-"):
        raise FlagError(f"--out={out_path} is a folder of other checkpoints (its {STATE_FILE} "
                        f"file names {name}): give a path of its own, such as "
                        f"{out_path.rstrip('/')}/averaged/model.ckpt")


def _remove_other_averages(folder: str, keep: str = None):
    """Removes the files of every average in folder but `keep` (names are
    average-STEP-TOKEN, so no name starts with another), and a killed write's temporaries."""
    atomic_files.remove_incomplete(folder, STATE_FILE)
    for entry in tf.io.gfile.listdir(folder):
        entry = entry.rstrip("/")  # gs:// lists sub-folders with a slash
        if entry.startswith(AVERAGE_NAME + "-") and not (keep and entry.startswith(keep)):
            atomic_files.remove_matching(tf.io.gfile.join(folder, entry))


def _replace_average(values: dict, out_path: str, step: str) -> str:
    """Writes {path: array} as the average in the folder out_path (which exists) and makes it
    the one its state file names; returns its prefix. See the module's docstring for the
    order."""
    folder = out_path.rstrip("/")
    _remove_other_averages(folder, keep=_current_name(folder))  # what a killed run left
    name = f"{AVERAGE_NAME}-{step}-{uuid.uuid4().hex[:8]}"
    prefix = tf.io.gfile.join(folder, name)
    try:
        checkpoints.write_model_values(values, prefix)
        with atomic_files.atomic_write(tf.io.gfile.join(folder, STATE_FILE)) as handle:
            # Relative, as tf.train.CheckpointManager writes it: the folder can be moved.
            handle.write(f'model_checkpoint_path: "{name}"\n'
                         f'all_model_checkpoint_paths: "{name}"\n')
    except BaseException:
        if _current_name(folder) != name:  # not when interrupted just after the switch
            atomic_files.remove_matching(prefix + ".*", prefix + "_temp*")
        raise
    _remove_other_averages(folder, keep=name)
    return prefix


def check_kept_vocabulary(output_dir: str, out_path: str):
    """Raises VocabularyError when the hparams.json kept beside out_path (an earlier average's
    copy) records another vocabulary than output_dir's: the decoder would read the new average
    with it (the copy is not replaced)."""
    kept_in = output_paths.parent_folder(out_path)
    trained, kept = recorded_vocabulary(output_dir), recorded_vocabulary(kept_in)
    if trained and kept and not same_vocabulary(trained, kept):
        raise VocabularyError(
            f"--out={out_path}: the checkpoints of {output_dir} were trained on "
            f"{described_vocabulary(trained)}, which {description_path(output_dir)} records, "
            f"but {description_path(kept_in)}, kept beside an earlier average, records "
            f"{described_vocabulary(kept)}, and the decoder would read the average with it: "
            f"choose another --out, or remove that hparams.json to have "
            f"{description_path(output_dir)} copied there")


def _keep_run_description(output_dir: str, out_path: str):
    """Copies output_dir's hparams.json beside the result when it goes to a folder without
    one, so that either folder serves as the decoder's --output_dir; returns the copy's path,
    or None when none was made."""
    source = tf.io.gfile.join(output_dir, HPARAMS_FILE)
    target = tf.io.gfile.join(output_paths.parent_folder(out_path), HPARAMS_FILE)
    if not tf.io.gfile.exists(source) or tf.io.gfile.exists(target):
        return None
    with atomic_files.atomic_path(target) as temporary:
        tf.io.gfile.copy(source, temporary, overwrite=True)
    return target


def average_checkpoints(output_dir: str, num_last: int, out_path: str) -> str:
    """Writes at out_path the element-wise mean of every model variable over the last
    `num_last` checkpoints in output_dir (paper §6.1), when they are of one run
    (check_one_run), and returns its checkpoint prefix."""
    paths = last_checkpoints(output_dir, num_last)
    check_one_run(paths)
    return average(output_dir, paths, out_path)


def average(output_dir: str, paths: list, out_path: str) -> str:
    """Writes at out_path the element-wise mean of every model variable over the checkpoints
    `paths` of output_dir's run (oldest first, as last_checkpoints lists them), replacing the
    average there as a unit (see the module's docstring), and returns its checkpoint prefix
    (`--checkpoint_path=out_path` restores it too).

    The checkpoints must hold the same model variables with the same shapes (and be of one
    run: the callers' check_one_run). Floating-point variables are summed in float64 and
    stored in their own dtype; any other variable (none in the Transformer) keeps the last
    checkpoint's value.
    """
    readers = [checkpoints.reader(path) for path in paths]
    variables = _model_variables(readers[-1], paths[-1])
    for reader, path in zip(readers[:-1], paths[:-1]):
        if _model_variables(reader, path) != variables:
            raise CheckpointError(f"{path} and {paths[-1]} hold different model variables: "
                                  f"they were written by models with other hparams")
    averages = {}
    for key, (_, dtype) in sorted(variables.items()):
        if dtype.is_floating:
            total = sum(reader.get_tensor(key).astype(np.float64) for reader in readers)
            value = (total / len(readers)).astype(dtype.as_numpy_dtype)
        else:
            value = readers[-1].get_tensor(key)
        averages[checkpoints.variable_path(key)] = value
    check_out(out_path)
    check_kept_vocabulary(output_dir, out_path)
    tf.io.gfile.makedirs(out_path)
    earlier = _current_name(out_path)
    # First, so that a full disk leaves the old average; removed again if the new one fails.
    copied = _keep_run_description(output_dir, out_path)
    try:
        prefix = _replace_average(averages, out_path, _step(paths[-1]))
    except BaseException:
        if copied and _current_name(out_path) == earlier:  # the new average is not in place
            atomic_files.remove_if_exists(copied)
        raise
    logging.info("averaged %d checkpoints of %s (steps %s to %s; the average stands for step "
                 "%s) into %s", len(paths), output_dir, _step(paths[0]), _step(paths[-1]),
                 _step(paths[-1]), prefix)
    return prefix
