"""An average is replaced as a unit: at every point of the replacement (the state between any two
steps it takes on the file system, which is what a kill leaves) --checkpoint_path=OUT restores
either the complete old average or the complete new one; a full disk leaves the old one and one
error line, and removes the new one's files."""
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import checkpoints, registry
from t2t_lite.errors import FlagError
from t2t_lite.storage.run_description import save_run_description
from t2t_lite.training import averaging

from program_runs import error_lines, run_program

SHAPE = (256, 512)  # 512 KiB of float32: the average does not fit the full disk below
KEY = "model/dense.Skernel/.ATTRIBUTES/VARIABLE_VALUE"


@pytest.fixture(scope="module")
def output_dir(tmp_path_factory):
    """Checkpoints at steps 10, 20 and 30 whose one model variable is all 1, 2 and 6 (the last 2
    average to 4, the last 3 to 3)."""
    output_dir = str(tmp_path_factory.mktemp("train"))
    kernel = tf.Variable(np.zeros(SHAPE, np.float32))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model={"dense/kernel": kernel}),
                                         output_dir, max_to_keep=5,
                                         checkpoint_name=checkpoints.CHECKPOINT_NAME)
    for step, value in ((10, 1.0), (20, 2.0), (30, 6.0)):
        kernel.assign(np.full(SHAPE, value, np.float32))
        manager.save(checkpoint_number=step)
    return output_dir


def restored_value(output_dir: str, out: str) -> float:
    """The value every element of the average at `out` holds, as --checkpoint_path=out
    restores it (it must be one value: a mixed checkpoint is no average)."""
    prefix = checkpoints.resolve(output_dir, out)
    values = checkpoints.reader(prefix).get_tensor(KEY)
    assert values.shape == SHAPE and np.all(values == values.flat[0]), prefix
    return float(values.flat[0])


def states_while_replacing(output_dir, folder, out, monkeypatch, replace):
    """Runs `replace()` and returns copies of `folder` taken before each step that changes what
    is in it (renames, removals, TensorFlow's checkpoint write) and at the end."""
    states = []

    def copy_state():
        state = f"{folder}.state{len(states)}"
        shutil.copytree(folder, state)
        states.append(state)

    def before(function):
        def step(*args, **kwargs):
            copy_state()
            return function(*args, **kwargs)
        return step

    for name in ("rename", "remove", "rmtree", "copy"):
        monkeypatch.setattr(tf.io.gfile, name, before(getattr(tf.io.gfile, name)))
    monkeypatch.setattr(tf.train.Checkpoint, "write", before(tf.train.Checkpoint.write))
    replace()
    monkeypatch.undo()
    copy_state()
    return [state + out[len(folder):] for state in states]


def test_a_kill_at_any_point_leaves_the_old_or_the_new_average(output_dir, tmp_path,
                                                               monkeypatch):
    folder, out = str(tmp_path / "averaged"), str(tmp_path / "averaged" / "model.ckpt")
    averaging.average_checkpoints(output_dir, 2, out)
    assert restored_value(output_dir, out) == 4.0
    states = states_while_replacing(
        output_dir, folder, out, monkeypatch,
        lambda: averaging.average_checkpoints(output_dir, 3, out))
    values = [restored_value(output_dir, state) for state in states]
    assert len(states) >= 4 and values[0] == 4.0 and values[-1] == 3.0
    assert set(values) == {4.0, 3.0}, values
    switched = values.index(3.0)
    assert values[switched:] == [3.0] * (len(values) - switched)  # one switch, never back
    name = os.path.basename(checkpoints.resolve(output_dir, out))
    assert sorted(os.listdir(out)) == sorted(
        ["checkpoint", f"{name}.data-00000-of-00001", f"{name}.index"])
    assert sorted(os.listdir(folder)) == ["model.ckpt"]


def test_the_average_is_a_folder_the_decoder_and_the_next_average_take(output_dir, tmp_path):
    out = str(tmp_path / "model.ckpt")
    first = averaging.average_checkpoints(output_dir, 2, out)
    assert first.startswith(f"{out}/average-30-") and restored_value(output_dir, out) == 4.0
    second = averaging.average_checkpoints(output_dir, 3, out)
    assert second != first and restored_value(output_dir, out) == 3.0
    assert not tf.io.gfile.exists(first + ".index")
    with pytest.raises(FlagError, match=f"--out={output_dir} is a folder of other "
                                                  f"checkpoints .*model.ckpt-30"):
        averaging.average_checkpoints(output_dir, 2, output_dir)


def files_under(folder: str) -> list:
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, _, names in os.walk(folder) for name in names)


def average_on_a_full_disk(output_dir: str, folder: str, out: str):
    """Fills `folder`'s file system but 64 KiB and averages the last 3 checkpoints of
    output_dir into `out` there with t2t_lite-avg-checkpoints: the one error line it must
    end with, naming --out."""
    with open(f"{folder}/filler", "wb") as handle:  # all but 64 KiB
        handle.write(bytes(os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
                           - (64 << 10)))
    result = run_program("avg_checkpoints", f"--output_dir={output_dir}", "--num_last=3",
                         f"--out={out}")
    assert result.returncode == 2, result.stderr[-3000:]
    assert error_lines(result.stderr) == [
        f"error: --out={out}: no space left on its file system; free some space or choose "
        f"another folder, then run the same command again"]
    assert "Traceback" not in result.stderr


def test_a_full_disk_is_one_error_and_leaves_the_earlier_average(output_dir, small_filesystem):
    folder = small_filesystem(2)
    out = f"{folder}/averaged/model.ckpt"
    averaging.average_checkpoints(output_dir, 2, out)
    earlier, before = checkpoints.resolve(output_dir, out), files_under(folder)
    average_on_a_full_disk(output_dir, folder, out)
    # No part of the new average, no temporary file, no lock: the earlier average as it was.
    assert files_under(folder) == sorted(before + ["filler"])
    assert checkpoints.resolve(output_dir, out) == earlier
    assert restored_value(output_dir, out) == 4.0


def test_a_first_average_on_a_full_disk_leaves_nothing_behind(output_dir, tmp_path,
                                                               small_filesystem):
    """No average before: the folders the averager made for --out and the hparams.json it
    copied there are removed with the new average's files (a rerun makes them again)."""
    trained = str(tmp_path / "train")
    shutil.copytree(output_dir, trained)
    save_run_description(trained, "algorithmic_copy", "transformer",
                         registry.hparams("transformer_tiny"),
                         {"data_dir": "", "vocab_size": 12, "files": []})
    folder = small_filesystem(2)
    average_on_a_full_disk(trained, folder, f"{folder}/new/averaged/model.ckpt")
    assert sorted(os.listdir(folder)) == ["filler"], list(os.walk(folder))
