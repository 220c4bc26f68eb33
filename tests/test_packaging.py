"""The wheel installs problems/, hparams/ and bin/ under the t2t_lite namespace, Python only.

The wheel is built from this checkout and installed with --no-deps into a fresh virtual
environment. The environment borrows the already-installed dependencies through a path entry
(not the host's .pth files, so the host's own t2t_lite cannot leak in).
"""
import email
import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), REPOSITORY])
    wheels = list(dist.glob("t2t_lite-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


@pytest.fixture(scope="module")
def venv_python(wheel, tmp_path_factory):
    root = tmp_path_factory.mktemp("packaging")
    run([sys.executable, "-m", "venv", str(root / "venv")])
    python = root / "venv" / "bin" / "python"
    site_packages = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    with open(os.path.join(site_packages, "host_dependencies.pth"), "w") as handle:
        handle.write(sysconfig.get_paths()["purelib"] + "\n")
    run([str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)])
    return python


def output_lines(venv_python, script, folder, **environment):
    """The lines `script` prints when the venv's Python runs it in `folder`."""
    return run([str(venv_python), "-c", script], cwd=folder,
               env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **environment}).splitlines()


def test_the_wheel_ships_python_only_and_no_native_library(wheel):
    """Nothing to compile on first use: no C++ source in the wheel, no BLAS among its
    requirements, and its extras are CTranslate2's and the tests'."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = email.message_from_bytes(archive.read(
            next(n for n in names if n.endswith(".dist-info/METADATA"))))
    assert not [n for n in names if n.endswith((".cc", ".c", ".h", ".so"))]
    assert not [line for line in metadata.get_all("Requires-Dist") if "blas" in line.lower()]
    assert sorted(metadata.get_all("Provides-Extra")) == ["ctranslate2", "test"]


def test_wheel_installs_the_namespace_and_lists_the_registry(venv_python, tmp_path):
    script = ("import t2t_lite, t2t_lite.problems, t2t_lite.hparams, t2t_lite.bin.trainer\n"
              "from t2t_lite import registry\n"
              "print(t2t_lite.problems.__file__)\n"
              "print(','.join(registry.list_problems()))\n"
              "print(','.join(registry.list_hparams()))\n")
    out = output_lines(venv_python, script, tmp_path)
    assert out[0].startswith(str(venv_python.parent.parent)), out[0]
    assert "site-packages/t2t_lite/problems/__init__.py" in out[0]
    assert "algorithmic_copy" in out[1].split(",")
    assert "transformer_base_v1" in out[2].split(",")


def test_wheel_installs_console_scripts(venv_python):
    for name in ("t2t_lite-datagen", "t2t_lite-trainer", "t2t_lite-decoder",
                 "t2t_lite-avg-checkpoints", "t2t_lite-exporter"):
        assert (venv_python.parent / name).exists(), name


def test_python_started_in_the_clone_runs_the_clones_programs(venv_python):
    """In the clone's folder its t2t_lite/ comes first on the import path, ahead of the
    installed wheel: t2t_lite.bin, .problems and .hparams come from the clone too (else
    `python -m t2t_lite.bin.trainer` there fails: "No module named 't2t_lite.bin'")."""
    script = ("import t2t_lite.bin.trainer, t2t_lite.problems, t2t_lite.hparams\n"
              "print(t2t_lite.bin.trainer.__file__)\nprint(t2t_lite.problems.__file__)\n")
    out = output_lines(venv_python, script, REPOSITORY)
    assert out == [os.path.join(REPOSITORY, "bin", "trainer.py"),
                   os.path.join(REPOSITORY, "problems", "__init__.py")]
    help_text = run([str(venv_python), "-m", "t2t_lite.bin.trainer", "--helpshort"],
                    cwd=REPOSITORY, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert "--train_steps" in help_text
