"""A peer's own virtual environment: created once with a Python its toolkit supports, its pinned
requirements installed, and reused while they stay the same.

The requirement list is written to REQUIREMENTS_MARKER in the environment once installed; a list
that differs from it (a new pin) installs them again. When the environment must be created and
no suitable Python exists, `ensure_environment` says so and exits with the harness's
NO_PYTHON_EXIT_STATUS, so that callers can leave the peer out. The standard library only
(peers/ctranslate2_runtime.py uses it without t2t_lite).
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
import harness  # noqa: E402

REQUIREMENTS_MARKER = "t2t_lite-requirements.txt"


class PeerError(ValueError):
    """A step of the peer failed; the message says which and where its log is."""


def python_version(executable: str):
    """The version ("3.11") of a Python that runs and can create virtual environments, else
    None."""
    try:
        result = subprocess.run(
            [executable, "-c",
             "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def find_python(requested: str, versions: tuple):
    """The first Python of `versions` (("3.11", "3.10"): the preferred first) that works:
    `requested` (--python), else python3.11, python3.10 ... on PATH, else pyenv's versions
    (pyenv's shims on PATH fail for versions not selected)."""
    if requested:
        candidates = [requested]
    else:
        pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
        candidates = [f"python{version}" for version in versions]
        for version in versions:
            versions_dir = os.path.join(pyenv_root, "versions")
            names = os.listdir(versions_dir) if os.path.isdir(versions_dir) else []
            for name in sorted(names, reverse=True):
                if name.startswith(version + "."):
                    candidates.append(os.path.join(versions_dir, name, "bin", f"python{version}"))
    for candidate in candidates:
        executable = shutil.which(candidate) or candidate
        if os.path.isfile(executable) and python_version(executable) in versions:
            return executable
    return None


def run_checked(command: list, what: str):
    if subprocess.run(command).returncode:
        raise PeerError(f"{what} failed: {' '.join(command)}")


def ensure_environment(venv_dir: str, requirements: list, what: str, requested_python: str,
                       versions: tuple, no_python: str, install_first: int = 0) -> str:
    """The Python of `what`'s environment in `venv_dir` (what: "eole", named in its messages),
    after creating the environment with a Python of `versions` (`find_python`) or installing
    `requirements` into it if needed. When it must be created and no such Python exists, prints
    `no_python` (why the peer is left out: "eole peer skipped: eole 0.6.4 needs Python 3.11")
    with where it looked, and exits with NO_PYTHON_EXIT_STATUS. The first `install_first`
    requirements are installed on their own before all of them (eole's torch: pip then takes
    its CPU build and eole finds its requirement met)."""
    venv_python = os.path.join(venv_dir, "bin", "python")
    marker = os.path.join(venv_dir, REQUIREMENTS_MARKER)
    wanted = "\n".join(requirements) + "\n"
    if os.path.exists(marker) and os.path.exists(venv_python):
        with open(marker, encoding="utf-8") as handle:
            if handle.read() == wanted:
                return venv_python
    if not os.path.exists(venv_python) or python_version(venv_python) not in versions:
        python = find_python(requested_python, versions)
        if python is None:
            where = requested_python or (", ".join(f"python{version}" for version in versions)
                                         + " (PATH) or pyenv's versions")
            print(f"{no_python}, and none was found ({where}). Install one (e.g. `pyenv install "
                  f"{versions[0]}`) or pass --python.", file=sys.stderr)
            sys.exit(harness.NO_PYTHON_EXIT_STATUS)
        if os.path.isdir(venv_dir) and os.listdir(venv_dir) and not os.path.exists(
                os.path.join(venv_dir, "pyvenv.cfg")):
            raise PeerError(f"--venv_dir={venv_dir} is a folder with files but no virtual "
                            "environment: choose a new or empty folder")
        print(f"creating {what}'s environment in {venv_dir} with {python} (once)", flush=True)
        run_checked([python, "-m", "venv", "--clear", venv_dir],
                    "creating the virtual environment")
    pip = [venv_python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    first, rest = requirements[:install_first], requirements[install_first:]
    if first:
        print(f"installing {' '.join(first)}, then {' '.join(rest)} into {venv_dir}", flush=True)
        run_checked(pip + first, "pip install " + " ".join(line.split("==")[0] for line in first))
    else:
        print(f"installing {' '.join(requirements)} into {venv_dir}", flush=True)
    run_checked(pip + requirements, "pip install")
    with open(marker, "w", encoding="utf-8") as handle:
        handle.write(wanted)
    return venv_python


def installed_versions(venv_python: str, distributions: dict) -> dict:
    """{key: version} of the environment's `distributions` ({key: distribution name}), then
    its Python's version as "python"."""
    code = ("from importlib.metadata import version; import sys; "
            f"print(*[version(name) for name in {list(distributions.values())!r}], "
            "sys.version.split()[0])")
    output = subprocess.run([venv_python, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    return dict(zip([*distributions, "python"], output))
