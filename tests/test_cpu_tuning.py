"""The CPU tuning chosen by measurement: `choose` on injected timings (the fastest, today's
default within the noise margin and on ties), the settings, the cache, `apply`, and one real
measurement of tiny products in a subprocess."""
import json
import os
import subprocess
import sys

import pytest

from t2t_lite import cpu_tuning
from t2t_lite.cpu_tuning import CpuTuning

DEFAULT = CpuTuning(onednn=True, blas_weight_gradients=True, inter_op_threads=0)
EIGEN = CpuTuning(onednn=False, blas_weight_gradients=True, inter_op_threads=0)
NO_BLAS = CpuTuning(onednn=True, blas_weight_gradients=False, inter_op_threads=0)
INTER_OP_1 = CpuTuning(onednn=True, blas_weight_gradients=True, inter_op_threads=1)
EIGEN_NO_BLAS = CpuTuning(onednn=False, blas_weight_gradients=False, inter_op_threads=0)


# --- choose ------------------------------------------------------------------------------------

def test_the_fastest_wins_when_it_beats_the_default_by_more_than_the_margin():
    # 1.00 s against the default's 1.04 s: 4% > 3%.
    assert cpu_tuning.choose({DEFAULT: 1.04, NO_BLAS: 1.00}, DEFAULT) == NO_BLAS
    assert cpu_tuning.choose({DEFAULT: 2.0, EIGEN: 1.5, NO_BLAS: 1.9}, DEFAULT) == EIGEN
    assert cpu_tuning.choose({DEFAULT: 2.0, INTER_OP_1: 1.8}, DEFAULT) == INTER_OP_1


def test_within_the_margin_or_tied_the_default_stays():
    # 1.00 * 1.03 = 1.03 >= 1.029: within the margin.
    assert cpu_tuning.choose({DEFAULT: 1.029, NO_BLAS: 1.00}, DEFAULT) == DEFAULT
    assert cpu_tuning.choose({DEFAULT: 1.0, NO_BLAS: 1.0, EIGEN: 1.0}, DEFAULT) == DEFAULT
    assert cpu_tuning.choose({NO_BLAS: 1.0, DEFAULT: 1.0}, DEFAULT) == DEFAULT  # any order
    # margin=0: a hair faster wins.
    assert cpu_tuning.choose({DEFAULT: 1.029, NO_BLAS: 1.00}, DEFAULT, margin=0) == NO_BLAS


def test_among_the_close_ones_the_nearest_to_the_default_then_the_faster():
    # Both within 3% of the fastest (EIGEN_NO_BLAS, two parts off the default): one part off.
    timings = {DEFAULT: 1.20, EIGEN_NO_BLAS: 1.00, EIGEN: 1.02, NO_BLAS: 1.01}
    assert cpu_tuning.choose(timings, DEFAULT) == NO_BLAS
    # Equal times, equal distance: the first by setting name, whatever the dict's order.
    tied = {NO_BLAS: 1.0, EIGEN: 1.0, DEFAULT: 1.5}
    assert cpu_tuning.choose(tied, DEFAULT) == cpu_tuning.choose(
        dict(reversed(tied.items())), DEFAULT) == EIGEN  # "eigen+blas" < "onednn"


def test_without_the_default_measured_the_nearest_one_and_without_timings_the_default():
    # The BLAS op did not load: only TensorFlow's weight gradients were timed.
    assert cpu_tuning.choose({NO_BLAS: 1.01, EIGEN_NO_BLAS: 1.0}, DEFAULT) == NO_BLAS
    assert cpu_tuning.choose({}, DEFAULT) == DEFAULT


def test_today_s_default_is_onednn_blas_and_inter_op_0_on_x86_64(monkeypatch):
    monkeypatch.setattr(cpu_tuning, "is_x86_64", lambda: True)
    assert cpu_tuning.default_choice() == DEFAULT
    monkeypatch.setattr(cpu_tuning, "is_x86_64", lambda: False)
    assert not cpu_tuning.default_choice().onednn


# --- settings ----------------------------------------------------------------------------------

def test_settings_and_explicit_choices():
    for name in ("auto", "measure", "default", "cached"):
        assert cpu_tuning.parse_setting(name) == name
    assert cpu_tuning.parse_setting(None) == "auto"
    assert cpu_tuning.parse_setting("onednn+blas") == DEFAULT
    assert cpu_tuning.parse_setting("eigen") == EIGEN_NO_BLAS
    assert cpu_tuning.parse_setting(" OneDNN+blas+inter_op1 ") == INTER_OP_1
    for choice in (DEFAULT, EIGEN, NO_BLAS, INTER_OP_1, EIGEN_NO_BLAS):
        assert cpu_tuning.parse_setting(choice.setting()) == choice
    for wrong in ("blas", "onednn+eigen", "onednn+onednn", "onednn+mkl", "fast"):
        with pytest.raises(cpu_tuning.SettingError, match="onednn or eigen"):
            cpu_tuning.parse_setting(wrong)


def test_the_flag_is_read_from_the_command_line_before_absl_parses_it():
    read = cpu_tuning.setting_from_argv
    assert read(["trainer", "--problem=p", "--cpu_tuning=eigen"]) == "eigen"
    assert read(["trainer", "--cpu_tuning", "onednn", "--cpu_tuning=eigen+blas"]) == "eigen+blas"
    assert read(["trainer", "--", "--cpu_tuning=eigen"]) is None
    assert read(["trainer", "--cpu_tuning_other=x"]) is None


def test_the_console_line():
    applied = cpu_tuning.Applied(CpuTuning(True, False, 1), "measured on X")
    assert applied.line() == ("CPU tuning: oneDNN on, weight gradients by TensorFlow's matmul, "
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
    monkeypatch.setattr(cpu_tuning, "blas_missing", lambda: None)


NO_PACKAGE = "the scipy-openblas32 package is not installed (pip install 't2t_lite[blas]')"


def test_onednn_on_and_off_then_inter_op_1_under_the_better(monkeypatch, blas_can_be_built):
    monkeypatch.setattr(cpu_tuning, "is_x86_64", lambda: True)
    calls = []
    seconds = {(True, 0): (3.0, 2.5), (False, 0): (2.0, 2.2), (False, 1): (1.9, 2.1)}
    timings = cpu_tuning.measure(run=fake_run(seconds, calls))
    assert calls == [(True, 0), (False, 0), (False, 1)]  # eigen's 2.0 beat oneDNN's best 2.5
    assert timings == {NO_BLAS: 3.0, DEFAULT: 2.5, EIGEN_NO_BLAS: 2.0, EIGEN: 2.2,
                       CpuTuning(False, False, 1): 1.9, CpuTuning(False, True, 1): 2.1}
    # 1.9 is 5% faster than 2.0, which beat the default by 20%.
    assert cpu_tuning.choose(timings) == CpuTuning(False, False, 1)


def test_without_the_blas_op_or_a_switchable_onednn_those_candidates_are_left_out(
        monkeypatch, blas_can_be_built):
    monkeypatch.setattr(cpu_tuning, "is_x86_64", lambda: True)
    seconds = {(True, 0): (2.0, None), (False, 0): (2.0, None), (True, 1): (2.0, None),
               (False, 1): (2.0, None)}
    blas_calls = []
    assert set(cpu_tuning.measure(run=fake_run(seconds, blas_calls=blas_calls))) == {
        NO_BLAS, EIGEN_NO_BLAS, CpuTuning(True, False, 1)}
    # The op did not load in the first subprocess (which said why): not tried again.
    assert blas_calls == [True, False, False]
    # TensorFlow reports oneDNN off although asked for: only the Eigen timings count.
    timings = cpu_tuning.measure(run=fake_run(seconds, onednn_works=False))
    assert set(timings) == {EIGEN_NO_BLAS, CpuTuning(False, False, 1)}


def test_where_the_blas_op_cannot_be_built_it_is_not_measured(monkeypatch):
    monkeypatch.setattr(cpu_tuning, "is_x86_64", lambda: True)
    monkeypatch.setattr(cpu_tuning, "blas_missing", lambda: NO_PACKAGE)
    seconds = {(True, 0): (3.0, 1.0), (False, 0): (2.0, 1.0), (False, 1): (2.1, 1.0)}
    blas_calls = []
    timings = cpu_tuning.measure(run=fake_run(seconds, blas_calls=blas_calls))
    assert blas_calls == [False, False, False]
    assert not any(choice.blas_weight_gradients for choice in timings)


def test_the_step_products_are_transformer_small_s():
    shapes = {(p.rows, p.depth_in, p.depth_out, p.embedding): p.count
              for p in cpu_tuning.STEP_PRODUCTS}
    # 3 encoder layers x 4 projections + 3 decoder layers x 8; 3 + 3 feed-forward layers.
    assert shapes == {(4096, 256, 256, False): 36, (4096, 256, 1024, False): 6,
                      (4096, 1024, 256, False): 6, (4096, 256, 8192, True): 1}


# --- the cache and apply -------------------------------------------------------------------------

@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache folder, no settings in the environment, nothing applied, and TensorFlow
    taken as not loaded (apply then sets TF_ENABLE_ONEDNN_OPTS, restored after the test)."""
    monkeypatch.setenv("T2T_LITE_CACHE", str(tmp_path))
    for variable in ("T2T_LITE_CPU_TUNING", "TF_ENABLE_ONEDNN_OPTS", "T2T_LITE_BLAS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(cpu_tuning, "_applied", None)
    monkeypatch.setattr(cpu_tuning, "_onednn_set_here", None)
    monkeypatch.setattr(cpu_tuning, "_onednn_loaded", lambda: None)
    monkeypatch.setattr(cpu_tuning, "is_x86_64", lambda: True)
    monkeypatch.setattr(cpu_tuning, "blas_missing", lambda: None)
    return tmp_path


EIGEN_WINS = {(True, 0): (3.0, 2.9), (False, 0): (2.0, 2.5), (False, 1): (2.1, 2.6)}


def test_measured_once_announced_cached_and_then_read(fresh, capsys):
    calls = []
    applied = cpu_tuning.apply("auto", run=fake_run(EIGEN_WINS, calls))
    assert applied.choice == EIGEN_NO_BLAS and len(calls) == 3
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert cpu_tuning.applied() == applied
    err = capsys.readouterr().err.splitlines()
    path = cpu_tuning.cache_path()
    assert path.startswith(str(fresh / "cpu_tuning")) and os.path.exists(path)
    assert err[0].startswith("measuring which CPU tuning pays on ")
    assert (f"about {cpu_tuning.MEASURE_SECONDS} s, once; cached in {path}; "
            "--cpu_tuning=default") in err[0]
    assert err[1].startswith("CPU tuning: oneDNN off, weight gradients by TensorFlow's matmul,"
                             " inter_op 0 (measured now on ")
    record = json.loads(open(path).read())
    assert record["choice"] == {"onednn": False, "blas_weight_gradients": False,
                                "inter_op_threads": 0}
    assert len(record["timings"]) == 6 and record["noise_margin"] == 0.03
    assert not [name for name in os.listdir(fresh / "cpu_tuning") if name.startswith(".")]
    # The next process reads it: no measurement.
    again = cpu_tuning.apply("auto", run=fake_run(EIGEN_WINS, calls))
    assert again.choice == EIGEN_NO_BLAS and len(calls) == 3
    assert f"(measured on {cpu_tuning.machine()['cpu']}" in capsys.readouterr().err
    # "measure" measures again.
    cpu_tuning.apply("measure", run=fake_run(EIGEN_WINS, calls), announce=False)
    assert len(calls) == 6


def test_the_cache_is_per_cpu_and_tensorflow_version(fresh):
    host = {"cpu": "AMD EPYC 9B14 96-Core Processor", "features": ["AVX2", "AVX-512"],
            "tensorflow": "2.21.0"}
    path = cpu_tuning.cache_path(host)
    assert os.path.basename(path) == "amd-epyc-9b14-96-core-processor-avx2-avx-512-tf2.21.0.json"
    assert cpu_tuning.cache_path(dict(host, tensorflow="2.22.0")) != path
    assert cpu_tuning.cache_path(dict(host, features=["AVX2"])) != path


def test_without_a_cache_nothing_is_measured_unless_allowed(fresh):
    def refuse(*args):
        raise AssertionError("measured")
    for setting, may_measure in (("auto", False), ("cached", True), ("default", True)):
        applied = cpu_tuning.apply(setting, may_measure=may_measure, run=refuse,
                                      announce=False)
        assert applied.choice == DEFAULT
    assert "today's default" in applied.reason
    assert not os.path.exists(fresh / "cpu_tuning")


def test_a_damaged_cache_is_measured_again(fresh, capsys):
    path = cpu_tuning.cache_path()
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as handle:
        handle.write("{not json")
    assert cpu_tuning.apply("auto", run=fake_run(EIGEN_WINS)).choice == EIGEN_NO_BLAS
    assert "does not read" in capsys.readouterr().err
    assert json.load(open(path))["choice"]["onednn"] is False


def test_a_failed_measurement_keeps_the_default_and_caches_nothing(fresh, capsys):
    def broken(*args):
        raise cpu_tuning.MeasurementError("the measuring process failed (status 1): boom")
    applied = cpu_tuning.apply("auto", run=broken)
    assert applied.choice == DEFAULT and "measurement failed" in applied.reason
    assert "boom" in capsys.readouterr().err
    assert not os.path.exists(cpu_tuning.cache_path())


def test_explicit_settings_and_the_user_s_variables_win(fresh, monkeypatch):
    assert cpu_tuning.apply("eigen+blas", announce=False).choice == EIGEN
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
    # apply's own TF_ENABLE_ONEDNN_OPTS is not taken for the user's.
    assert cpu_tuning.apply("onednn", announce=False).choice == NO_BLAS
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    monkeypatch.setattr(cpu_tuning, "_onednn_set_here", None)
    monkeypatch.setenv("T2T_LITE_BLAS", "0")
    applied = cpu_tuning.apply("default", announce=False)
    assert applied.choice == EIGEN_NO_BLAS
    assert "TF_ENABLE_ONEDNN_OPTS=0 set by you" in applied.reason
    assert "T2T_LITE_BLAS=0 set by you" in applied.reason
    monkeypatch.setenv("T2T_LITE_CPU_TUNING", "onednn+inter_op1")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    monkeypatch.delenv("T2T_LITE_BLAS")
    assert cpu_tuning.apply(announce=False).choice == CpuTuning(True, False, 1)


def test_after_tensorflow_loaded_onednn_is_what_it_loaded_with(fresh, monkeypatch):
    monkeypatch.setattr(cpu_tuning, "_onednn_loaded", lambda: True)
    applied = cpu_tuning.apply("eigen", announce=False)
    assert applied.choice.onednn and "as TensorFlow loaded" in applied.reason
    assert "TF_ENABLE_ONEDNN_OPTS" not in os.environ


def test_onednn_only_records_nothing_for_the_blas_op(fresh):
    cpu_tuning.apply("onednn", onednn_only=True, announce=False)
    assert cpu_tuning.applied() is None and os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"


def test_the_blas_op_is_never_chosen_where_it_cannot_be_built(fresh, monkeypatch, capsys):
    monkeypatch.setattr(cpu_tuning, "blas_missing", lambda: NO_PACKAGE)
    for setting in ("default", "onednn+blas", "cached"):
        applied = cpu_tuning.apply(setting, announce=False)
        assert applied.choice == NO_BLAS
        assert applied.reason.endswith(f"; no BLAS op: {NO_PACKAGE}")
    cpu_tuning.write_cached(cpu_tuning.cache_path(), {"choice": DEFAULT})
    assert cpu_tuning.apply("auto").choice == NO_BLAS  # measured where it could be built
    assert f"no BLAS op: {NO_PACKAGE})" in capsys.readouterr().err  # the one console line
    # A measurement says what it leaves out and how to have it.
    cpu_tuning.apply("measure", run=fake_run(EIGEN_WINS), announce=False)
    assert capsys.readouterr().err.startswith(
        f"measuring which CPU tuning pays on {cpu_tuning.machine()['cpu']}, TensorFlow "
        f"{cpu_tuning.machine()['tensorflow']} (not the BLAS op: {NO_PACKAGE}): "
        f"about {cpu_tuning.MEASURE_SECONDS} s")
    cpu_tuning.write_cached(cpu_tuning.cache_path(), {"choice": DEFAULT})
    monkeypatch.setattr(cpu_tuning, "blas_missing", lambda: None)
    assert cpu_tuning.apply("auto", announce=False).choice == DEFAULT


def test_the_library_reads_the_applied_choice_else_chooses_as_the_programs_do(fresh, capsys):
    # Not applied: chosen now as the programs other than the trainer choose (never measuring),
    # announced, and then kept.
    chosen = cpu_tuning.current()
    assert chosen.choice == DEFAULT and "nothing measured yet" in chosen.reason
    assert capsys.readouterr().err.startswith("CPU tuning: oneDNN on, weight gradients by the "
                                              "BLAS op")
    assert cpu_tuning.current() is chosen and not capsys.readouterr().err
    # Applied (by a program, or a library user before importing TensorFlow): that choice.
    applied = cpu_tuning.apply("eigen+inter_op1", announce=False)
    assert cpu_tuning.current() is applied and applied.choice == CpuTuning(False, False, 1)


def test_importing_changes_nothing_and_loads_no_tensorflow():
    environment = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    program = ("import os, sys; from t2t_lite import cpu_tuning, atomic_files; "
               "from t2t_lite.blas import library; library.missing(); "
               "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), cpu_tuning.applied(), "
               "'tensorflow' in sys.modules)")
    output = subprocess.run([sys.executable, "-c", program], env=environment,
                            capture_output=True, text=True, check=True).stdout.split()
    assert output == ["None", "None", "False"]


# --- in a real process ---------------------------------------------------------------------------

TINY = [cpu_tuning.Product(64, 32, 48, 3), cpu_tuning.Product(64, 32, 96, 1,
                                                                      embedding=True)]


def cache_with_the_built_op(tmp_path, blas_op):
    """A cache folder whose blas_op/ is the one holding the built BLAS op (no compiling)."""
    from t2t_lite.blas import library
    cache = tmp_path / "cache"
    cache.mkdir()
    os.symlink(os.path.dirname(library.library_path()), cache / "blas_op")
    return cache


def run_python(code, cache, **variables):
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TF_ENABLE_ONEDNN_OPTS", "T2T_LITE_CPU_TUNING", "T2T_LITE_BLAS")}
    environment.update(T2T_LITE_CACHE=str(cache), **variables)
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True,
                          text=True, timeout=600)


def test_a_real_measurement_of_tiny_products_is_cached_and_announced(tmp_path, blas_op):
    cache = cache_with_the_built_op(tmp_path, blas_op)
    code = ("from t2t_lite import cpu_tuning as k\n"
            f"k.apply('auto', products={TINY!r}).choice\n").replace("Product(", "k.Product(")
    result = run_python(code, cache)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    files = os.listdir(cache / "cpu_tuning")
    assert len(files) == 1 and files[0].endswith(".json")
    path = str(cache / "cpu_tuning" / files[0])
    assert lines[0].startswith("measuring which CPU tuning pays on ") and path in lines[0]
    assert lines[-1].startswith("CPU tuning: oneDNN ") and "measured now on" in lines[-1]
    record = json.load(open(path))
    measured = {(t["onednn"], t["blas_weight_gradients"], t["inter_op_threads"])
                for t in record["timings"]}
    assert {(True, False, 0), (True, True, 0), (False, False, 0), (False, True, 0)} <= measured
    assert len(measured) == 6 and all(t["seconds"] > 0 for t in record["timings"])
    # Then read, not measured; and the BLAS op follows the choice.
    code = ("from t2t_lite import cpu_tuning as k\n"
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
    code = ("from t2t_lite import cpu_tuning as k\n"
            f"k.apply('measure', products={TINY!r})\n").replace("Product(", "k.Product(")
    result = run_python(code, tmp_path / "cache", CXX=str(compiler))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 4, result.stderr
    assert lines[0].startswith("measuring which CPU tuning pays on ")
    assert lines[1].startswith("compiling the BLAS op of t2t_lite's weight gradients ")
    assert f"with {compiler} against this TensorFlow: about 10 s" in lines[1]
    assert lines[1].endswith("T2T_LITE_BLAS=0 or --cpu_tuning=onednn does without it")
    assert lines[2].startswith("BLAS matmul op unavailable (")
    assert "blas_matmul.cc:1: error: broken" in lines[2]
    assert lines[3].startswith("CPU tuning: ") and "by TensorFlow's matmul" in lines[3]


def test_the_blas_op_follows_the_applied_choice(tmp_path, blas_op):
    cache = cache_with_the_built_op(tmp_path, blas_op)
    for setting, available in (("onednn", "False"), ("onednn+blas", "True")):
        code = (f"from t2t_lite import cpu_tuning as k\nk.apply({setting!r}, announce=False)\n"
                "from t2t_lite.blas import matmul\nprint(matmul.available())\n")
        result = run_python(code, cache)
        assert result.stdout.split() == [available], result.stderr
