"""The BLAS matmul op library: compiled once per machine from `blas_matmul.cc`, then loaded.

A TensorFlow op library must be built against the installed TensorFlow's headers and ABI
(`tf.sysconfig`), so it is compiled on first use, as TensorFlow's guide to custom ops builds
one with g++, and kept in a cache folder under a name that hashes everything the build depends
on (the source, TensorFlow's version and flags, the compiler, OpenBLAS). The build announces
itself on the console before it starts (what, why, about how long, where it is kept and how
to do without it). The library is written under a temporary name of its process and renamed
when complete (`atomic_files`), so that processes building it at the same time (test workers,
several trainers) each load a whole one.

OpenBLAS comes from the `scipy-openblas32` package (the build numpy and SciPy use), whose
symbols carry a `scipy_` prefix, so it does not clash with another BLAS in the process. It is
an extra, `pip install 't2t_lite[blas]'`: without it, or without a C++ compiler, `missing()`
says so and the CPU tuning never picks the op (t2t_lite/cpu_tuning.py).

If the build or the load fails, `load()` returns None, logs why once per process, and t2t_lite
uses TensorFlow's matmul. A build that fails, or a library that is built but does not load,
leaves a .log file beside where the library would be (the compiler's output, or the loader's
error): the same inputs would fail the same way, so later processes read it instead of
compiling again, until it is deleted. A library taken from the cache that does not load
(damaged on disk) is built again, once.

TensorFlow is imported by the functions that build and load, not by this module, so that
`missing()` can be asked before TensorFlow loads.
"""
import functools
import hashlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys

from absl import logging

from t2t_lite import atomic_files, cpu_tuning
from t2t_lite.cpu_tuning import CACHE_VARIABLE, cache_folder  # noqa: F401 (one cache folder)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "blas_matmul.cc")
OPENBLAS_MODULE, OPENBLAS_PACKAGE = "scipy_openblas32", "scipy-openblas32"
INSTALL = "pip install 't2t_lite[blas]'"
COMPILE_SECONDS = 10  # what the announcement promises (7 s measured on a busy Zen 4 EPYC)
COMPILE_TIMEOUT_S = 600
# The beginnings of the console lines a measuring subprocess passes on (cpu_tuning).
COMPILING = "compiling the BLAS op"
UNAVAILABLE = "BLAS matmul op unavailable"


class BuildError(Exception):
    """The op library could not be built or loaded; the message says why."""


def missing():
    """Why the op cannot be built here (no OpenBLAS package, no C++ compiler), or None; found
    without building anything or loading TensorFlow."""
    if importlib.util.find_spec(OPENBLAS_MODULE) is None:
        return f"the {OPENBLAS_PACKAGE} package is not installed ({INSTALL})"
    try:
        _compiler()
    except BuildError as error:
        return str(error)
    return None


@functools.lru_cache(maxsize=None)
def load():
    """The loaded op library (its Python module, with `t2t_lite_blas_mat_mul`), or None."""
    import tensorflow as tf
    try:
        command, path = _command_and_path()
        if os.path.exists(path):
            try:
                return tf.load_op_library(path)
            except (OSError, tf.errors.OpError) as error:
                logging.warning("the cached BLAS library %s does not load (%s); building it "
                                "again", path, error)
                os.remove(path)
        _build(command, path)
        try:
            return tf.load_op_library(path)
        except (OSError, tf.errors.OpError) as error:
            os.remove(path)
            raise BuildError(f"built, but it does not load: {error}; "
                             f"{_remember_failure(path, str(error))}") from error
    except (BuildError, OSError, tf.errors.OpError) as error:
        logging.warning("%s (%s); training uses TensorFlow's matmul", UNAVAILABLE, error)
        return None


def library_path() -> str:
    """Where the library built from today's inputs is (or will be) in the cache: its name
    hashes the source and the compile command (with the source named without its folder, so
    that installs in several places of one environment share it), the compiler's version,
    TensorFlow's and OpenBLAS's."""
    return _command_and_path()[1]


def built_library() -> str:
    """The path of the compiled library, compiling it first if the cache lacks it. Raises
    BuildError at once if the same inputs failed before (their .log file is there)."""
    command, path = _command_and_path()
    return path if os.path.exists(path) else _build(command, path)


def _command_and_path():
    """(compile_command's command, library_path), from one run of compile_command."""
    command, inputs = compile_command()
    with open(SOURCE, "rb") as source:
        key = hashlib.sha256(inputs.replace(SOURCE, os.path.basename(SOURCE)).encode()
                             + source.read()).hexdigest()[:16]
    return command, os.path.join(cache_folder(), "blas_op", f"blas_matmul-{key}.so")


def _build(command, path) -> str:
    """Compiles the library to `path` (BuildError at once if its .log file says the same
    inputs failed before); returns `path`."""
    log = _log_path(path)
    if os.path.exists(log):
        raise BuildError(f"an earlier build from the same inputs failed (its output: {log}; "
                         "delete that file to try again)")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    skip = "onednn" if cpu_tuning.is_x86_64() else "eigen"
    print(f"{COMPILING} of t2t_lite's weight gradients (OpenBLAS, faster than TensorFlow's "
          f"matmul on some CPUs) from {os.path.basename(SOURCE)} with {command[0]} against "
          f"this TensorFlow: about {COMPILE_SECONDS} s, once (at most {COMPILE_TIMEOUT_S} s); "
          f"cached in {os.path.dirname(path)}; {cpu_tuning.BLAS_VARIABLE}=0 or "
          f"--cpu_tuning={skip} does without it", file=sys.stderr, flush=True)
    # Named for this process: test workers or trainers may compile at the same time.
    with atomic_files.atomic_path(path, owner=str(os.getpid())) as temporary:
        try:
            result = subprocess.run(command + ["-o", temporary], capture_output=True,
                                    text=True, check=False, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired as error:
            raise BuildError(f"{command[0]} ran longer than {COMPILE_TIMEOUT_S} s") from error
        if result.returncode:
            raise BuildError(f"{command[0]} failed: {_first_error(result.stderr)}; "
                             + _remember_failure(path, " ".join(command) + "\n\n"
                                                 + result.stderr))
    return path


def _log_path(library: str) -> str:
    return library[:-len(".so")] + ".log"


def _remember_failure(library: str, text: str) -> str:
    """Writes `text` to the library's .log file, which stops later builds from the same
    inputs; returns the words that point to it."""
    log = _log_path(library)
    with atomic_files.atomic_write(log, owner=str(os.getpid())) as handle:
        handle.write(text)
    return f"its output: {log}"


def _first_error(stderr: str) -> str:
    """The compiler's first error line (for a link error, the linker's reason before collect2's
    summary line)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line and not line.startswith("collect2")]
    return (errors or lines or ["no output"])[0]


def _compiler() -> list:
    """$CXX (split as a shell would), else g++ or c++; BuildError when it is not there."""
    compiler = shlex.split(os.environ.get("CXX") or "") or [
        shutil.which("g++") or shutil.which("c++") or "g++"]
    if not shutil.which(compiler[0]):
        raise BuildError(f"no C++ compiler (set CXX, or install g++): {compiler[0]}")
    return compiler


def compile_command():
    """(the compiler command without its output, a text of everything the build depends on)."""
    import tensorflow as tf
    try:
        import scipy_openblas32 as openblas
    except ImportError as error:
        raise BuildError(f"the {OPENBLAS_PACKAGE} package is not installed ({INSTALL}: "
                         f"{error})") from error
    compiler = _compiler()
    library_folder = openblas.get_lib_dir()
    command = (compiler + ["-O2", "-pipe", "-shared", "-fPIC", SOURCE,
                           "-I" + openblas.get_include_dir(), "-Wno-deprecated-declarations"]
               + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
               + ["-L" + library_folder, "-l" + openblas.get_library(),
                  "-Wl,-rpath," + library_folder])
    version = subprocess.run(compiler + ["--version"], capture_output=True, text=True,
                             check=False, timeout=60).stdout.split("\n")[0]
    return command, "\n".join(command + [version, tf.__version__, tf.__file__,
                                         getattr(openblas, "__version__", "")])
