"""oneDNN or TensorFlow's own CPU kernels, chosen before TensorFlow loads, by measurement.

TensorFlow (2.9 and later) runs its matrix multiplies through oneDNN only on x86 CPUs with
AVX-512 VNNI, AVX-512 BF16 or AMX; on the AVX2 CPUs of many machines (AMD EPYC among them) it
keeps its own Eigen kernels, which reached well below the hardware's float32 rate on the Zen 3
measured (benchmarks/README.md, "oneDNN"). Which of the two pays is measured once per CPU model
and TensorFlow version (t2t_lite/kernel_choice.py); the switch is the environment variable
TF_ENABLE_ONEDNN_OPTS, read once when TensorFlow's library loads, so it must be set before
`import tensorflow`.
"""
from t2t_lite import kernel_choice

ONEDNN_VARIABLE = kernel_choice.ONEDNN_VARIABLE


def prefer_onednn() -> bool:
    """Sets oneDNN as the cached measurement chose it for this CPU and TensorFlow (today's
    default, on for x86-64, when nothing is cached), never measuring and touching nothing but
    oneDNN: TF_ENABLE_ONEDNN_OPTS set by the user wins. Returns whether oneDNN will be on; has
    no effect once TensorFlow is loaded. The programs apply the whole choice
    (kernel_choice.apply, in bin/common.py); the tests take this part only."""
    applied = kernel_choice.apply(kernel_choice.CACHED, may_measure=False, announce=False,
                                 onednn_only=True)
    return applied.choice.onednn
