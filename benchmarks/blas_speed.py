"""The BLAS weight gradients (t2t_lite.blas) against TensorFlow's kernels: each gradient product
of a training step alone, then whole training steps, both in one process.

  python benchmarks/blas_speed.py --data_dir=D [--rounds=5 --steps=8 --warmup_steps=6]
      [--output_json=F]

Products. The weight-gradient products of a transformer_small step on the first training batch
(x^T dy of each dense-layer shape, and the fused output layer's e^T h and e W over its 4,096
target rows): each multiplied --repeats times inside one tf.function by tf.matmul (TensorFlow's
kernels, oneDNN where the programs turn it on) and by the BLAS op, GFLOP/s after subtracting the
same function without the products.

Steps. Two fresh models with the same seed, one trained with the BLAS weight gradients and one
without (TrainingSteps(blas_weight_gradients=...)), no XLA, as t2t_lite-trainer trains on a CPU.
After --warmup_steps untimed steps each, each round times --steps training steps of each on the
same seeded batches, alternating step by step (BLAS, TensorFlow, BLAS, ...), so that a drifting
machine moves both alike. Reported: each contestant's real target tokens per second (median
over rounds), and the median and range of the per-round speed-ups.
"""
import statistics
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)
import training_run  # noqa: E402  (benchmarks/training_run.py)

import keras  # noqa: E402  (after common: its quiet start)
import tensorflow as tf  # noqa: E402

from t2t_lite.blas import library  # noqa: E402
from t2t_lite.models.building import build_model  # noqa: E402
from t2t_lite.training import trainer  # noqa: E402
from t2t_lite.training.step import TrainingSteps  # noqa: E402

training_run.define_flags()
common.define_thread_flags()
flags.DEFINE_integer("rounds", 5, "Rounds of --steps steps of each contestant.", lower_bound=1)
flags.DEFINE_integer("steps", 8, "Timed steps of each contestant per round.", lower_bound=1)
flags.DEFINE_integer("warmup_steps", 6, "Untimed steps of each contestant first.")
flags.DEFINE_integer("repeats", 8, "Products per timed call in the products table.")
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")

CONTESTANTS = {"BLAS weight gradients": True, "TensorFlow's kernels": False}


def product_rate(multiply, a, b, flops) -> float:
    """GFLOP/s of `multiply(a, b)` inside a tf.function, --repeats products a call."""
    repeats = FLAGS.repeats

    def calls(with_product):
        @tf.function
        def run(a, b):
            outputs = []
            for index in range(repeats):
                shifted = a + float(index)  # a different product each time
                outputs.append((multiply(shifted, b) if with_product else shifted)[0, 0])
            return tf.add_n(outputs)
        run(a, b)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            run(a, b).numpy()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return flops * repeats / (calls(True) - calls(False)) / 1e9


def gradient_products(batch, hparams, vocab_size):
    """{name: (m, k, n, transpose_a)} of the step's weight-gradient products, and their count."""
    shapes = training_run.dense_shapes(batch, hparams, vocab_size)
    products = {}
    for (rows, depth_in, depth_out), count in shapes.items():
        if depth_out == vocab_size:  # the fused output layer: one chunk of rows
            products[f"e^T h {depth_out}x{rows}x{depth_in}"] = ((depth_out, rows, depth_in,
                                                                True), count)
            products[f"e W {rows}x{depth_out}x{depth_in}"] = ((rows, depth_out, depth_in,
                                                              False), count)
        else:
            products[f"x^T dy {depth_in}x{rows}x{depth_out}"] = ((depth_in, rows, depth_out,
                                                                 True), count)
    return products


def products_table(batch, hparams, vocab_size):
    op = library.load().t2t_lite_blas_mat_mul
    rows = []
    for name, ((m, k, n, transpose_a), count) in gradient_products(
            batch, hparams, vocab_size).items():
        a = tf.random.normal([k, m] if transpose_a else [m, k])
        b = tf.random.normal([k, n])
        flops = 2 * m * k * n
        tensorflow = product_rate(
            lambda x, y: tf.matmul(x, y, transpose_a=transpose_a), a, b, flops)
        blas = product_rate(lambda x, y: op(x, y, transpose_a=transpose_a), a, b, flops)
        rows.append({"product": name, "count": count, "tensorflow_gflops": tensorflow,
                     "blas_gflops": blas})
    return rows


def contestant(hparams, vocab_size, blas_weight_gradients):
    keras.utils.set_random_seed(1)
    model = build_model("transformer", hparams, vocab_size)
    return TrainingSteps(model, trainer.make_optimizer(hparams), hparams, jit_compile=False,
                         blas_weight_gradients=blas_weight_gradients)


def timed_rounds(hparams, batches, vocab_size):
    """{name: [target tokens/s of each round]}: steps alternating between the contestants."""
    steps = {name: contestant(hparams, vocab_size, blas)
             for name, blas in CONTESTANTS.items()}
    warmup, timed = batches[:FLAGS.warmup_steps], batches[FLAGS.warmup_steps:]
    for name in steps:
        training_run.timed_steps(steps[name], warmup)
    rates = {name: [] for name in steps}
    for round_index in range(FLAGS.rounds):
        round_batches = timed[round_index * FLAGS.steps:(round_index + 1) * FLAGS.steps]
        seconds = {name: 0.0 for name in steps}
        tokens = 0.0
        for batch in round_batches:
            for name in steps:
                step = training_run.timed_steps(steps[name], [batch])[0]
                seconds[name] += step["seconds"]
            tokens += step["targets_real"]
        for name in steps:
            rates[name].append(tokens / seconds[name])
        print(f"round {round_index + 1}: " + ", ".join(
            f"{name} {rates[name][-1]:.0f}" for name in steps) + " target tok/s", flush=True)
    return rates


def main(unused_argv):
    common.set_threads_from_flags()
    problem = registry.problem(training_run.PROBLEM)
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)
    hparams = registry.hparams(FLAGS.hparams_set)
    if FLAGS.hparams:
        hparams = hparams.override_from_string(FLAGS.hparams)
    hparams = hparams.replace(length_bucketing=trainer.length_bucketing_for(hparams, False))
    vocab_size = problem.vocab_size(FLAGS.data_dir)
    count = FLAGS.warmup_steps + FLAGS.rounds * FLAGS.steps
    batches = list(training_run.training_batches(problem, hparams).take(count))
    products = products_table(batches[0], hparams, vocab_size)
    rates = timed_rounds(hparams, batches, vocab_size)
    blas_name, tensorflow_name = list(CONTESTANTS)
    speedups = [b / t for b, t in zip(rates[blas_name], rates[tensorflow_name])]

    host = reporting.machine()
    print(f"\n{FLAGS.hparams_set} on {training_run.PROBLEM}, no XLA; {host['cpu']}, "
          f"{host['cores']} cores, TF {host['tensorflow']}, oneDNN "
          f"{'on' if reporting.onednn_enabled() else 'off'}")
    print(f"{'weight-gradient product (m x k x n)':<36} {'per step':>8} {'TF GFLOP/s':>11} "
          f"{'BLAS GFLOP/s':>13}")
    for row in products:
        print(f"{row['product']:<36} {row['count']:>8} {row['tensorflow_gflops']:>11.0f} "
              f"{row['blas_gflops']:>13.0f}")
    print(f"\n{'contestant':<24} {'target tok/s':>12}  per round")
    for name, values in rates.items():
        print(f"{name:<24} {statistics.median(values):>12.0f}  "
              + " ".join(f"{value:.0f}" for value in values))
    print(f"speed-up, same steps: {statistics.median(speedups):.2f} (rounds "
          f"{min(speedups):.2f}-{max(speedups):.2f})")
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, {
            "machine": host, "products": products, "target_tokens_per_s": rates,
            "speedup_median": statistics.median(speedups),
            "speedup_range": [min(speedups), max(speedups)]})


if __name__ == "__main__":
    common.run_main(main)
