"""A trainer whose --output_dir fills up ends with one `error:` line naming the folder, exit
status 2, no half-written checkpoint or record left behind, and the last complete checkpoint
the latest: the same command resumes once there is space again (issue 35). tensor2tensor, and
t2t_lite before, ended in a ResourceExhaustedError traceback from [Op:SaveV2] and left
`model.ckpt-N_temp/` in the folder.

The disk is a small tmpfs (tests/conftest.py, small_filesystem) with a ballast file that leaves
a chosen number of bytes free."""
import os
import pathlib
import re
import shutil

import pytest
import tensorflow as tf

from program_runs import error_lines, file_hashes, run, trainer_flags

CHECKPOINT_BYTES = 290_000  # model.ckpt-N.data of SMALL with Adam's moments


def fill(folder, leave_bytes: int):
    """Writes folder/ballast so that about `leave_bytes` stay free on folder's file system."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    with open(os.path.join(folder, "ballast"), "wb") as handle:
        handle.write(b"\0" * max(free - leave_bytes, 0))


@pytest.mark.parametrize("free_bytes, fails_at", [
    (CHECKPOINT_BYTES // 2, "the checkpoint of step 3"),  # the record and the picture fit
    (16 * 1024, "learning_rate.png"),  # the lock and hparams.json fit, the 30 kB picture not
    (0, "the lock"),
])
def test_a_full_disk_is_one_error_and_the_last_checkpoint_stays(
        data_dir, trained_dir, small_filesystem, free_bytes, fails_at):
    disk = small_filesystem(3)  # trained_dir's two checkpoints are about 0.6 MB
    output_dir = os.path.join(disk, "run")
    shutil.copytree(trained_dir, output_dir)
    fill(disk, free_bytes)

    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 4))
    assert code == 2, (fails_at, out)
    errors = error_lines(out)
    # The lock (output_lock.py) names the folder without the flag.
    named = f"(--output_dir=)?{output_dir}" if fails_at == "the lock" else \
        f"--output_dir={output_dir}"
    assert len(errors) == 1 and re.fullmatch(
        f"error: {named}: no space left on its file system; free some space or choose another "
        f"folder, then run the same command again", errors[0]), (fails_at, out)
    assert "Traceback" not in out
    left = os.listdir(output_dir)
    assert not [name for name in left if "_temp" in name or "incomplete" in name or
                name.startswith(("checkpoint.tmp", "model.ckpt-3", "t2t_lite.lock"))], left
    assert tf.train.latest_checkpoint(output_dir) == f"{output_dir}/model.ckpt-2"
    before, after = file_hashes(trained_dir), file_hashes(pathlib.Path(output_dir))
    kept = ["checkpoint", "hparams.json", "model.ckpt-2.index",
            "model.ckpt-2.data-00000-of-00001"]
    if free_bytes < CHECKPOINT_BYTES // 2:
        kept.append("learning_rate.png")  # the new picture did not fit: the old one stays
    for name in kept:
        assert after[name] == before[name], name

    os.remove(os.path.join(disk, "ballast"))
    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 4))
    assert code == 0, out
    assert f"resuming from {output_dir}/model.ckpt-2" in out  # the last complete one restores
    assert tf.train.latest_checkpoint(output_dir) == f"{output_dir}/model.ckpt-4"
