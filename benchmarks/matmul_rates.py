"""The matmul rates that MFU is measured against (train_speed.py, profile_step.py): in float32
TensorFlow's own kernels, oneDNN's, XLA's and numpy's BLAS, and where the CPU has AVX512_BF16 or
AMX oneDNN's bfloat16 (issue 34: a bfloat16 step's MFU is against the best bfloat16 rate); each
backend in a process of its own (its environment set before the library loads); the best of a
dtype is the CPU's limit in it. This file is also that process, printing "MATMUL {json}":

    python matmul_rates.py tensorflow|numpy SHAPE[,SHAPE...] RUNS [DTYPE]  (SHAPE: "2048x2048x2048")
"""
import json
import os
import statistics
import sys
import time

import harness

# name: (library, environment changes (None removes the variable), dtype). numpy runs without
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which pin current numpy wheels to a slower kernel.
MATMUL_BACKENDS = {
    "tf": ("tensorflow", {harness.ONEDNN: "0"}, "float32"),
    "tf_onednn": ("tensorflow", {harness.ONEDNN: "1"}, "float32"),
    "numpy": ("numpy", {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None}, "float32"),
    "tf_onednn_bf16": ("tensorflow", {harness.ONEDNN: "1"}, "bfloat16"),  # eager only
}
SQUARE = (2048, 2048, 2048)


def shape_key(shape) -> str:
    """(m, k, n) as "mxkxn", the form shapes take in tables and JSON."""
    return "x".join(map(str, shape))


def square_and(shapes) -> list:
    """SQUARE, then `shapes` without it: the products whose rates give a run's best rate."""
    return [SQUARE] + [shape for shape in shapes if shape != SQUARE]


def timed_gflops(multiply, a, b, flops: float, runs: int) -> float:
    """Median GFLOP/s of `runs` calls of multiply(a, b) after an untimed one (compiling, warming
    the caches and the thread pool)."""
    rates = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        multiply(a, b)
        rates.append(flops / (time.perf_counter() - start) / 1e9)
    return statistics.median(rates[1:])


def tf_matmul_rates(shapes, jit: bool = False, runs: int = 10, dtype: str = "float32") -> dict:
    """{"mxkxn": median GFLOP/s} of this process's tf.matmul (eager, or XLA) on each shape."""
    import tensorflow as tf
    matmul = tf.function(tf.linalg.matmul, jit_compile=True) if jit else tf.linalg.matmul
    rates = {}
    for m, k, n in shapes:
        a, b = (tf.cast(tf.random.uniform(shape, seed=seed), dtype)
                for shape, seed in (([m, k], 1), ([k, n], 2)))
        rates[shape_key((m, k, n))] = timed_gflops(lambda x, y: matmul(x, y)[0, 0].numpy(),
                                                   a, b, 2 * m * k * n, runs)
    return rates


def numpy_matmul_rates(shapes, runs: int = 10) -> dict:
    import numpy as np
    generator, rates = np.random.default_rng(1), {}
    for m, k, n in shapes:
        a = generator.random((m, k), dtype=np.float32)
        b = generator.random((k, n), dtype=np.float32)
        rates[shape_key((m, k, n))] = timed_gflops(np.matmul, a, b, 2 * m * k * n, runs)
    return rates


def flop_weighted_gflops(rates: dict, flops: dict) -> float:
    """The rate of all the matmuls of `flops` ({"mxkxn": FLOPs}) if each shape ran at its own
    rate in `rates`: total FLOPs over total time."""
    return sum(flops.values()) / sum(flops[key] / rates[key] for key in flops)


def blas_info() -> dict:
    """numpy's BLAS and its kernel: threadpoolctl's report, else numpy's build configuration
    and OpenBLAS's core type."""
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
    """The core type (e.g. "Haswell") numpy's OpenBLAS runs its kernels for (its own
    openblas_get_corename), None if it is not OpenBLAS."""
    import ctypes
    with open("/proc/self/maps", encoding="utf-8") as maps:
        paths = sorted({line.split()[-1] for line in maps
                        if "openblas" in line.split()[-1].lower() and ".so" in line.split()[-1]})
    for function in (getattr(ctypes.CDLL(path), prefix + "openblas_get_corename" + suffix, None)
                     for path in paths for prefix in ("", "scipy_") for suffix in ("", "64_")):
        if function is not None:
            function.restype = ctypes.c_char_p
            return function().decode()
    return None


def measure_here(library: str, shapes, runs: int, dtype: str = "float32") -> dict:
    """One backend process: {"rates": {mode: {"mxkxn": GFLOP/s}}} (TensorFlow's modes "eager"
    and, in float32, "xla"; numpy's "numpy") and what ran them."""
    if library == "numpy":
        import numpy as np
        return {"rates": {"numpy": numpy_matmul_rates(shapes, runs)}, "numpy": np.__version__,
                "blas": blas_info()}
    import tensorflow as tf
    return {"rates": {mode: tf_matmul_rates(shapes, jit=mode == "xla", runs=runs, dtype=dtype)
                      for mode in ("eager", "xla")[:2 if dtype == "float32" else 1]},
            "tensorflow": tf.__version__, "onednn": harness.onednn_enabled()}


def matmul_backends(shapes, runs: int = 10, dense_flops: dict = None,
                    bfloat16: bool = False) -> dict:
    """Every backend (the bfloat16 ones with `bfloat16`) on each (m, k, n) of `shapes`:
    {"rates": {"tf eager" | "tf xla" | "tf_onednn eager" | "tf_onednn xla" | "numpy" |
    "tf_onednn_bf16 eager": {"mxkxn": GFLOP/s}}, "backends": {name: what ran it}}, and with
    `dense_flops` ({"mxkxn": FLOPs}) each backend's "step_weighted" rate."""
    result = {"rates": {}, "backends": {}}
    argument = ",".join(shape_key(shape) for shape in shapes)
    for name, (library, changes, dtype) in MATMUL_BACKENDS.items():
        if dtype == "bfloat16" and not bfloat16:
            continue
        measured = harness.run_child(
            [sys.executable, os.path.abspath(__file__), library, argument, str(runs), dtype],
            harness.child_environment({"TF_CPP_MIN_LOG_LEVEL": "3", **changes}), "MATMUL")
        for mode, rates in measured.pop("rates").items():
            result["rates"][name if mode == library else f"{name} {mode}"] = rates
        result["backends"][name] = {"environment": changes, "dtype": dtype, **measured}
    if dense_flops:
        result["step_weighted"] = {backend: flop_weighted_gflops(rates, dense_flops)
                                   for backend, rates in result["rates"].items()}
    return result


def best_rate(measurements: dict, dtype: str = "float32") -> dict:
    """The highest rate in `dtype` of any backend on any shape in any of `measurements`
    ({"before": a matmul_backends result, "after": ...}): {"gflops", "backend", "shape", "when"},
    None if no backend ran in that dtype."""
    gflops, backend, shape, when = max((
        (rate, backend, shape, when) for when, measured in measurements.items()
        for backend, rates in measured["rates"].items() for shape, rate in rates.items()
        if MATMUL_BACKENDS[backend.split()[0]][2] == dtype), default=(None,) * 4)
    return gflops and {"gflops": gflops, "backend": backend, "shape": shape, "when": when}


if __name__ == "__main__":
    harness.print_result("MATMUL", measure_here(
        sys.argv[1], [tuple(int(size) for size in key.split("x")) for key in sys.argv[2].split(
            ",")], int(sys.argv[3]), *sys.argv[4:]))
