"""The benchmarks' children after a plain `pip install .`: t2t_lite's programs start as the
installed console scripts even from a folder whose own t2t_lite/ would shadow the package (a
clone's, which has no bin/), a program that is not installed is named with `pip install .`, and
a child that fails ends the benchmark script with one `error:` line naming its log."""
import os
import subprocess
import sys

import pytest

from program_runs import error_lines

BENCHMARKS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
sys.path.insert(0, BENCHMARKS)
import harness  # noqa: E402

# A clone's t2t_lite/ imported in place of the installed package: under a non-editable install
# it lacks bin/ ("No module named 't2t_lite.bin'"); under the tests' editable install the
# package's finder would still find bin/, so this stand-in fails any import that reaches it.
SHADOW = 'raise ImportError("the working folder\'s t2t_lite/ was imported")\n'


@pytest.fixture
def clone_folder(tmp_path):
    """A working folder like a clone's, with a t2t_lite/ that fails when imported."""
    folder = tmp_path / "clone"
    (folder / "t2t_lite").mkdir(parents=True)
    (folder / "t2t_lite" / "__init__.py").write_text(SHADOW)
    return folder


def test_a_program_starts_from_a_folder_whose_t2t_lite_would_shadow_the_package(
        clone_folder, tmp_path, monkeypatch):
    monkeypatch.chdir(clone_folder)
    shadowed = subprocess.run([sys.executable, "-m", "t2t_lite.bin.trainer", "--helpshort"],
                              capture_output=True, text=True)
    assert shadowed.returncode and "t2t_lite/ was imported" in shadowed.stderr  # it shadows
    command = harness.t2t_lite_command("trainer")
    assert os.path.basename(command[0]) == "t2t_lite-trainer"
    output = harness.run_logged(command + ["--helpfull"], str(tmp_path / "trainer.log"))
    assert "--train_steps" in output


def test_a_program_not_installed_is_named_with_pip_install(monkeypatch, tmp_path):
    monkeypatch.setattr(harness, "script_folders", lambda: [str(tmp_path)])
    with pytest.raises(harness.ProgramMissing,
                       match=r"t2t_lite-exporter is not installed .*`pip install \.`"):
        harness.t2t_lite_command("exporter")


# decode_speed.py's SavedModel export at its entry point (it imports TensorFlow and defines
# flags, so in a process of its own), from the clone's folder as a user runs it.
EXPORT_PROBE = """
import sys
sys.path.insert(0, {benchmarks!r})
sys.argv = ["decode_speed.py", "--data_dir={empty}", "--t2t_lite_dir={empty}", "--work_dir={work}"]
import decode_speed
import harness
harness.run_main(lambda argv: decode_speed.export_saved_model(
    "t2t_lite_saved_model", {{"t2t_lite_checkpoint": "{empty}/model.ckpt-1"}}))
"""


def test_a_failed_child_ends_the_benchmark_with_one_line_naming_its_log(clone_folder, tmp_path):
    """The exporter, started from the clone's folder, fails on an output folder without a run
    (its own error in its log): decode_speed.py ends with one line and no traceback."""
    empty, work, probe = tmp_path / "empty", tmp_path / "work", tmp_path / "probe" / "probe.py"
    for folder in (empty, work, probe.parent):
        folder.mkdir()
    probe.write_text(EXPORT_PROBE.format(benchmarks=BENCHMARKS, empty=empty, work=work))
    ended = subprocess.run([sys.executable, str(probe)], cwd=clone_folder, capture_output=True,
                           text=True)
    log = work / "saved_model.log"
    assert ended.returncode == harness.CHILD_FAILED_EXIT_STATUS, ended.stderr
    assert error_lines(ended.stderr) == [
        f"error: t2t_lite-exporter failed (exit status 2); its log: {log}"]
    assert "Traceback" not in ended.stderr
    assert "error: --problem is required" in log.read_text()  # the installed exporter ran


# A peer's run.py whose step fails (peer_environment.PeerError, naming its log), at the same
# entry point.
PEER_STEP_PROBE = """
import sys
sys.path.insert(0, {benchmarks!r})
import harness
from peer_environment import PeerError

def main(argv):
    raise PeerError("training ended without a checkpoint or a loss; see W/train.log")

harness.run_main(main)
"""


def test_a_failed_step_of_a_peer_ends_its_program_with_one_line(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PEER_STEP_PROBE.format(benchmarks=BENCHMARKS))
    ended = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True)
    assert ended.returncode == harness.CHILD_FAILED_EXIT_STATUS, ended.stderr
    assert error_lines(ended.stderr) == [
        "error: training ended without a checkpoint or a loss; see W/train.log"]
    assert "Traceback" not in ended.stderr
