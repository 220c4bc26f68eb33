"""The programs take oneDNN (and the rest of the CPU tuning) as measured and cached for this
CPU before TensorFlow loads (bin/common.load_tensorflow), today's default (oneDNN on x86-64)
when nothing is cached, and the user's TF_ENABLE_ONEDNN_OPTS, T2T_LITE_CPU_TUNING and
--cpu_tuning win; only the trainer measures."""
import os
import platform
import subprocess
import sys

import pytest

from t2t_lite import cpu_tuning
from t2t_lite.cpu_tuning import CpuTuning

PROGRAM_START = ("from t2t_lite.bin import common\n"
                 "common.load_tensorflow()\n"  # a program's first step
                 "from tensorflow.python.util import _pywrap_util_port\n"
                 "print(_pywrap_util_port.IsMklEnabled())\n")

x86_64_only = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                 reason="oneDNN is switched on x86-64 only")


def start(cache, program=PROGRAM_START, argv=(), **variables):
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TF_ENABLE_ONEDNN_OPTS", "T2T_LITE_CPU_TUNING")}
    environment.update(T2T_LITE_CACHE=str(cache), **variables)
    return subprocess.run([sys.executable, "-c", program, *argv], env=environment,
                          capture_output=True, text=True)


def onednn_on(cache, **variables):
    result = start(cache, **variables)
    assert result.returncode == 0, result.stderr
    assert "measuring" not in result.stderr  # not the trainer: it never measures
    return result.stdout.strip().splitlines()[-1] == "True"


def cache_choice(cache, choice, monkeypatch):
    monkeypatch.setenv("T2T_LITE_CACHE", str(cache))
    cpu_tuning.write_cached(cpu_tuning.cache_path(), {"choice": choice})


@x86_64_only
def test_programs_run_on_onednn_unless_the_user_says_no(tmp_path):
    assert onednn_on(tmp_path)  # nothing cached: today's default
    assert not onednn_on(tmp_path, TF_ENABLE_ONEDNN_OPTS="0")
    assert not onednn_on(tmp_path, T2T_LITE_CPU_TUNING="eigen+blas")


@x86_64_only
def test_programs_take_the_cached_choice_and_the_user_s_variable_wins(tmp_path, monkeypatch):
    cache_choice(tmp_path, CpuTuning(False, False, 1), monkeypatch)
    assert not onednn_on(tmp_path)
    assert onednn_on(tmp_path, TF_ENABLE_ONEDNN_OPTS="1")
    assert onednn_on(tmp_path, T2T_LITE_CPU_TUNING="default")


def test_the_trainer_s_inter_op_pool_follows_the_choice_unless_the_flag_is_given(tmp_path,
                                                                                 monkeypatch):
    cache_choice(tmp_path, CpuTuning(True, False, 1), monkeypatch)
    program = ("import sys\nimport tensorflow as tf\nfrom t2t_lite.bin import common\n"
               "common.define_thread_flags()\ncommon.FLAGS(sys.argv)\n"
               "common.set_threads_from_flags()\ntf.constant(1.0) + 1.0\n"
               "print(tf.config.threading.get_inter_op_parallelism_threads())\n")
    assert start(tmp_path, program).stdout.split() == ["1"]
    assert start(tmp_path, program, ["--inter_op_parallelism_threads=0"]).stdout.split() == ["0"]


def test_a_bad_setting_ends_the_program_with_one_error_line(tmp_path):
    result = start(tmp_path, T2T_LITE_CPU_TUNING="fastest")
    assert result.returncode == 2
    assert result.stderr.startswith("error: CPU tuning 'fastest': give one of auto, ")
    result = subprocess.run([sys.executable, "-m", "t2t_lite.bin.trainer", "--cpu_tuning=mkl"],
                            capture_output=True, text=True,
                            env=dict(os.environ, T2T_LITE_CACHE=str(tmp_path)))
    assert result.returncode == 2 and result.stderr.startswith("error: CPU tuning 'mkl'")


def test_the_tests_take_the_oneDNN_part_only(tmp_path, monkeypatch):
    # conftest.py's prefer_onednn: the cached oneDNN setting, the BLAS op left alone.
    cache_choice(tmp_path, CpuTuning(False, False, 0), monkeypatch)
    program = ("import os\nfrom t2t_lite import cpu_tuning\n"
               "print(cpu_tuning.prefer_onednn(), cpu_tuning.applied())\n")
    assert start(tmp_path, program).stdout.split() == ["False", "None"]
