"""The fastest float32 CPU kernels TensorFlow has, chosen before TensorFlow loads.

TensorFlow (2.9 and later) runs its matrix multiplies through oneDNN only on x86 CPUs with
AVX-512 VNNI, AVX-512 BF16 or AMX; on the AVX2 CPUs of many machines (AMD EPYC among them) it
keeps its own Eigen kernels, which reach well below the hardware's float32 rate there
(benchmarks/README.md, "oneDNN"). The switch is the environment variable TF_ENABLE_ONEDNN_OPTS,
read once when TensorFlow's library loads, so it must be set before `import tensorflow`.
"""
import os
import platform
import sys

ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def prefer_onednn() -> bool:
    """Asks for oneDNN on x86-64 unless the user chose (TF_ENABLE_ONEDNN_OPTS=0 keeps
    TensorFlow's default kernels). Returns whether oneDNN will be on; has no effect once
    TensorFlow is loaded."""
    if "tensorflow" not in sys.modules and platform.machine().lower() in ("x86_64", "amd64"):
        os.environ.setdefault(ONEDNN_VARIABLE, "1")
    return os.environ.get(ONEDNN_VARIABLE, "").strip().lower() in ("1", "true")
