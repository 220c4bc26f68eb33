"""Checkpoints of a model's weights and the optimizer's state, saved under each variable's
Keras path (TensorFlow's object graph misses the layers a Keras 3 model keeps in lists); every
read turns a damaged checkpoint into one error naming the file and the latest that restores."""
import re
import uuid

import numpy as np
import tensorflow as tf

from t2t_lite.storage import atomic_files, output_paths
from t2t_lite.errors import UserError

CHECKPOINT_NAME = "model.ckpt"
MODEL_OBJECT = "model"  # a checkpoint's dict {Keras path: model variable}
# TensorFlow's key of one of its values: the dict key, escaped ("." -> "..", "/" -> ".S"),
# between these.
MODEL_KEY_PREFIX = MODEL_OBJECT + "/"
VALUE_KEY_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


class CheckpointError(UserError, ValueError):
    """No checkpoint, or one that does not fit the model the hparams describe."""


# What TensorFlow raises for a checkpoint file it cannot read: an OpError (DataLossError for a
# checksum, "not an sstable" for an index cut short), IndexError for a .data file cut short.
_READ_ERRORS = (tf.errors.OpError, IndexError)


class DamagedCheckpointError(CheckpointError):
    """A checkpoint whose files cannot be read whole. `restorable`: the latest checkpoint in
    the same folder that reads whole, or None; `advice` says how to use it (the decoder's and
    exporter's --checkpoint_path by default; the trainer's own otherwise)."""

    def __init__(self, checkpoint_path: str, damaged_file: str, reason: str,
                 restorable: str = None, advice: str = None):
        self.checkpoint_path = checkpoint_path
        self.damaged_file = damaged_file
        self.reason = reason
        self.restorable = restorable
        folder = output_paths.parent_folder(checkpoint_path)
        if advice is None:
            advice = (f"--checkpoint_path={restorable} decodes or exports it" if restorable
                      else "train again")
        found = (f"The latest checkpoint that restores is {restorable}" if restorable
                 else f"No other checkpoint in {folder} restores")
        super().__init__(f"{damaged_file} is damaged ({reason}): the checkpoint "
                         f"{checkpoint_path} cannot be restored. {found}: {advice}")

    def advising(self, advice: str) -> "DamagedCheckpointError":
        """The same error with other advice."""
        return DamagedCheckpointError(self.checkpoint_path, self.damaged_file, self.reason,
                                      self.restorable, advice)


def _reason(error: Exception) -> str:
    """The first line of TensorFlow's message."""
    text = str(getattr(error, "message", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _data_files(checkpoint_path: str) -> list:
    return sorted(tf.io.gfile.glob(checkpoint_path + ".data-*"))


def _data_file_name(checkpoint_path: str) -> str:
    """The checkpoint's .data file, or the pattern of its shards when it has several or none."""
    files = _data_files(checkpoint_path)
    return files[0] if len(files) == 1 else checkpoint_path + ".data-*"


def step_of(checkpoint_path: str) -> int:
    """The step in a checkpoint's name ("model.ckpt-40", "average-40-TOKEN"); -1 without one."""
    found = re.search(r"-(\d+)", checkpoint_path.rsplit("/", 1)[-1])
    return int(found.group(1)) if found else -1


class RemovedCheckpointError(CheckpointError):
    """A checkpoint that was there when it was found and whose files went away while they were
    read: a trainer that keeps `--keep_checkpoint_max` checkpoints removes the oldest as it
    saves a new one. Not damage: the message names the latest checkpoint there is now."""

    def __init__(self, checkpoint_path: str):
        folder = output_paths.parent_folder(checkpoint_path)
        now = latest(folder)
        found = (f"the latest checkpoint in {folder} is now {now}: the same command reads it "
                 f"(or --checkpoint_path={now})" if now else f"{folder} holds no checkpoint now")
        super().__init__(f"the checkpoint {checkpoint_path} was removed while it was read (a "
                         f"trainer keeping --keep_checkpoint_max checkpoints removes the oldest "
                         f"as it saves); {found}")


def _damaged(checkpoint_path: str, damaged_file: str, reason: str) -> CheckpointError:
    """The error of a checkpoint that did not read: RemovedCheckpointError when its index is
    gone (TensorFlow removes a checkpoint's index first), else a DamagedCheckpointError naming
    the latest checkpoint of its folder that reads whole."""
    if not tf.io.gfile.exists(checkpoint_path + ".index"):
        return RemovedCheckpointError(checkpoint_path)
    folder = output_paths.parent_folder(checkpoint_path)
    others = sorted((path for path in existing_checkpoints(folder) if path != checkpoint_path),
                    key=lambda path: (step_of(path), path), reverse=True)
    restorable = next((path for path in others if _reads_whole(path)), None)
    return DamagedCheckpointError(checkpoint_path, damaged_file, reason, restorable)


def _reads_whole(checkpoint_path: str) -> bool:
    """Whether every value of the checkpoint reads (each is checked against its checksum)."""
    try:
        stored = Reader(checkpoint_path, name_a_restorable=False)
        for key in stored.get_variable_to_shape_map():
            stored.get_tensor(key)
        return True
    except (CheckpointError, *_READ_ERRORS):
        return False


class Reader:
    """A checkpoint's values by key (TensorFlow's CheckpointReader), for a checkpoint whose
    index reads and whose .data files hold at least the bytes of the values the index lists;
    a read that fails is a DamagedCheckpointError naming the file (see `reader`), or a
    RemovedCheckpointError when the checkpoint went away meanwhile."""

    def __init__(self, checkpoint_path: str, name_a_restorable: bool = True):
        self.checkpoint_path = checkpoint_path
        self._fail = (_damaged if name_a_restorable else
                      lambda path, file, reason: DamagedCheckpointError(path, file, reason))
        try:
            self._reader = tf.compat.v1.train.NewCheckpointReader(checkpoint_path)
        except _READ_ERRORS as error:
            raise self._fail(checkpoint_path, checkpoint_path + ".index",
                             _reason(error)) from None
        self._check_sizes()

    def _check_sizes(self):
        """A .data file cut short can still give the values that lie before the cut (a decoder
        reads only the model's): its size is checked against the values' bytes first."""
        dtypes = self._reader.get_variable_to_dtype_map()
        needed = sum(int(np.prod(shape)) * dtypes[key].size
                     for key, shape in self._reader.get_variable_to_shape_map().items()
                     if dtypes[key] != tf.string)
        files = _data_files(self.checkpoint_path)
        held = sum(tf.io.gfile.stat(path).length for path in files)
        if held < needed:
            raise self._fail(self.checkpoint_path, _data_file_name(self.checkpoint_path),
                             f"it holds {held} bytes, fewer than the {needed} bytes of the "
                             f"values its index lists" if files else "no such file")

    def get_variable_to_shape_map(self) -> dict:
        return self._reader.get_variable_to_shape_map()

    def get_variable_to_dtype_map(self) -> dict:
        return self._reader.get_variable_to_dtype_map()

    def get_tensor(self, key: str):
        try:
            return self._reader.get_tensor(key)
        except _READ_ERRORS as error:
            raise self._fail(self.checkpoint_path, _data_file_name(self.checkpoint_path),
                             _reason(error)) from None


def variables_by_path(variables, drop_top_scope: bool = False) -> dict:
    """{Keras path: variable}; with drop_top_scope the model's own name is left out of the
    path, so a second model built in one process ("transformer_1/...") reads the same keys."""
    def path(variable):
        return variable.path.split("/", 1)[-1] if drop_top_scope else variable.path
    by_path = {path(variable): variable for variable in variables}
    if len(by_path) != len(variables):
        raise ValueError("variable paths are not unique")
    return by_path


def model_variables(model) -> dict:
    return variables_by_path(model.weights, drop_top_scope=True)


def checkpoint_key(path: str) -> str:
    """The key TensorFlow stores the model variable at a Keras path under: "encoder/a.b" ->
    "model/encoder.Sa..b/.ATTRIBUTES/VARIABLE_VALUE"."""
    return MODEL_KEY_PREFIX + path.replace(".", "..").replace("/", ".S") + VALUE_KEY_SUFFIX


def is_model_key(key: str) -> bool:
    """Whether a checkpoint key holds a model variable (not the optimizer's or the counter)."""
    return key.startswith(MODEL_KEY_PREFIX) and key.endswith(VALUE_KEY_SUFFIX)


def variable_path(key: str) -> str:
    """The Keras path of a model variable from its checkpoint key (inverse of checkpoint_key)."""
    escaped = key[len(MODEL_KEY_PREFIX):-len(VALUE_KEY_SUFFIX)]
    return re.sub(r"\.([S.])", lambda match: "/" if match.group(1) == "S" else ".", escaped)


# A trainer's checkpoints hold the identity of their run: a string variable, made when the run
# starts in an empty output_dir and restored on every resume.
RUN_ID_OBJECT = "run_id"
RUN_ID_KEY = RUN_ID_OBJECT + VALUE_KEY_SUFFIX


def new_run_id() -> tf.Variable:
    """A run's identity for its checkpoints: a random hex string in a variable of its own. Make
    it outside any strategy's scope (a plain variable on each worker; the chief's is saved)."""
    return tf.Variable(uuid.uuid4().hex, dtype=tf.string, trainable=False, name="run_id")


def run_id_of(checkpoint_path: str):
    """The run id a checkpoint holds (str), or None for a checkpoint without one (an average,
    or a checkpoint of a version before run ids)."""
    stored = reader(checkpoint_path)
    if RUN_ID_KEY not in stored.get_variable_to_shape_map():
        return None
    return stored.get_tensor(RUN_ID_KEY).decode()


def make_checkpoint(model, optimizer=None, run_id: tf.Variable = None) -> tf.train.Checkpoint:
    objects = {MODEL_OBJECT: model_variables(model)}
    if optimizer is not None:
        objects["optimizer"] = variables_by_path(optimizer.variables)
    if run_id is not None:
        objects[RUN_ID_OBJECT] = run_id
    return tf.train.Checkpoint(**objects)


def write_model_values(values: dict, prefix: str):
    """Writes {Keras path: array} at `prefix` as a checkpoint of model variables only, which
    restore(prefix, model) reads."""
    checkpoint = tf.train.Checkpoint(**{MODEL_OBJECT: {
        path: tf.Variable(value) for path, value in values.items()}})
    # write() leaves out the save counter, which restore expects to match.
    checkpoint.save_counter  # noqa: B018 (creates it)
    checkpoint.write(prefix)


def make_manager(output_dir: str, model, optimizer=None, max_to_keep: int = 20,
                 run_id: tf.Variable = None):
    return tf.train.CheckpointManager(make_checkpoint(model, optimizer, run_id), output_dir,
                                      max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_NAME)


def save(manager, step: int) -> str:
    """manager.save(checkpoint_number=step), leaving nothing behind when it fails (a full disk,
    an interrupt): TensorFlow writes the shards into `model.ckpt-STEP_temp/`, merges them into
    `model.ckpt-STEP.index` and `.data-*`, and updates the `checkpoint` file last (through a
    temporary `checkpoint.tmp...`); the failed step's files are removed, so that the latest
    checkpoint stays the last complete one and a rerun finds no leftovers."""
    prefix = tf.io.gfile.join(manager.directory, f"{CHECKPOINT_NAME}-{step}")
    try:
        return manager.save(checkpoint_number=step)
    except BaseException:
        if tf.train.latest_checkpoint(manager.directory) != prefix:
            atomic_files.remove_matching(prefix + "_temp*", prefix + ".*",
                             tf.io.gfile.join(manager.directory, "checkpoint.tmp*"))
        raise


def remove_interrupted_saves(folder: str):
    """Removes the `model.ckpt-STEP_temp/` folders that saves killed before their end (`kill
    -9`, where `save` cannot clean up) left in `folder`: TensorFlow merges a save's shards out
    of that folder, so no checkpoint ever reads it. Only for the folder's one writer."""
    atomic_files.remove_matching(tf.io.gfile.join(folder, f"{CHECKPOINT_NAME}-*_temp"))


def reader(checkpoint_path: str) -> Reader:
    """A reader of the checkpoint with this prefix; a DamagedCheckpointError when its index or
    a value cannot be read, or its .data files are shorter than the values they hold.

    `tf.train.load_checkpoint` first asks whether the path is a folder, and on file systems
    without real folders (ram://) "O/model.ckpt-2" counts as one because "O/model.ckpt-2.index"
    lies under that name; the reader takes the prefix as given, as `tf.train.Checkpoint.restore`
    does."""
    return Reader(checkpoint_path)


def check_compatible(checkpoint_path: str, model):
    """Raises CheckpointError naming the first model variable the checkpoint lacks or shapes
    differently; returns {key: shape} of what the checkpoint holds."""
    stored = reader(checkpoint_path).get_variable_to_shape_map()
    for path, variable in model_variables(model).items():
        key = checkpoint_key(path)
        if key not in stored:
            raise CheckpointError(f"{checkpoint_path} has no variable {path!r}: it was written "
                                  f"by a model with other hparams")
        if list(stored[key]) != list(variable.shape):
            raise CheckpointError(f"{checkpoint_path}: variable {path!r} has shape "
                                  f"{stored[key]} there but {list(variable.shape)} in the model "
                                  f"built from these hparams")
    return stored


def restore(checkpoint_path: str, model, optimizer=None, run_id: tf.Variable = None):
    """Restores every model variable (and the optimizer's, when given; `run_id`'s value when
    the checkpoint holds one) or raises: a DamagedCheckpointError when the checkpoint's files
    cannot be read (see reader), a RemovedCheckpointError when they were removed since it was
    found."""
    stored = check_compatible(checkpoint_path, model)
    if RUN_ID_KEY not in stored:
        run_id = None  # a checkpoint of a version before run ids: the run gets one from now on
    try:
        status = make_checkpoint(model, optimizer, run_id).restore(checkpoint_path)
    except _READ_ERRORS as error:
        raise _damaged(checkpoint_path, _data_file_name(checkpoint_path),
                       _reason(error)) from None
    if optimizer is not None and (run_id is not None or RUN_ID_KEY not in stored):
        status.assert_consumed()  # everything the checkpoint holds has its variable
    else:
        status.expect_partial().assert_existing_objects_matched()


def latest(folder: str):
    """The latest checkpoint in folder that its `checkpoint` file lists and whose files are
    there, or None. tf.train.latest_checkpoint says None when the latest was moved away (a
    damaged one), and a trainer would start again from step 0 beside the earlier ones."""
    state = tf.train.get_checkpoint_state(folder)
    if state is None:
        return None
    listed = [state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)]
    return next((path for path in listed if path and tf.io.gfile.exists(path + ".index")),
                None)


def existing_checkpoints(folder: str) -> list:
    """The checkpoint prefixes in `folder` (those with an .index file), sorted."""
    pattern = tf.io.gfile.join(folder, "*.index")
    return sorted(path[:-len(".index")] for path in tf.io.gfile.glob(pattern))


def named_by(path: str):
    """The checkpoint `path` stands for: `path` itself when it is a checkpoint prefix, else
    the latest checkpoint of the folder `path` (an output folder, O/best, an average's
    folder); None when it is neither."""
    # The prefix first: on ram:// a prefix also counts as a folder (see reader).
    if tf.io.gfile.exists(path + ".index"):
        return path
    return latest(path) if tf.io.gfile.isdir(path) else None


def resolve(output_dir: str, checkpoint_path: str = None) -> str:
    """`checkpoint_path` (a checkpoint prefix, or a folder for its latest checkpoint) once it is
    known to exist, else output_dir's latest; a CheckpointError names the path and lists the
    checkpoints that exist, instead of TensorFlow's NotFoundError at restore time."""
    if checkpoint_path is None:
        found = latest(output_dir)
        if not found:
            raise CheckpointError(f"no checkpoint in {output_dir}: train first "
                                  f"(t2t_lite-trainer --output_dir={output_dir})")
        return found
    found = named_by(checkpoint_path)
    if found:
        return found
    folders = dict.fromkeys([output_dir, output_paths.parent_folder(checkpoint_path)])
    existing = [path for folder in folders if tf.io.gfile.isdir(folder)
                for path in existing_checkpoints(folder)]
    listing = ", ".join(existing) if existing else f"none in {' or '.join(folders)}"
    raise CheckpointError(f"--checkpoint_path={checkpoint_path}: no such checkpoint (a path "
                          f"prefix such as {output_dir}/model.ckpt-1000, without .index). "
                          f"Checkpoints that exist: {listing}")
