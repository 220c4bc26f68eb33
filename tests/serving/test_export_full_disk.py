"""t2t_lite-exporter on a full disk: one error line naming --export_dir, the temporary folder and
the lock removed, the earlier version folder beside it as it was (TensorFlow Serving keeps
serving it)."""
import os

from program_runs import error_lines, run_program


def files_under(folder: str) -> dict:
    """{path under folder: content} of every file."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as handle:
                files[os.path.relpath(os.path.join(root, name), folder)] = handle.read()
    return files


def export_on_a_full_disk(model_dir, folder: str, export_dir: str):
    """Fills `folder`'s file system but 64 KiB and exports model_dir's (data_dir, output_dir)
    there with t2t_lite-exporter: the one error line it must end with, naming --export_dir."""
    data_dir, output_dir = model_dir
    with open(os.path.join(folder, "filler"), "wb") as handle:  # all but 64 KiB
        stat = os.statvfs(folder)
        handle.write(bytes(stat.f_bavail * stat.f_frsize - (64 << 10)))
    result = run_program("exporter", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                         f"--export_dir={export_dir}")
    assert result.returncode == 2, result.stderr[-3000:]
    assert error_lines(result.stderr) == [
        f"error: --export_dir={export_dir}: no space left on its file system; free some space or "
        f"choose another folder, then run the same command again"]
    assert "Traceback" not in result.stderr
    assert f"restored {output_dir}/model.ckpt-1" in result.stderr  # full while writing it


def test_a_full_disk_is_one_error_and_leaves_the_earlier_version(untrained_model_dir,
                                                                  small_filesystem):
    """conftest's untrained model: an export of it is as large as of a trained one."""
    folder = small_filesystem(1)
    models = os.path.join(folder, "copy")
    os.makedirs(os.path.join(models, "1", "variables"))
    for name in ("saved_model.pb", "variables/variables.index"):
        with open(os.path.join(models, "1", name), "w") as handle:
            handle.write(f"version 1's {name}")
    earlier = files_under(folder)
    export_on_a_full_disk(untrained_model_dir, folder, os.path.join(models, "2"))
    assert sorted(os.listdir(models)) == ["1"]  # no .2.incomplete, no .2.lock
    assert {path: content for path, content in files_under(folder).items()
            if path != "filler"} == earlier


def test_a_failed_export_removes_the_folders_it_made(untrained_model_dir, small_filesystem):
    """models/copy did not exist: the exporter made it for --export_dir=models/copy/1 and
    removes it again (the folder it found, models' parent, stays)."""
    folder = small_filesystem(1)
    export_on_a_full_disk(untrained_model_dir, folder,
                          os.path.join(folder, "models", "copy", "1"))
    assert sorted(os.listdir(folder)) == ["filler"], list(os.walk(folder))
