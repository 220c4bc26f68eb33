"""t2t_lite-exporter on a full disk: one error line naming --export_dir, the temporary folder and
the lock removed, the earlier version folder beside it as it was (TensorFlow Serving keeps
serving it)."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HPARAMS = "hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1"


def files_under(folder: str) -> dict:
    """{path under folder: content} of every file."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as handle:
                files[os.path.relpath(os.path.join(root, name), folder)] = handle.read()
    return files


@pytest.fixture(scope="module")
def trained(copy_task_data, tmp_path_factory):
    """(data_dir, output_dir) of an untrained tiny model's checkpoint and hparams.json."""
    from t2t_lite import checkpoints, registry
    from t2t_lite.models.building import build_model
    from t2t_lite.run_description import save_run_description
    data_dir, output_dir = copy_task_data(20, 5), str(tmp_path_factory.mktemp("run") / "train")
    hparams = registry.hparams("transformer_tiny").override_from_string(HPARAMS)
    model = build_model("transformer", hparams,
                        registry.problem("algorithmic_copy").vocab_size(data_dir))
    checkpoints.make_manager(output_dir, model).save(checkpoint_number=1)  # untrained will do
    save_run_description(output_dir, "algorithmic_copy", "transformer", hparams)
    return data_dir, output_dir


def export_on_a_full_disk(trained, folder: str, export_dir: str):
    """Fills `folder`'s file system but 64 KiB and exports there with t2t_lite-exporter: the
    one error line it must end with, naming --export_dir."""
    data_dir, output_dir = trained
    with open(os.path.join(folder, "filler"), "wb") as handle:  # all but 64 KiB
        stat = os.statvfs(folder)
        handle.write(bytes(stat.f_bavail * stat.f_frsize - (64 << 10)))
    result = subprocess.run(
        [sys.executable, "-m", "t2t_lite.bin.exporter", f"--data_dir={data_dir}",
         f"--output_dir={output_dir}", f"--export_dir={export_dir}"],
        capture_output=True, text=True, timeout=600, cwd=REPO)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr[-3000:]
    assert errors == [f"error: --export_dir={export_dir}: no space left on its file system; "
                      f"free some space or choose another folder, then run the same command "
                      f"again"]
    assert "Traceback" not in result.stderr
    assert f"restored {output_dir}/model.ckpt-1" in result.stderr  # full while writing it


def test_a_full_disk_is_one_error_and_leaves_the_earlier_version(trained, small_filesystem):
    folder = small_filesystem(1)
    models = os.path.join(folder, "copy")
    os.makedirs(os.path.join(models, "1", "variables"))
    for name in ("saved_model.pb", "variables/variables.index"):
        with open(os.path.join(models, "1", name), "w") as handle:
            handle.write(f"version 1's {name}")
    earlier = files_under(folder)
    export_on_a_full_disk(trained, folder, os.path.join(models, "2"))
    assert sorted(os.listdir(models)) == ["1"]  # no .2.incomplete, no .2.lock
    assert {path: content for path, content in files_under(folder).items()
            if path != "filler"} == earlier


def test_a_failed_export_removes_the_folders_it_made(trained, small_filesystem):
    """models/copy did not exist: the exporter made it for --export_dir=models/copy/1 and
    removes it again (the folder it found, models' parent, stays)."""
    folder = small_filesystem(1)
    export_on_a_full_disk(trained, folder, os.path.join(folder, "models", "copy", "1"))
    assert sorted(os.listdir(folder)) == ["filler"], list(os.walk(folder))
