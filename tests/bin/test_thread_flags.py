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

# The decoder's choice, with 6 cores, for argv[1] sentences in batches of 32 and
# --decode_hparams' parallel_batches argv[2].
DECODER_PROGRAM = """
import sys
import tensorflow as tf
from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS
from t2t_lite.decoding import decoder
decoder.usable_cores = lambda: 6
common.define_thread_flags()
FLAGS(sys.argv[:1] + sys.argv[3:])
decoder.size_thread_pools(decoder.TranslatorHParams(parallel_batches=int(sys.argv[2])),
                          int(sys.argv[1]), FLAGS.intra_op_parallelism_threads,
                          FLAGS.inter_op_parallelism_threads)
tf.constant(1.0) + 1.0
print(tf.config.threading.get_intra_op_parallelism_threads(),
      tf.config.threading.get_inter_op_parallelism_threads())
"""


def run(*args, program=PROGRAM):
    return subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True)


def test_the_flags_set_both_pools_before_tensorflow_starts():
    result = run("--intra_op_parallelism_threads=2", "--inter_op_parallelism_threads=1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "1"]


def test_a_negative_thread_count_is_refused_naming_the_flag():
    result = run("--inter_op_parallelism_threads=-1")
    assert result.returncode != 0
    assert "inter_op_parallelism_threads" in result.stderr


def test_the_decoder_gives_each_batch_searched_at_once_a_thread_of_its_own(monkeypatch):
    # 6 cores, 1000 sentences (32 batches): 6 or 12 at once -> one intra-op thread (each batch
    # on its own); 2 at once -> a pool of all 6, shared. 40 sentences: 2 batches, so at most 2
    # at once whatever parallel_batches says -> all 6 cores.
    from t2t_lite.decoding import decoder
    monkeypatch.setattr(decoder, "usable_cores", lambda: 6)
    for sentences, parallel_batches, intra in ((1000, 6, 1), (1000, 12, 1), (1000, 2, 6),
                                               (40, 6, 6)):
        assert decoder.intra_op_threads_for(
            decoder.TranslatorHParams(parallel_batches=parallel_batches), sentences) == intra
    # The choice is what TensorFlow starts with; the flags win over it.
    result = run("1000", "6", program=DECODER_PROGRAM)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "0"]
    result = run("1000", "6", "--intra_op_parallelism_threads=4",
                 "--inter_op_parallelism_threads=2", program=DECODER_PROGRAM)
    assert result.stdout.split() == ["4", "2"], result.stderr
