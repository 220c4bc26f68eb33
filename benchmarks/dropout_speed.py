"""Dropout alone, forward and backward: t2t_lite's 16-bit mask against keras.layers.Dropout.

  python benchmarks/dropout_speed.py [--rounds=7] [--repeats=10] [--output_json=F]

The tensors are those transformer_small's training step drops out with a batch of 4096 tokens
(128 sentences of 32 tokens): the sublayer outputs and embeddings [128, 32, 256] (rate 0.1),
the relu hidden layer [128, 32, 1024] (0.1) and the attention weights [128, 4, 32, 32] (0.1),
as many of each as a step has (3 + 3 layers: 17 of the first, 6 and 9). Each contestant computes
the dropped tensors and the gradient of a weighted sum with respect to their inputs, in a
tf.function without XLA (how a CPU trains). Rounds alternate the two (keras, t2t_lite, keras,
...) so that a drifting machine moves both alike; reported: each one's median milliseconds per
step's worth of dropout, and the median of the per-round ratios with their range.
"""
import statistics
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)

import keras  # noqa: E402  (after common: its quiet start)
import tensorflow as tf  # noqa: E402

from t2t_lite.layers.dropout import Dropout  # noqa: E402

RATE = 0.1
SHAPES = {"sublayer outputs and embeddings": ((128, 32, 256), 17),
          "relu hidden layer": ((128, 32, 1024), 6),
          "attention weights": ((128, 4, 32, 32), 9)}

common.define_thread_flags()
flags.DEFINE_integer("rounds", 7, "Alternating rounds of both contestants.")
flags.DEFINE_integer("repeats", 10, "Timed calls per contestant and round.")
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")


def contestant(layer_class):
    """A tf.function: every tensor of SHAPES dropped out by its own layer, and the gradients."""
    layers = [layer_class(RATE, seed=index) for index in range(sum(n for _, n in SHAPES.values()))]
    tensors = [tf.random.normal(shape) for shape, count in SHAPES.values() for _ in range(count)]

    @tf.function(jit_compile=False)
    def step():
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            total = tf.add_n([tf.reduce_sum(layer(x, training=True) * x)
                              for layer, x in zip(layers, tensors)])
        return tape.gradient(total, tensors)
    return step


def seconds_per_call(step, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        gradients = step()
    _ = [g.numpy() for g in gradients[:1]]
    return (time.perf_counter() - start) / repeats


def main(unused_argv):
    common.set_threads_from_flags()
    contestants = {"keras.layers.Dropout": contestant(keras.layers.Dropout),
                   "t2t_lite Dropout": contestant(Dropout)}
    for step in contestants.values():
        seconds_per_call(step, 2)  # trace and warm up
    times = {name: [] for name in contestants}
    for _ in range(FLAGS.rounds):
        for name, step in contestants.items():
            times[name].append(seconds_per_call(step, FLAGS.repeats))
    keras_name, ours = list(contestants)
    ratios = [k / t for k, t in zip(times[keras_name], times[ours])]
    host = reporting.machine()
    print(f"dropout of one transformer_small step (4096 tokens), forward and backward, no XLA; "
          f"{host['cpu']}, {host['cores']} cores, TF {host['tensorflow']}")
    for name, values in times.items():
        print(f"  {name:<22} {1000 * statistics.median(values):7.1f} ms (median of "
              f"{FLAGS.rounds} rounds)")
    print(f"  speed-up {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-"
          f"{max(ratios):.2f})")
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, {"machine": host, "seconds": times,
                                                 "speedup_median": statistics.median(ratios),
                                                 "speedup_range": [min(ratios), max(ratios)]})


if __name__ == "__main__":
    common.run_main(main)
