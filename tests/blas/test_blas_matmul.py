"""The BLAS matmul op multiplies as tf.matmul does, split between any number of threads; it is
used only where allowed, for float32 on a CPU; its build is announced; and t2t_lite falls back
to tf.matmul, saying why in one line, when it cannot be built (no OpenBLAS package, no
compiler, a failed build)."""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.blas import library
from t2t_lite.blas import matmul as blas

SHAPES = [  # m, k, n
    (1, 1, 1), (5, 3, 7),
    (500, 200, 300),  # large enough to be split between the threads: by rows (m >= n)
    (333, 700, 40),  # by rows, not a multiple of the 16-row blocks
    (300, 200, 500), (40, 700, 333),  # by columns
    (0, 4, 3), (3, 0, 4), (3, 4, 0),  # empty products; k = 0 gives zeros
]
TRANSPOSES = [(False, False), (False, True), (True, False), (True, True)]


def operands(m, k, n, transpose_a, transpose_b, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=[k, m] if transpose_a else [m, k]).astype(np.float32)
    b = rng.normal(size=[n, k] if transpose_b else [k, n]).astype(np.float32)
    return a, b


def assert_product(got, a, b, transpose_a, transpose_b):
    want = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
    assert got.shape == want.shape
    k = a.shape[0 if transpose_a else 1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(k, 1) ** 0.5)


@pytest.mark.parametrize("transpose_a, transpose_b", TRANSPOSES)
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_products_equal_tf_matmul(blas_op, m, k, n, transpose_a, transpose_b):
    a, b = operands(m, k, n, transpose_a, transpose_b)
    got = blas_op.t2t_lite_blas_mat_mul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    assert_product(got.numpy(), a, b, transpose_a, transpose_b)
    want = tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-4)


def run_python(code, **environment):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env={**os.environ, **environment}, timeout=300)


@pytest.mark.parametrize("threads", [1, 3, 4])
def test_the_same_products_on_any_number_of_threads(blas_op, threads):
    """1 thread: one sgemm call; 3 and 4: the product split into that many blocks of rows or
    columns, whatever the machine's cores."""
    result = run_python(f"""
        import numpy as np, tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads({threads})
        from t2t_lite.blas import library
        op = library.load().t2t_lite_blas_mat_mul
        rng = np.random.default_rng(1)
        for m, k, n in {SHAPES[2:6]}:
            for ta, tb in {TRANSPOSES}:
                a = rng.normal(size=[k, m] if ta else [m, k]).astype(np.float32)
                b = rng.normal(size=[n, k] if tb else [k, n]).astype(np.float32)
                got = op(a, b, transpose_a=ta, transpose_b=tb).numpy()
                want = (a.T if ta else a) @ (b.T if tb else b)
                print("ok" if np.allclose(got, want, rtol=1e-5, atol=1e-3) else
                      f"wrong: {{m}}x{{k}}x{{n}} {{ta}} {{tb}}")
        """)
    lines = result.stdout.split()
    assert lines == ["ok"] * 16, result.stdout + result.stderr


def test_bad_shapes_are_refused(blas_op):
    op = blas_op.t2t_lite_blas_mat_mul
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="inner|[Dd]imension"):
        op(tf.zeros([2, 3]), tf.zeros([4, 5]))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="rank|matri"):
        op(tf.zeros([2, 3, 4]), tf.zeros([4, 5]))


def traced_op_types(a, b):
    """The op types of blas.matmul(a^T, b) traced here (the kernel is chosen when tracing)."""
    product = tf.function(lambda a, b: blas.matmul(a, b, transpose_a=True))
    return {op.type for op in product.get_concrete_function(a, b).graph.get_operations()}


def test_used_only_where_allowed_and_for_float32(blas_op):
    a, b = (tf.constant(x) for x in operands(64, 32, 16, True, False))
    assert "T2tLiteBlasMatMul" not in traced_op_types(a, b)  # not allowed: tf.matmul
    with blas.allowed():
        assert blas.in_use(a, b)
        assert "T2tLiteBlasMatMul" in traced_op_types(a, b)
        assert not blas.in_use(tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16))
        with blas.allowed(False):  # XLA steps turn it off inside an allowed block
            assert not blas.in_use(a, b)
    assert not blas.in_use(a, b)


def test_turned_off_by_the_environment_variable():
    result = run_python("""
        import tensorflow as tf
        from t2t_lite.blas import matmul as blas
        with blas.allowed():
            print("in use:", blas.in_use(tf.zeros([2, 2]), tf.zeros([2, 2])))
        """, T2T_LITE_BLAS="0")
    assert "in use: False" in result.stdout, result.stderr


FALLBACK = """
    import numpy as np, sys, tensorflow as tf
    from t2t_lite.blas import matmul as blas
    a, b = tf.ones([3, 2]), tf.ones([3, 4])
    with blas.allowed():
        print("in use:", blas.in_use(a, b))
        print("product:", blas.matmul(a, b, transpose_a=True).numpy().tolist())
    """


def fallback_line(stderr):
    """The one console line of a fallback: the CPU tuning chosen, with the reason (beside
    TensorFlow's own start-up lines)."""
    lines = [line for line in stderr.splitlines() if "BLAS" in line or "CPU tuning" in line]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("CPU tuning: oneDNN "), stderr
    assert "weight gradients by TensorFlow's matmul, inter_op 0 (" in lines[0], stderr
    return lines[0]


def test_without_a_compiler_tf_matmul_and_one_line_saying_why(tmp_path):
    result = run_python(FALLBACK, CXX=os.path.join(str(tmp_path), "no-such-compiler"),
                        T2T_LITE_CACHE=str(tmp_path / "cache"), T2T_LITE_CPU_TUNING="default")
    assert "in use: False" in result.stdout, result.stderr
    assert "product: " + str([[3.0] * 4] * 2) in result.stdout
    assert fallback_line(result.stderr).endswith(
        f"; no BLAS op: no C++ compiler (set CXX, or install g++): {tmp_path}/no-such-compiler)")
    assert not (tmp_path / "cache").exists()


def test_without_the_openblas_package_tf_matmul_and_one_line_saying_how_to_install_it(tmp_path):
    hidden = "import sys\nsys.modules['scipy_openblas32'] = None  # as if not installed\n"
    result = run_python(hidden + textwrap.dedent(FALLBACK), T2T_LITE_CACHE=str(tmp_path),
                        T2T_LITE_CPU_TUNING="onednn+blas")
    assert "in use: False" in result.stdout, result.stderr
    assert "product: " + str([[3.0] * 4] * 2) in result.stdout
    assert fallback_line(result.stderr).endswith(
        "; no BLAS op: the scipy-openblas32 package is not installed "
        "(pip install 't2t_lite[blas]'))")
    # Asked for directly, the library says the same.
    result = run_python(hidden + textwrap.dedent(LOAD), T2T_LITE_CACHE=str(tmp_path))
    assert "loaded: False" in result.stdout
    assert ("BLAS matmul op unavailable (the scipy-openblas32 package is not installed "
            "(pip install 't2t_lite[blas]'") in result.stderr
    assert not list(tmp_path.iterdir())


def fake_compiler(tmp_path, body):
    """A CXX that answers --version, counts its compilations in calls.txt and runs `body`
    (sh, with the library's path in $out)."""
    compiler = tmp_path / "fake-compiler"
    compiler.write_text("#!/bin/sh\n"
                        "[ \"$1\" = --version ] && { echo fake 1.0; exit 0; }\n"
                        f"echo compiled >> {tmp_path / 'calls.txt'}\n"
                        "for argument; do out=$argument; done\n"  # the last: -o's path
                        + body)
    compiler.chmod(0o755)
    return str(compiler)


def compilations(tmp_path):
    calls = tmp_path / "calls.txt"
    return len(calls.read_text().splitlines()) if calls.exists() else 0


LOAD = """
    from t2t_lite.blas import library
    print("loaded:", library.load() is not None)
    """


def test_a_compile_error_is_named_kept_and_not_repeated(tmp_path):
    compiler = fake_compiler(tmp_path,
                             "echo 'blas_matmul.cc:1: error: something is wrong' >&2\n"
                             "echo 'collect2: error: ld returned 1 exit status' >&2\n"
                             "exit 1\n")
    environment = {"CXX": compiler, "T2T_LITE_CACHE": str(tmp_path / "cache")}
    result = run_python(LOAD, **environment)
    assert "loaded: False" in result.stdout, result.stderr
    # Announced before it starts: what, why, how long, where, and how to do without it.
    announced = [line for line in result.stderr.splitlines() if "BLAS" in line][0]
    assert announced == (
        "compiling the BLAS op of t2t_lite's weight gradients (OpenBLAS, faster than "
        f"TensorFlow's matmul on some CPUs) from blas_matmul.cc with {compiler} against this "
        "TensorFlow: about 10 s, once (at most 600 s); cached in "
        f"{tmp_path / 'cache' / 'blas_op'}; T2T_LITE_BLAS=0 or --cpu_tuning=onednn does "
        "without it")
    assert "failed: blas_matmul.cc:1: error: something is wrong; its output: " in result.stderr
    logs = list((tmp_path / "cache" / "blas_op").glob("*.log"))
    assert len(logs) == 1 and "collect2" in logs[0].read_text()
    assert not list((tmp_path / "cache").rglob("*.so")) + list(
        (tmp_path / "cache").rglob("*.incomplete"))
    # The next process reads the log instead of compiling again.
    result = run_python(LOAD, **environment)
    assert "loaded: False" in result.stdout, result.stderr
    assert "an earlier build from the same inputs failed (its output: " + str(logs[0]) in (
        result.stderr)
    assert compilations(tmp_path) == 1
    logs[0].unlink()  # as the message says: the next process tries again
    run_python(LOAD, **environment)
    assert compilations(tmp_path) == 2


def test_a_library_that_does_not_load_is_built_once_and_remembered(tmp_path):
    compiler = fake_compiler(tmp_path, "echo 'not a shared library' > \"$out\"\n")
    environment = {"CXX": compiler, "T2T_LITE_CACHE": str(tmp_path / "cache")}
    result = run_python(LOAD, **environment)
    assert "loaded: False" in result.stdout, result.stderr
    assert "built, but it does not load" in result.stderr
    assert compilations(tmp_path) == 1  # not built a second time in the same process
    logs = list((tmp_path / "cache" / "blas_op").glob("*.log"))
    assert len(logs) == 1 and not list((tmp_path / "cache").rglob("*.so"))
    result = run_python(LOAD, **environment)
    assert "an earlier build from the same inputs failed" in result.stderr
    assert compilations(tmp_path) == 1


def test_built_once_then_taken_from_the_cache_and_rebuilt_if_damaged(blas_op, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv(library.CACHE_VARIABLE, str(tmp_path))
    path = library.built_library()
    built = os.stat(path).st_mtime_ns
    assert library.built_library() == path
    assert os.stat(path).st_mtime_ns == built
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # no leftovers
    # A library damaged on disk is built again by the next process that loads it.
    with open(path, "w") as damaged:
        damaged.write("half a library")
    result = run_python(LOAD, T2T_LITE_CACHE=str(tmp_path))
    assert "loaded: True" in result.stdout, result.stderr
    assert "does not load" in result.stderr and "building it again" in result.stderr
    assert os.path.getsize(path) > 1000


def test_installs_in_other_folders_share_the_cached_library(blas_op, tmp_path, monkeypatch):
    copy = tmp_path / "elsewhere" / "blas_matmul.cc"
    copy.parent.mkdir()
    shutil.copyfile(library.SOURCE, copy)
    here = library.library_path()
    monkeypatch.setattr(library, "SOURCE", str(copy))
    assert library.library_path() == here
    copy.write_bytes(copy.read_bytes() + b"\n// changed\n")
    assert library.library_path() != here
