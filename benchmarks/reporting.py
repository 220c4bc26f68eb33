"""What every benchmark script reports besides its own numbers: the machine it ran on (and its
matmul rate), and its results as a JSON file (timings only compare within one run on one
machine)."""
import json
import os
import re
import time

import keras
import tensorflow as tf


def machine() -> dict:
    """CPU model, cores, AVX-512, memory and the TensorFlow and Keras versions."""
    with open("/proc/cpuinfo", encoding="utf-8") as cpu, open("/proc/meminfo") as memory:
        cpu, memory_kb = cpu.read(), re.search(r"MemTotal:\s*(\d+)", memory.read()).group(1)
    return {"cpu": re.search(r"model name\s*: (.*)", cpu).group(1), "cores": os.cpu_count(),
            "avx512f": " avx512f" in cpu, "memory_gb": round(int(memory_kb) / 2**20, 1),
            "tensorflow": tf.__version__, "keras": keras.__version__}


def matmul_gflops(jit, runs=10, n=2048, shape=None):
    """GFLOP/s of `runs` float32 matmuls (eager, or XLA-compiled), each timed apart: n x n by
    n x n, or (m, k, n) for m x k by k x n."""
    m, k, n = shape or (n, n, n)
    a, b = tf.random.uniform([m, k], seed=1), tf.random.uniform([k, n], seed=2)
    matmul = tf.function(tf.linalg.matmul, jit_compile=True) if jit else tf.linalg.matmul
    rates = []
    for _ in range(runs + 1):  # the first run compiles and warms the caches
        start = time.perf_counter()
        matmul(a, b)[0, 0].numpy()
        rates.append(2 * m * k * n / (time.perf_counter() - start) / 1e9)
    return rates[1:]


def write_json(path: str, result: dict):
    """Writes `result` to `path` (its folder created if missing) and says so."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
