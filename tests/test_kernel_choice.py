"""The CPU kernels chosen by measurement: `choose` on injected timings (the fastest, today's
default within the noise margin and on ties), the settings, the cache, `apply`, and one real
measurement of tiny products in a subprocess."""
import json
import os
import subprocess
import sys

import pytest

from t2t_lite import kernel_choice
from t2t_lite.kernel_choice import KernelChoice

DEFAULT = KernelChoice(onednn=True, blas_weight_gradients=True, inter_op_threads=0)
EIGEN = KernelChoice(onednn=False, blas_weight_gradients=True, inter_op_threads=0)
NO_BLAS = KernelChoice(onednn=True, blas_weight_gradients=False, inter_op_threads=0)
INTER_OP_1 = KernelChoice(onednn=True, blas_weight_gradients=True, inter_op_threads=1)
EIGEN_NO_BLAS = KernelChoice(onednn=False, blas_weight_gradients=False, inter_op_threads=0)


# --- choose ------------------------------------------------------------------------------------

def test_the_fastest_wins_when_it_beats_the_default_by_more_than_the_margin():
    # 1.00 s against the default's 1.04 s: 4% > 3%.
    assert kernel_choice.choose({DEFAULT: 1.04, NO_BLAS: 1.00}, DEFAULT) == NO_BLAS
    assert kernel_choice.choose({DEFAULT: 2.0, EIGEN: 1.5, NO_BLAS: 1.9}, DEFAULT) == EIGEN
    assert kernel_choice.choose({DEFAULT: 2.0, INTER_OP_1: 1.8}, DEFAULT) == INTER_OP_1


def test_within_the_margin_or_tied_the_default_stays():
    # 1.00 * 1.03 = 1.03 >= 1.029: within the margin.
    assert kernel_choice.choose({DEFAULT: 1.029, NO_BLAS: 1.00}, DEFAULT) == DEFAULT
    assert kernel_choice.choose({DEFAULT: 1.0, NO_BLAS: 1.0, EIGEN: 1.0}, DEFAULT) == DEFAULT
    assert kernel_choice.choose({NO_BLAS: 1.0, DEFAULT: 1.0}, DEFAULT) == DEFAULT  # any order
    # margin=0: a hair faster wins.
    assert kernel_choice.choose({DEFAULT: 1.029, NO_BLAS: 1.00}, DEFAULT, margin=0) == NO_BLAS


def test_among_the_close_ones_the_nearest_to_the_default_then_the_faster():
    # Both within 3% of the fastest (EIGEN_NO_BLAS, two parts off the default): one part off.
    timings = {DEFAULT: 1.20, EIGEN_NO_BLAS: 1.00, EIGEN: 1.02, NO_BLAS: 1.01}
    assert kernel_choice.choose(timings, DEFAULT) == NO_BLAS
    # Equal times, equal distance: the first by setting name, whatever the dict's order.
    tied = {NO_BLAS: 1.0, EIGEN: 1.0, DEFAULT: 1.5}
    assert kernel_choice.choose(tied, DEFAULT) == kernel_choice.choose(
        dict(reversed(tied.items())), DEFAULT) == EIGEN  # "eigen+blas" < "onednn"


def test_without_the_default_measured_the_nearest_one_and_without_timings_the_default():
    # The BLAS op did not load: only TensorFlow's weight gradients were timed.
    assert kernel_choice.choose({NO_BLAS: 1.01, EIGEN_NO_BLAS: 1.0}, DEFAULT) == NO_BLAS
    assert kernel_choice.choose({}, DEFAULT) == DEFAULT


def test_today_s_default_is_onednn_blas_and_inter_op_0_on_x86_64(monkeypatch):
    monkeypatch.setattr(kernel_choice, "is_x86_64", lambda: True)
    assert kernel_choice.default_choice() == DEFAULT
    monkeypatch.setattr(kernel_choice, "is_x86_64", lambda: False)
    assert not kernel_choice.default_choice().onednn


# --- settings ----------------------------------------------------------------------------------

def test_settings_and_explicit_choices():
    for name in ("auto", "measure", "default", "cached"):
        assert kernel_choice.parse_setting(name) == name
    assert kernel_choice.parse_setting(None) == "auto"
    assert kernel_choice.parse_setting("onednn+blas") == DEFAULT
    assert kernel_choice.parse_setting("eigen") == EIGEN_NO_BLAS
    assert kernel_choice.parse_setting(" OneDNN+blas+inter_op1 ") == INTER_OP_1
    for choice in (DEFAULT, EIGEN, NO_BLAS, INTER_OP_1, EIGEN_NO_BLAS):
        assert kernel_choice.parse_setting(choice.setting()) == choice
    for wrong in ("blas", "onednn+eigen", "onednn+onednn", "onednn+mkl", "fast"):
        with pytest.raises(kernel_choice.SettingError, match="onednn or eigen"):
            kernel_choice.parse_setting(wrong)


def test_the_flag_is_read_from_the_command_line_before_absl_parses_it():
    read = kernel_choice.setting_from_argv
    assert read(["trainer", "--problem=p", "--cpu_kernels=eigen"]) == "eigen"
    assert read(["trainer", "--cpu_kernels", "onednn", "--cpu_kernels=eigen+blas"]) == "eigen+blas"
    assert read(["trainer", "--", "--cpu_kernels=eigen"]) is None
    assert read(["trainer", "--cpu_kernels_other=x"]) is None


def test_the_console_line():
    applied = kernel_choice.Applied(KernelChoice(True, False, 1), "measured on X")
    assert applied.line() == ("CPU kernels: oneDNN on, weight gradients by TensorFlow's kernels, "
                              "inter_op 1 (measured on X)")


# --- measuring with injected timings -----------------------------------------------------------

def fake_run(seconds, calls=None, onednn_works=True, blas_calls=None):
    """A _run_child returning seconds[(onednn, inter_op)] = (tensorflow, blas) seconds (blas
    None when it was not asked for)."""
    def run(onednn, inter_op_threads, products, repeats, blas):
        if calls is not None:
            calls.append((onednn, inter_op_threads))
        if blas_calls is not None:
            blas_calls.append(blas)
        tensorflow, blas_seconds = seconds[onednn, inter_op_threads]
        return {"onednn": onednn and onednn_works,
                "seconds": {"tensorflow": tensorflow, "blas": blas_seconds if blas else None}}
    return run


@pytest.fixture
def blas_can_be_built(monkeypatch):
    monkeypatch.setattr(kernel_choice, "blas_missing", lambda: None)


NO_PACKAGE = "the scipy-openblas32 package is not installed (pip install 't2t_lite[blas]')"


def test_onednn_on_and_off_then_inter_op_1_under_the_better(monkeypatch, blas_can_be_built):
    monkeypatch.setattr(kernel_choice, "is_x86_64", lambda: True)
    calls = []
    seconds = {(True, 0): (3.0, 2.5), (False, 0): (2.0, 2.2), (False, 1): (1.9, 2.1)}
    timings = kernel_choice.measure(run=fake_run(seconds, calls))
    assert calls == [(True, 0), (False, 0), (False, 1)]  # eigen's 2.0 beat oneDNN's best 2.5
    assert timings == {NO_BLAS: 3.0, DEFAULT: 2.5, EIGEN_NO_BLAS: 2.0, EIGEN: 2.2,
                       KernelChoice(False, False, 1): 1.9, KernelChoice(False, True, 1): 2.1}
    # 1.9 is 5% faster than 2.0, which beat the default by 20%.
    assert kernel_choice.choose(timings) == KernelChoice(False, False, 1)


def test_without_the_blas_op_or_a_switchable_onednn_those_candidates_are_left_out(
        monkeypatch, blas_can_be_built):
    monkeypatch.setattr(kernel_choice, "is_x86_64", lambda: True)
    seconds = {(True, 0): (2.0, None), (False, 0): (2.0, None), (True, 1): (2.0, None),
               (False, 1): (2.0, None)}
    blas_calls = []
    assert set(kernel_choice.measure(run=fake_run(seconds, blas_calls=blas_calls))) == {
        NO_BLAS, EIGEN_NO_BLAS, KernelChoice(True, False, 1)}
    # The op did not load in the first subprocess (which said why): not tried again.
    assert blas_calls == [True, False, False]
    # TensorFlow reports oneDNN off although asked for: only the Eigen timings count.
    timings = kernel_choice.measure(run=fake_run(seconds, onednn_works=False))
    assert set(timings) == {EIGEN_NO_BLAS, KernelChoice(False, False, 1)}


def test_where_the_blas_op_cannot_be_built_it_is_not_measured(monkeypatch):
    monkeypatch.setattr(kernel_choice, "is_x86_64", lambda: True)
    monkeypatch.setattr(kernel_choice, "blas_missing", lambda: NO_PACKAGE)
    seconds = {(True, 0): (3.0, 1.0), (False, 0): (2.0, 1.0), (False, 1): (2.1, 1.0)}
    blas_calls = []
    timings = kernel_choice.measure(run=fake_run(seconds, blas_calls=blas_calls))
    assert blas_calls == [False, False, False]
    assert not any(choice.blas_weight_gradients for choice in timings)


def test_the_step_products_are_transformer_small_s():
    shapes = {(p.rows, p.depth_in, p.depth_out, p.embedding): p.count
              for p in kernel_choice.STEP_PRODUCTS}
    # 3 encoder layers x 4 projections + 3 decoder layers x 8; 3 + 3 feed-forward layers.
    assert shapes == {(4096, 256, 256, False): 36, (4096, 256, 1024, False): 6,
                      (4096, 1024, 256, False): 6, (4096, 256, 8192, True): 1}


# --- the cache and apply -------------------------------------------------------------------------

@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache folder, no settings in the environment, nothing applied, and TensorFlow
    taken as not loaded (apply then sets TF_ENABLE_ONEDNN_OPTS, restored after the test)."""
    monkeypatch.setenv("T2T_LITE_CACHE", str(tmp_path))
    for variable in ("T2T_LITE_CPU_KERNELS", "TF_ENABLE_ONEDNN_OPTS", "T2T_LITE_BLAS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(kernel_choice, "_applied", None)
    monkeypatch.setattr(kernel_choice, "_onednn_set_here", None)
    monkeypatch.setattr(kernel_choice, "_onednn_loaded", lambda: None)
    monkeypatch.setattr(kernel_choice, "is_x86_64", lambda: True)
    monkeypatch.setattr(kernel_choice, "blas_missing", lambda: None)
    return tmp_path


EIGEN_WINS = {(True, 0): (3.0, 2.9), (False, 0): (2.0, 2.5), (False, 1): (2.1, 2.6)}


def test_measured_once_announced_cached_and_then_read(fresh, capsys):
    calls = []
    applied = kernel_choice.apply("auto", run=fake_run(EIGEN_WINS, calls))
    assert applied.choice == EIGEN_NO_BLAS and len(calls) == 3
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert kernel_choice.applied() == applied
    err = capsys.readouterr().err.splitlines()
    path = kernel_choice.cache_path()
    assert path.startswith(str(fresh / "cpu_kernels")) and os.path.exists(path)
    assert err[0].startswith("measuring which CPU kernels pay on ")
    assert f"about 30 s, once; cached in {path}; --cpu_kernels=default" in err[0]
    assert err[1].startswith("CPU kernels: oneDNN off, weight gradients by TensorFlow's kernels,"
                             " inter_op 0 (measured now on ")
    record = json.loads(open(path).read())
    assert record["choice"] == {"onednn": False, "blas_weight_gradients": False,
                                "inter_op_threads": 0}
    assert len(record["timings"]) == 6 and record["noise_margin"] == 0.03
    assert not [name for name in os.listdir(fresh / "cpu_kernels") if name.startswith(".")]
    # The next process reads it: no measurement.
    again = kernel_choice.apply("auto", run=fake_run(EIGEN_WINS, calls))
    assert again.choice == EIGEN_NO_BLAS and len(calls) == 3
    assert f"(measured on {kernel_choice.machine()['cpu']}" in capsys.readouterr().err
    # "measure" measures again.
    kernel_choice.apply("measure", run=fake_run(EIGEN_WINS, calls), announce=False)
    assert len(calls) == 6


def test_the_cache_is_per_cpu_and_tensorflow_version(fresh):
    host = {"cpu": "AMD EPYC 9B14 96-Core Processor", "features": ["AVX2", "AVX-512"],
            "tensorflow": "2.21.0"}
    path = kernel_choice.cache_path(host)
    assert os.path.basename(path) == "amd-epyc-9b14-96-core-processor-avx2-avx-512-tf2.21.0.json"
    assert kernel_choice.cache_path(dict(host, tensorflow="2.22.0")) != path
    assert kernel_choice.cache_path(dict(host, features=["AVX2"])) != path


def test_without_a_cache_nothing_is_measured_unless_allowed(fresh):
    def refuse(*args):
        raise AssertionError("measured")
    for setting, may_measure in (("auto", False), ("cached", True), ("default", True)):
        applied = kernel_choice.apply(setting, may_measure=may_measure, run=refuse,
                                      announce=False)
        assert applied.choice == DEFAULT
    assert "today's default" in applied.reason
    assert not os.path.exists(fresh / "cpu_kernels")


def test_a_damaged_cache_is_measured_again(fresh, capsys):
    path = kernel_choice.cache_path()
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as handle:
        handle.write("{not json")
    assert kernel_choice.apply("auto", run=fake_run(EIGEN_WINS)).choice == EIGEN_NO_BLAS
    assert "does not read" in capsys.readouterr().err
    assert json.load(open(path))["choice"]["onednn"] is False


def test_a_failed_measurement_keeps_the_default_and_caches_nothing(fresh, capsys):
    def broken(*args):
        raise kernel_choice.MeasurementError("the measuring process failed (status 1): boom")
    applied = kernel_choice.apply("auto", run=broken)
    assert applied.choice == DEFAULT and "measurement failed" in applied.reason
    assert "boom" in capsys.readouterr().err
    assert not os.path.exists(kernel_choice.cache_path())


def test_explicit_settings_and_the_user_s_variables_win(fresh, monkeypatch):
    assert kernel_choice.apply("eigen+blas", announce=False).choice == EIGEN
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
    # apply's own TF_ENABLE_ONEDNN_OPTS is not taken for the user's.
    assert kernel_choice.apply("onednn", announce=False).choice == NO_BLAS
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    monkeypatch.setattr(kernel_choice, "_onednn_set_here", None)
    monkeypatch.setenv("T2T_LITE_BLAS", "0")
    applied = kernel_choice.apply("default", announce=False)
    assert applied.choice == EIGEN_NO_BLAS
    assert "TF_ENABLE_ONEDNN_OPTS=0 set by you" in applied.reason
    assert "T2T_LITE_BLAS=0 set by you" in applied.reason
    monkeypatch.setenv("T2T_LITE_CPU_KERNELS", "onednn+inter_op1")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    monkeypatch.delenv("T2T_LITE_BLAS")
    assert kernel_choice.apply(announce=False).choice == KernelChoice(True, False, 1)


def test_after_tensorflow_loaded_onednn_is_what_it_loaded_with(fresh, monkeypatch):
    monkeypatch.setattr(kernel_choice, "_onednn_loaded", lambda: True)
    applied = kernel_choice.apply("eigen", announce=False)
    assert applied.choice.onednn and "as TensorFlow loaded" in applied.reason
    assert "TF_ENABLE_ONEDNN_OPTS" not in os.environ


def test_onednn_only_records_nothing_for_the_blas_op(fresh):
    kernel_choice.apply("onednn", onednn_only=True, announce=False)
    assert kernel_choice.applied() is None and os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"


def test_the_blas_op_is_never_chosen_where_it_cannot_be_built(fresh, monkeypatch, capsys):
    monkeypatch.setattr(kernel_choice, "blas_missing", lambda: NO_PACKAGE)
    for setting in ("default", "onednn+blas", "cached"):
        applied = kernel_choice.apply(setting, announce=False)
        assert applied.choice == NO_BLAS
        assert applied.reason.endswith(f"; no BLAS op: {NO_PACKAGE}")
    kernel_choice.write_cached(kernel_choice.cache_path(), {"choice": DEFAULT})
    assert kernel_choice.apply("auto").choice == NO_BLAS  # measured where it could be built
    assert f"no BLAS op: {NO_PACKAGE})" in capsys.readouterr().err  # the one console line
    # A measurement says what it leaves out and how to have it.
    kernel_choice.apply("measure", run=fake_run(EIGEN_WINS), announce=False)
    assert capsys.readouterr().err.startswith(
        f"measuring which CPU kernels pay on {kernel_choice.machine()['cpu']}, TensorFlow "
        f"{kernel_choice.machine()['tensorflow']} (not the BLAS op: {NO_PACKAGE}): about 30 s")
    kernel_choice.write_cached(kernel_choice.cache_path(), {"choice": DEFAULT})
    monkeypatch.setattr(kernel_choice, "blas_missing", lambda: None)
    assert kernel_choice.apply("auto", announce=False).choice == DEFAULT


def test_the_library_reads_the_applied_choice_else_chooses_as_the_programs_do(fresh, capsys):
    # Not applied: chosen now as the programs other than the trainer choose (never measuring),
    # announced, and then kept.
    chosen = kernel_choice.current()
    assert chosen.choice == DEFAULT and "nothing measured yet" in chosen.reason
    assert capsys.readouterr().err.startswith("CPU kernels: oneDNN on, weight gradients by the "
                                              "BLAS op")
    assert kernel_choice.current() is chosen and not capsys.readouterr().err
    # Applied (by a program, or a library user before importing TensorFlow): that choice.
    applied = kernel_choice.apply("eigen+inter_op1", announce=False)
    assert kernel_choice.current() is applied and applied.choice == KernelChoice(False, False, 1)


def test_importing_changes_nothing_and_loads_no_tensorflow():
    environment = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    program = ("import os, sys; from t2t_lite import kernel_choice, cpu_kernels, atomic_files; "
               "from t2t_lite.blas import library; library.missing(); "
               "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), kernel_choice.applied(), "
               "'tensorflow' in sys.modules)")
    output = subprocess.run([sys.executable, "-c", program], env=environment,
                            capture_output=True, text=True, check=True).stdout.split()
    assert output == ["None", "None", "False"]


# --- in a real process ---------------------------------------------------------------------------

TINY = [kernel_choice.Product(64, 32, 48, 3), kernel_choice.Product(64, 32, 96, 1,
                                                                      embedding=True)]


def cache_with_the_built_op(tmp_path, blas_op):
    """A cache folder whose kernels/ is the one holding the built BLAS op (no compiling)."""
    from t2t_lite.blas import library
    cache = tmp_path / "cache"
    cache.mkdir()
    os.symlink(os.path.dirname(library.library_path()), cache / "kernels")
    return cache


def run_python(code, cache, **variables):
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TF_ENABLE_ONEDNN_OPTS", "T2T_LITE_CPU_KERNELS", "T2T_LITE_BLAS")}
    environment.update(T2T_LITE_CACHE=str(cache), **variables)
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True,
                          text=True, timeout=600)


def test_a_real_measurement_of_tiny_products_is_cached_and_announced(tmp_path, blas_op):
    cache = cache_with_the_built_op(tmp_path, blas_op)
    code = ("from t2t_lite import kernel_choice as k\n"
            f"k.apply('auto', products={TINY!r}).choice\n").replace("Product(", "k.Product(")
    result = run_python(code, cache)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    files = os.listdir(cache / "cpu_kernels")
    assert len(files) == 1 and files[0].endswith(".json")
    path = str(cache / "cpu_kernels" / files[0])
    assert lines[0].startswith("measuring which CPU kernels pay on ") and path in lines[0]
    assert lines[-1].startswith("CPU kernels: oneDNN ") and "measured now on" in lines[-1]
    record = json.load(open(path))
    measured = {(t["onednn"], t["blas_weight_gradients"], t["inter_op_threads"])
                for t in record["timings"]}
    assert {(True, False, 0), (True, True, 0), (False, False, 0), (False, True, 0)} <= measured
    assert len(measured) == 6 and all(t["seconds"] > 0 for t in record["timings"])
    # Then read, not measured; and the BLAS op follows the choice.
    code = ("from t2t_lite import kernel_choice as k\n"
            "a = k.apply('auto')\n"
            "from t2t_lite.blas import matmul\n"
            "print(a.choice.blas_weight_gradients, matmul.available())\n")
    result = run_python(code, cache)
    assert result.returncode == 0, result.stderr
    assert "measuring" not in result.stderr and f"cached in {path}" in result.stderr
    assert result.stdout.split() == [str(record["choice"]["blas_weight_gradients"])] * 2


def test_a_measurement_announces_the_blas_op_s_build_and_tries_it_once(tmp_path):
    # A compiler that fails: the first measuring subprocess announces the build and then says
    # why the op is unavailable, and the trainer's process passes both lines on as they come;
    # the other subprocesses do not try the op again.
    compiler = tmp_path / "failing-compiler"
    compiler.write_text("#!/bin/sh\n"
                        "[ \"$1\" = --version ] && { echo fake 1.0; exit 0; }\n"
                        "echo 'blas_matmul.cc:1: error: broken' >&2\n"
                        "exit 1\n")
    compiler.chmod(0o755)
    code = ("from t2t_lite import kernel_choice as k\n"
            f"k.apply('measure', products={TINY!r})\n").replace("Product(", "k.Product(")
    result = run_python(code, tmp_path / "cache", CXX=str(compiler))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 4, result.stderr
    assert lines[0].startswith("measuring which CPU kernels pay on ")
    assert lines[1].startswith("compiling the BLAS op of t2t_lite's weight gradients ")
    assert f"with {compiler} against this TensorFlow: about 10 s" in lines[1]
    assert lines[1].endswith("T2T_LITE_BLAS=0 or --cpu_kernels=onednn does without it")
    assert lines[2].startswith("BLAS matmul kernels unavailable (")
    assert "blas_matmul.cc:1: error: broken" in lines[2]
    assert lines[3].startswith("CPU kernels: ") and "by TensorFlow's kernels" in lines[3]


def test_the_blas_op_follows_the_applied_choice(tmp_path, blas_op):
    cache = cache_with_the_built_op(tmp_path, blas_op)
    for setting, available in (("onednn", "False"), ("onednn+blas", "True")):
        code = (f"from t2t_lite import kernel_choice as k\nk.apply({setting!r}, announce=False)\n"
                "from t2t_lite.blas import matmul\nprint(matmul.available())\n")
        result = run_python(code, cache)
        assert result.stdout.split() == [available], result.stderr
