"""--intra_op_parallelism_threads / --inter_op_parallelism_threads size TensorFlow's pools."""
import subprocess
import sys

PROGRAM = """
import sys
import tensorflow as tf
from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS
common.define_thread_flags()
FLAGS(sys.argv)
common.set_threads_from_flags()
tf.constant(1.0) + 1.0  # TensorFlow starts with the pools as set
print(tf.config.threading.get_intra_op_parallelism_threads(),
      tf.config.threading.get_inter_op_parallelism_threads())
"""


def run(*args):
    return subprocess.run([sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True)


def test_the_flags_set_both_pools_before_tensorflow_starts():
    result = run("--intra_op_parallelism_threads=2", "--inter_op_parallelism_threads=1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "1"]


def test_a_negative_thread_count_is_refused_naming_the_flag():
    result = run("--inter_op_parallelism_threads=-1")
    assert result.returncode != 0
    assert "inter_op_parallelism_threads" in result.stderr
