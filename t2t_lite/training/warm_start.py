"""Fine-tuning from a trained model (tensor2tensor's --warm_start_from): a new run that starts
from another run's weights, at step 0 with a fresh Adam, its own hparams and schedule and a run
id of its own. `checked_source` finds the source's checkpoint (an output folder, a folder with
a `checkpoint` file, a prefix) and checks, before anything is written, that its vocabulary and
model fit the new run; docs/training.md lists what must match and what may change.
"""
from typing import NamedTuple

import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints
from t2t_lite.checkpoints import CheckpointError
from t2t_lite.hparams_lib import TRAINING_ONLY_HPARAMS
from t2t_lite.models.building import build_model
from t2t_lite.storage import output_paths
from t2t_lite.storage.run_description import (HPARAMS_FILE, WARM_START, VocabularyError,
                                              description_path, differing_values,
                                              recorded_vocabulary, same_vocabulary, saved_run,
                                              vocabulary_difference, vocabulary_record)

FLAG = "--warm_start_from"
# A source whose files do not read: not a misfit of the model.
_UNREADABLE = (checkpoints.DamagedCheckpointError, checkpoints.RemovedCheckpointError)


def resolve_source(source: str) -> str:
    """The checkpoint prefix SOURCE stands for: SOURCE itself when it is one, else the latest
    checkpoint of the folder SOURCE (a trained output folder, O/best, an average's folder);
    a CheckpointError naming the flag when it is neither."""
    found = checkpoints.named_by(source)
    if found:
        return found
    raise CheckpointError(f"{FLAG}={source}: no checkpoint there: give a trained --output_dir, "
                          f"a folder with a `checkpoint` file (such as O/best or "
                          f"O/averaged/model.ckpt) or a checkpoint prefix (such as "
                          f"O/model.ckpt-1000, without .index)")


def description_folder(checkpoint: str):
    """The folder of the hparams.json that describes `checkpoint`: its own folder's, else the
    folder above's (the averager's copy beside O/averaged/model.ckpt); None when neither has
    one."""
    folder = output_paths.parent_folder(checkpoint)
    for candidate in (folder, output_paths.parent_folder(folder)):
        if tf.io.gfile.exists(description_path(candidate)):
            return candidate
    return None


class NewRun(NamedTuple):
    """The run a source must fit: its data (`problem`, a data.problem.Problem, in `data_dir`)
    and its model (`model_name` built with `hparams`)."""
    problem: object
    data_dir: str
    model_name: str
    hparams: object


def checked_source(source: str, output_dir: str, new: NewRun):
    """The checkpoint prefix a new run in output_dir starts from, once it is known to fit:
    the vocabulary its hparams.json records is the `new` run's data's, and the model the new
    run builds has its variables, shape for shape, and no others. None when output_dir holds
    checkpoints already: training resumes from them (one line says so).

    Args:
      source: --warm_start_from (see resolve_source).
      output_dir: the new run's folder; new: the new run.
    Raises:
      VocabularyError, CheckpointError (DamagedCheckpointError) naming both sides."""
    resumed_from = checkpoints.latest(output_dir)
    if resumed_from:
        logging.warning("%s=%s is not used: --output_dir=%s holds checkpoints, and training "
                        "resumes from %s (%s)", FLAG, source, output_dir, resumed_from,
                        _started_from(output_dir))
        return None
    checkpoint = resolve_source(source)
    described_in = description_folder(checkpoint)
    if described_in is None:
        folder = output_paths.parent_folder(checkpoint)
        raise CheckpointError(
            f"{FLAG}={source}: no {HPARAMS_FILE} beside {checkpoint} (in {folder} or "
            f"{output_paths.parent_folder(folder)}), so nothing tells the vocabulary it was "
            f"trained on: copy its run's {HPARAMS_FILE} there")
    _check_vocabulary(source, checkpoint, described_in, new)
    _check_model(source, checkpoint, described_in, new)
    return checkpoint


def _started_from(output_dir: str) -> str:
    """Where output_dir's run started, as its hparams.json records it."""
    record = saved_run(output_dir).get(WARM_START)
    return f"the run started from {record['checkpoint']}" if record else "a run of its own"


def _check_vocabulary(source: str, checkpoint: str, described_in: str, new: NewRun):
    """VocabularyError when the vocabulary the source's hparams.json records is not
    data_dir's, or when it records none."""
    path = description_path(described_in)
    recorded = recorded_vocabulary(described_in)
    current, data_dir = vocabulary_record(new.problem, new.data_dir), new.data_dir
    if recorded is None:
        raise VocabularyError(f"{FLAG}={source}: {path} records no vocabulary, so nothing "
                              f"tells whether --data_dir={data_dir} holds {checkpoint}'s")
    if not same_vocabulary(recorded, current):
        raise VocabularyError(
            f"{FLAG}={source}: --data_dir={data_dir} holds another vocabulary than "
            f"{checkpoint} was trained on: {vocabulary_difference(recorded, path, current)}. "
            f"Make the new data with that vocabulary (t2t_lite-datagen "
            f"--vocab_from={described_in}) or start from a model trained on this one")


def _check_model(source: str, checkpoint: str, described_in: str, new: NewRun):
    """CheckpointError naming the first model variable that the checkpoint lacks, shapes
    otherwise, or holds beyond the model the hparams build, with the hparams that differ from
    the source's record; DamagedCheckpointError (advising another checkpoint of its folder)
    when its model values do not read whole."""
    model = build_model(new.model_name, new.hparams, new.problem.vocab_size(new.data_dir))
    try:
        misfit = _misfit_reason(checkpoint, model)
        if not misfit and _model_hparams_differing(described_in, new.model_name, new.hparams):
            misfit = "the same variables, computing another function"
        if misfit:
            raise _misfit(source, misfit, described_in, new)
        stored = checkpoints.reader(checkpoint)
        for path in checkpoints.model_variables(model):  # each against its checksum, now
            stored.get_tensor(checkpoints.checkpoint_key(path))
    except checkpoints.DamagedCheckpointError as damaged:
        advice = (f"{FLAG}={damaged.restorable} starts from it" if damaged.restorable
                  else f"give {FLAG} another checkpoint")
        raise damaged.advising(advice) from None


def _misfit_reason(checkpoint: str, model):
    """Why the checkpoint's model variables are not the model's (one lacking or shaped
    otherwise: check_compatible; one beyond them), or None when they are."""
    try:
        stored = checkpoints.check_compatible(checkpoint, model)
    except CheckpointError as misfit:
        if isinstance(misfit, _UNREADABLE):
            raise
        return str(misfit)
    wanted = {checkpoints.checkpoint_key(path) for path in checkpoints.model_variables(model)}
    extra = sorted(checkpoints.variable_path(key) for key in stored
                   if checkpoints.is_model_key(key) and key not in wanted)
    if not extra:
        return None
    more = f" and {len(extra) - 1} more" if len(extra) > 1 else ""
    return (f"{checkpoint} has the variable {extra[0]!r}{more}, which the model built from "
            f"these hparams has not")


# What the new run may set otherwise than its source: how the weights are trained, and in
# which precision; every other hparam shapes the model or the function it computes (num_heads,
# the timing signal and the layer norms' epsilon change no variable's shape).
MAY_CHANGE = TRAINING_ONLY_HPARAMS | {"mixed_precision"}


def _model_hparams_differing(described_in: str, model_name: str, hparams) -> dict:
    """{name: (the source's value, the new one)} of the model and the hparams outside
    MAY_CHANGE where the source's record and the new run differ; {} without a record."""
    recorded = saved_run(described_in)
    if not recorded:
        return {}
    return {name: values for name, values in
            differing_values(recorded, recorded["problem"], model_name, hparams).items()
            if name not in MAY_CHANGE}


def _misfit(source: str, reason: str, described_in: str, new: NewRun) -> CheckpointError:
    """The error of a source that does not fit the new model (`reason`), naming the hparams
    that differ from the source's record outside MAY_CHANGE."""
    differing = ""
    changes = _model_hparams_differing(described_in, new.model_name, new.hparams)
    if changes:
        differing = (f"; it differs from {description_path(described_in)} in " +
                     ", ".join(f"{name} ({before!r} there, {after!r} here)"
                               for name, (before, after) in changes.items()))
    return CheckpointError(
        f"{FLAG}={source} does not fit the model that --model={new.model_name} and "
        f"--hparams_set/--hparams build for --data_dir={new.data_dir}: {reason}{differing}. The "
        f"hparams that shape the model (hidden_size, filter_size, num_heads, the layers, the "
        f"embeddings' sharing, the timing signal, the layer norms) must be the source's; "
        f"dropout, label smoothing, the learning rate, its warmup and batch_size may change")


def restore_weights(checkpoint: str, model) -> dict:
    """Restores the model's variables from `checkpoint` (checked_source's), leaving the
    optimizer and the run id alone; returns hparams.json's record of where the run started
    (start_record)."""
    checkpoints.restore(checkpoint, model)
    logging.info("warm start: the model's weights from %s (checked: the vocabulary and every "
                 "weight's shape); step 0, a fresh optimizer", checkpoint)
    return start_record(checkpoint)


def start_record(checkpoint: str) -> dict:
    """{"checkpoint": its absolute prefix, "step": the step in its name (-1 without one),
    "run_dir": the absolute folder of its hparams.json}: run_description's "warm_start"."""
    absolute = output_paths.absolute
    described_in = description_folder(checkpoint)
    return {"checkpoint": absolute(checkpoint), "step": checkpoints.step_of(checkpoint),
            "run_dir": absolute(described_in) if described_in else None}
