"""Which routine multiplies: the BLAS op for the products TensorFlow's CPU matmul runs slowly, or
`tf.matmul`.

On a CPU, TensorFlow's matmul (Eigen's and oneDNN's) runs a product whose first operand is
transposed and whose inner dimension is long, such as a weight gradient x^T dy over a batch's
4,096 tokens, at about half the rate of the same product in OpenBLAS, while it is as fast on
the forward products (benchmarks/README.md, "blas_speed.py"). Training therefore takes
its weight gradients through `matmul`, which runs the op of `library.py` when:

- the caller allows it while the step is traced (`allowed()`: the training step does, unless
  XLA compiles the step, which cannot compile the op). The permission is a context variable,
  which a new thread does not inherit: MirroredStrategy traces each replica in a thread of its
  own, so it must be given inside the replica's function;
- the operands are float32 (under mixed precision the dense layers keep TensorFlow's matmul;
  the fused output layer's products, in float32 there too, still use the op);
- TensorFlow sees no GPU or TPU (the op runs on the CPU only);
- the CPU tuning of this process includes it (`t2t_lite.cpu_tuning.current`: chosen by
  `apply`, which the programs call first and a library user may call before TensorFlow loads,
  else as the programs other than the trainer choose). It is measured against TensorFlow's
  matmul on each CPU model, since it pays on some (Zen 3) and not on others; it is never
  chosen without OpenBLAS (`pip install 't2t_lite[blas]'`) and a C++ compiler, nor when the
  environment variable T2T_LITE_BLAS is 0;
- the op library builds (announced on the console, the first time) and loads (`library.load`).

Otherwise, and always outside `allowed()`, `matmul` is `tf.matmul`. The op has no gradient of
its own: it computes gradients, it is not differentiated.
"""
import contextlib
import contextvars
import functools

import tensorflow as tf

from t2t_lite import cpu_tuning
from t2t_lite.blas import library

SWITCH_VARIABLE = cpu_tuning.BLAS_VARIABLE  # 0 turns the op off

_allowed = contextvars.ContextVar("t2t_lite_blas_allowed", default=False)


@contextlib.contextmanager
def allowed(allow: bool = True):
    """Within the block, `matmul` may run the BLAS op on float32 CPU products (decided when a
    function is traced, so the block must enclose the tracing)."""
    token = _allowed.set(allow)
    try:
        yield
    finally:
        _allowed.reset(token)


def in_use(*operands) -> bool:
    """Whether `matmul` of these operands runs the BLAS op here (see the module docstring)."""
    return (_allowed.get() and all(operand.dtype == tf.float32 for operand in operands)
            and available())


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """The BLAS op can be used in this process: no accelerator, chosen (cpu_tuning),
    library loaded."""
    if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"):
        return False
    if not cpu_tuning.current().choice.blas_weight_gradients:
        return False
    return library.load() is not None


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False):
    """`tf.matmul(a, b, transpose_a, transpose_b)` of two matrices, through the BLAS op when
    `in_use(a, b)`."""
    a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
    if in_use(a, b):
        return library.load().t2t_lite_blas_mat_mul(a, b, transpose_a=transpose_a,
                                                    transpose_b=transpose_b)
    return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
