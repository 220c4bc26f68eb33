"""The BLAS matmul op multiplies as tf.matmul does; it is used only where allowed, for float32
on a CPU, and t2t_lite falls back to tf.matmul when it cannot be built."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.blas import library
from t2t_lite.blas import matmul as blas


def operands(m, k, n, transpose_a, transpose_b, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=[k, m] if transpose_a else [m, k]).astype(np.float32)
    b = rng.normal(size=[n, k] if transpose_b else [k, n]).astype(np.float32)
    return tf.constant(a), tf.constant(b)


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("m, k, n", [
    (1, 1, 1), (5, 3, 7),
    (300, 200, 500),  # large enough to be split between the threads, by rows
    (40, 700, 333),  # split by columns (more columns than rows), not a multiple of the block
    (0, 4, 3), (3, 0, 4), (3, 4, 0),  # empty products; k = 0 gives zeros
])
def test_products_equal_tf_matmul(m, k, n, transpose_a, transpose_b):
    a, b = operands(m, k, n, transpose_a, transpose_b)
    want = tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b).numpy()
    got = library.load().t2t_lite_blas_mat_mul(a, b, transpose_a=transpose_a,
                                               transpose_b=transpose_b).numpy()
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(k, 1) ** 0.5)


def test_bad_shapes_are_refused():
    op = library.load().t2t_lite_blas_mat_mul
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="inner|[Dd]imension"):
        op(tf.zeros([2, 3]), tf.zeros([4, 5]))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="rank|matri"):
        op(tf.zeros([2, 3, 4]), tf.zeros([4, 5]))


def traced_op_types(a, b):
    """The op types of blas.matmul(a^T, b) traced here (the kernel is chosen when tracing)."""
    product = tf.function(lambda a, b: blas.matmul(a, b, transpose_a=True))
    return {op.type for op in product.get_concrete_function(a, b).graph.get_operations()}


def test_used_only_where_allowed_and_for_float32():
    a, b = operands(64, 32, 16, True, False)
    assert "T2tLiteBlasMatMul" not in traced_op_types(a, b)  # not allowed: tf.matmul
    with blas.allowed():
        assert blas.in_use(a, b)
        assert "T2tLiteBlasMatMul" in traced_op_types(a, b)
        assert not blas.in_use(tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16))
        with blas.allowed(False):  # XLA steps turn it off inside an allowed block
            assert not blas.in_use(a, b)
    assert not blas.in_use(a, b)


def run_python(code, **environment):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env={**os.environ, **environment}, timeout=300)


def test_turned_off_by_the_environment_variable():
    result = run_python("""
        import tensorflow as tf
        from t2t_lite.blas import matmul as blas
        with blas.allowed():
            print("in use:", blas.in_use(tf.zeros([2, 2]), tf.zeros([2, 2])))
        """, T2T_LITE_BLAS="0")
    assert "in use: False" in result.stdout, result.stderr


def test_a_failed_build_falls_back_to_tf_matmul_and_says_why(tmp_path):
    result = run_python("""
        import numpy as np, tensorflow as tf
        from t2t_lite.blas import matmul as blas
        a, b = tf.ones([3, 2]), tf.ones([3, 4])
        with blas.allowed():
            print("in use:", blas.in_use(a, b))
            print("product:", blas.matmul(a, b, transpose_a=True).numpy().tolist())
        """, CXX=os.path.join(str(tmp_path), "no-such-compiler"),
        T2T_LITE_CACHE=str(tmp_path / "cache"))
    assert "in use: False" in result.stdout, result.stderr
    assert "product: " + str([[3.0] * 4] * 2) in result.stdout
    assert "BLAS matmul kernels unavailable (no C++ compiler" in result.stderr
    assert not list((tmp_path / "cache").rglob("*.so"))


def test_built_once_then_taken_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(library.CACHE_VARIABLE, str(tmp_path))
    path = library.built_library()
    built = os.stat(path).st_mtime_ns
    assert library.built_library() == path
    assert os.stat(path).st_mtime_ns == built
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # no leftovers
