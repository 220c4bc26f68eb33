"""What every benchmark script reports besides its own numbers: the machine it ran on, its float32
matmul rates, and its results as a JSON file (timings only compare within one run on one
machine).

Matmul rates. Which kernels multiply float32 matrices fastest depends on the CPU: TensorFlow's
own (Eigen) kernels, TensorFlow with oneDNN (TF_ENABLE_ONEDNN_OPTS=1, read once when
TensorFlow's library loads), XLA's, or the BLAS library under numpy. `matmul_backends` measures
each of them on the shapes it is given, each backend in a process of its own so that its
environment is set before the library loads, and the best of them is the hardware's float32
limit that MFU figures are measured against. This file also runs as that process:

    python reporting.py matmul tensorflow|numpy SHAPE[,SHAPE...] RUNS

(SHAPE: m x k x n, written "2048x2048x2048"), printing one line "MATMUL {json}".
"""
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ONEDNN = "TF_ENABLE_ONEDNN_OPTS"
# name: (library, environment changes; None removes the variable). The numpy process runs
# without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which pin OpenBLAS to an older, slower kernel
# in current numpy wheels when set (e.g. for another program's sake).
MATMUL_BACKENDS = {
    "tf": ("tensorflow", {ONEDNN: "0"}),
    "tf_onednn": ("tensorflow", {ONEDNN: "1"}),
    "numpy": ("numpy", {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None}),
}
SQUARE = (2048, 2048, 2048)


CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# Words of a model name that name a CPU line, with its maker (the model name may lack it).
CPU_LINES = (("EPYC", "AMD"), ("Threadripper", "AMD"), ("Ryzen", "AMD"), ("Opteron", "AMD"),
             ("Xeon", "Intel"), ("Core", "Intel"), ("Atom", "Intel"), ("Pentium", "Intel"),
             ("Celeron", "Intel"))


def cpu_line(model_name: str) -> str:
    """The CPU's line from its model name: "AMD EPYC" for "AMD EPYC 7B13 64-Core Processor",
    "Intel Xeon" for "Intel(R) Xeon(R) Platinum 8488C"; a name of no known line comes back
    without trademarks, clock and "Processor"."""
    words = re.sub(r"\((R|TM|tm|r)\)|[®™]|@.*$|\b\d+-Core\b|\bProcessor\b|\bCPU\b", " ",
                   model_name or "").split()
    for line, maker in CPU_LINES:
        if line in words:
            return f"{maker} {line}"
    return " ".join(words) or "unknown CPU"


def cpu_kind(model_name: str, flags) -> str:
    """A short label of what the CPU multiplies with: its line and its widest float32 and
    bfloat16 vector instructions, e.g. "AMD EPYC, AVX2", "AMD EPYC, AVX-512 + AVX512_BF16",
    "Intel Xeon, AVX-512 + AVX512_BF16 + AMX". Without x86 flags: the line alone."""
    flags = set(flags)
    if not flags:
        return cpu_line(model_name)
    if "avx512f" in flags:
        isa = ["AVX-512"] + (["AVX512_BF16"] if "avx512_bf16" in flags else [])
    else:
        isa = ["AVX2" if "avx2" in flags else "no AVX2"]
    if flags & {"amx_tile", "amx_bf16", "amx_int8"}:
        isa.append("AMX")
    return f"{cpu_line(model_name)}, {' + '.join(isa)}"


def cpu_description(cpuinfo: str) -> dict:
    """The first processor of a /proc/cpuinfo text: {"model_name", "vendor", "family",
    "model", "stepping" (None where the text lacks them, e.g. off x86), "flags": {name: bool
    for CPU_FLAGS}, "kind": cpu_kind}."""
    fields = {}
    for line in cpuinfo.strip().split("\n\n")[0].splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())

    def number(key):
        value = fields.get(key, "")
        return int(value) if value.isdigit() else None

    model_name = fields.get("model name")
    return {"model_name": model_name, "vendor": fields.get("vendor_id"),
            "family": number("cpu family"), "model": number("model"),
            "stepping": number("stepping"), "flags": {name: name in flags for name in CPU_FLAGS},
            "kind": cpu_kind(model_name, flags)}


def machine() -> dict:
    """The CPU, cores, memory and the TensorFlow and Keras versions. "cpu" is the CPU's kind
    (cpu_kind: its line and its widest vector instructions, e.g. "AMD EPYC, AVX-512 +
    AVX512_BF16"), which every table header prints ("AMD EPYC, AVX2, 2 cores, TF 2.21.0");
    "cpu_kind" the same; "cpu_model" /proc/cpuinfo's model name; "cpu_vendor", "cpu_family",
    "cpu_model_number", "cpu_stepping"; "cpu_flags" {avx2, avx512f, avx512_bf16, amx_tile,
    amx_bf16, amx_int8: present}; "avx512f" as before."""
    import keras
    import tensorflow as tf
    with open("/proc/cpuinfo", encoding="utf-8") as cpu, open("/proc/meminfo") as memory:
        cpu, memory_kb = cpu.read(), re.search(r"MemTotal:\s*(\d+)", memory.read()).group(1)
    described = cpu_description(cpu)
    return {"cpu": described["kind"], "cpu_kind": described["kind"],
            "cpu_model": described["model_name"], "cpu_vendor": described["vendor"],
            "cpu_family": described["family"], "cpu_model_number": described["model"],
            "cpu_stepping": described["stepping"], "cpu_flags": described["flags"],
            "cores": os.cpu_count(), "avx512f": described["flags"]["avx512f"],
            "memory_gb": round(int(memory_kb) / 2**20, 1), "tensorflow": tf.__version__,
            "keras": keras.__version__, "onednn": onednn_enabled()}


def onednn_enabled() -> bool:
    """Whether this process's TensorFlow runs oneDNN's kernels (decided when it loaded)."""
    from tensorflow.python.util import _pywrap_util_port
    return bool(_pywrap_util_port.IsMklEnabled())


def child_environment(changes: dict) -> dict:
    """A copy of this process's environment with `changes` applied (None removes a
    variable): the environment of a subprocess that must load its libraries differently."""
    environment = dict(os.environ)
    for name, value in changes.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return environment


def run_child(command: list, environment: dict, marker: str, log_path: str = None) -> dict:
    """Runs `command` (a benchmark's own process) with `environment` and returns the JSON of
    its last output line that starts with `marker` and a space. Its whole output goes to
    `log_path` if given; a failure shows the end of it."""
    output = subprocess.run(command, capture_output=True, text=True, env=environment)
    if log_path:
        with open(log_path, "w", encoding="utf-8") as log:
            log.write(output.stdout + output.stderr)
    lines = [line for line in output.stdout.splitlines() if line.startswith(marker + " ")]
    if output.returncode or not lines:
        print((output.stdout + output.stderr)[-3000:])
        raise ChildFailed(f"{os.path.basename(command[1])} {' '.join(command[2:3])} failed "
                          f"(exit status {output.returncode})", output.returncode)
    return json.loads(lines[-1][len(marker) + 1:])


class ChildFailed(RuntimeError):
    """A benchmark's subprocess ended without its result line."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


def square_and(shapes) -> list:
    """SQUARE, then `shapes` without it: the products whose rates give a run's best rate."""
    return [SQUARE] + [shape for shape in shapes if shape != SQUARE]


def shape_key(shape) -> str:
    """(m, k, n) as "mxkxn", the form shapes take in tables and JSON."""
    return "x".join(map(str, shape))


def matmul_gflops(jit, runs=10, n=2048, shape=None):
    """GFLOP/s of `runs` float32 tf.matmuls in this process (eager, or XLA-compiled), each timed
    apart until its result is read: n x n by n x n, or (m, k, n) for m x k by k x n."""
    import tensorflow as tf
    m, k, n = shape or (n, n, n)
    a, b = tf.random.uniform([m, k], seed=1), tf.random.uniform([k, n], seed=2)
    matmul = tf.function(tf.linalg.matmul, jit_compile=True) if jit else tf.linalg.matmul
    rates = []
    for _ in range(runs + 1):  # the first run compiles and warms the caches
        start = time.perf_counter()
        matmul(a, b)[0, 0].numpy()
        rates.append(2 * m * k * n / (time.perf_counter() - start) / 1e9)
    return rates[1:]


def numpy_matmul_gflops(runs=10, shape=SQUARE):
    """GFLOP/s of `runs` float32 numpy matmuls of m x k by k x n, each timed apart."""
    import numpy as np
    m, k, n = shape
    generator = np.random.default_rng(1)
    a = generator.random((m, k), dtype=np.float32)
    b = generator.random((k, n), dtype=np.float32)
    rates = []
    for _ in range(runs + 1):  # the first run warms the caches and the thread pool
        start = time.perf_counter()
        np.matmul(a, b)
        rates.append(2 * m * k * n / (time.perf_counter() - start) / 1e9)
    return rates[1:]


def tf_matmul_rates(shapes, jit=False, runs=10) -> dict:
    """{"mxkxn": median GFLOP/s} of this process's tf.matmul on each shape alone."""
    return {shape_key(shape): statistics.median(matmul_gflops(jit, runs=runs, shape=shape))
            for shape in shapes}


def flop_weighted_gflops(rates: dict, flops: dict) -> float:
    """The rate of all the matmuls of `flops` ({"mxkxn": FLOPs}) if each shape ran at its own
    rate in `rates` ({"mxkxn": GFLOP/s}): total FLOPs over total time."""
    return sum(flops.values()) / sum(flops[key] / rates[key] for key in flops)


def blas_info() -> dict:
    """The BLAS library under numpy and the kernel it runs: threadpoolctl's report if it is
    installed, else numpy's build configuration and, for OpenBLAS, the core type it chose."""
    try:
        import threadpoolctl
        return {"source": "threadpoolctl", "libraries": [
            {key: info.get(key) for key in ("internal_api", "version", "architecture",
                                            "num_threads", "filepath")}
            for info in threadpoolctl.threadpool_info() if info.get("user_api") == "blas"]}
    except ImportError:
        pass
    import numpy as np
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    info = {"source": "numpy.show_config", "name": blas.get("name"),
            "version": blas.get("version"), "configuration": blas.get("openblas configuration")}
    core = openblas_core()
    if core:
        info["architecture"] = core
    return info


def openblas_core():
    """The core type (e.g. "Haswell", "Zen") that the OpenBLAS numpy loaded runs its kernels
    for, from OpenBLAS's own openblas_get_corename; None if it is not OpenBLAS."""
    import ctypes
    with open("/proc/self/maps", encoding="utf-8") as maps:
        paths = sorted({line.split()[-1] for line in maps
                        if "openblas" in line.split()[-1].lower() and ".so" in line.split()[-1]})
    for path in paths:
        library = ctypes.CDLL(path)
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_"):
                function = getattr(library, f"{prefix}openblas_get_corename{suffix}", None)
                if function is not None:
                    function.restype = ctypes.c_char_p
                    return function().decode()
    return None


def measure_matmuls_here(library: str, shapes, runs: int) -> dict:
    """The measurement of one backend process: {"mode": {"mxkxn": GFLOP/s}} (TensorFlow:
    "eager" and "xla"; numpy: "numpy") and what ran them."""
    if library == "numpy":
        import numpy as np
        return {"rates": {"numpy": {shape_key(s): statistics.median(numpy_matmul_gflops(runs, s))
                                    for s in shapes}},
                "numpy": np.__version__, "blas": blas_info()}
    import tensorflow as tf
    return {"rates": {name: tf_matmul_rates(shapes, jit=name == "xla", runs=runs)
                      for name in ("eager", "xla")},
            "tensorflow": tf.__version__, "onednn": onednn_enabled()}


def matmul_backends(shapes, runs=10) -> dict:
    """Float32 matmul rates of every backend of MATMUL_BACKENDS on each (m, k, n) of `shapes`,
    each backend in a subprocess with its environment: {"rates": {"tf eager": {"mxkxn": median
    GFLOP/s of `runs`}, "tf xla", "tf_onednn eager", "tf_onednn xla", "numpy"}, "backends":
    {name: what ran it (library version, oneDNN on, BLAS)}}."""
    result = {"rates": {}, "backends": {}}
    argument = ",".join(shape_key(shape) for shape in shapes)
    for name, (library, changes) in MATMUL_BACKENDS.items():
        measured = run_child(
            [sys.executable, os.path.abspath(__file__), "matmul", library, argument, str(runs)],
            child_environment({"TF_CPP_MIN_LOG_LEVEL": "3", **changes}), "MATMUL")
        for mode, rates in measured.pop("rates").items():
            result["rates"][name if mode == library else f"{name} {mode}"] = rates
        result["backends"][name] = {"environment": changes, **measured}
    return result


def best_rate(measurements: dict) -> dict:
    """The highest rate of any backend on any shape in any of `measurements` ({"before": a
    matmul_backends result, "after": another, ...}): {"gflops", "backend", "shape", "when"}."""
    gflops, backend, shape, when = max(
        (rate, backend, shape, when) for when, measured in measurements.items()
        for backend, rates in measured["rates"].items() for shape, rate in rates.items())
    return {"gflops": gflops, "backend": backend, "shape": shape, "when": when}


def profiled_operations(function):
    """Runs `function` under tf.profiler: (its result, a list of {"name", "type",
    "self_seconds", "occurrences"}, one per TensorFlow operation, from the profiler's own
    framework_op_stats tool; idle time left out). Self time adds up every thread."""
    import tensorflow as tf
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin
    with tempfile.TemporaryDirectory() as log_dir:
        tf.profiler.experimental.start(log_dir)
        result = function()
        tf.profiler.experimental.stop()
        paths = glob.glob(os.path.join(log_dir, "**", "*.xplane.pb"), recursive=True)
        data, ok = _pywrap_profiler_plugin.xspace_to_tools_data(paths, "framework_op_stats", {})
    if not ok:
        raise RuntimeError(f"the profiler's framework_op_stats tool failed: {data[:200]!r}")
    table = json.loads(data)[0]
    columns = [column["id"] for column in table["cols"]]
    operations = []
    for row in table["rows"]:
        values = dict(zip(columns, (cell.get("v") for cell in row["c"])))
        if values["type"] != "IDLE":
            operations.append({"name": values["operation"], "type": values["type"],
                               "self_seconds": values["total_self_time"] / 1e6,
                               "occurrences": int(values["occurrences"])})
    return result, operations


def write_json(path: str, result: dict):
    """Writes `result` to `path` (its folder created if missing) and says so."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__" and sys.argv[1:2] == ["matmul"]:
    _, _, LIBRARY, SHAPES, RUNS = sys.argv
    SHAPE_LIST = [tuple(int(size) for size in key.split("x")) for key in SHAPES.split(",")]
    print("MATMUL " + json.dumps(measure_matmuls_here(LIBRARY, SHAPE_LIST, int(RUNS))))
