"""Where a training step's time goes: its operations, its matrix products alone, the input
pipeline (benchmarks/README.md, profile_step.py).

  python benchmarks/profile_step.py --data_dir=D [--hparams_set=transformer_small]
      [--steps=8] [--products_rounds=3] [--output_json=F]

Without XLA (which fuses the step into clusters the profiler cannot split), with the kernels
this process loaded: --steps steps under tf.profiler, self time by operation type, grouped;
each dense-layer shape's rate alone; the input pipeline alone; and the step's products alone
(each by tf.matmul on operands of its own) in rounds alternating with the whole
steps, whose model FLOPs over their time, against the run's best float32 matmul rate, is the
highest MFU a step made of its products reaches here.
"""
import collections
import glob
import json
import math
import os
import re
import statistics
import tempfile
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry
common.load_tensorflow()  # the programs' start: a quiet TensorFlow

import harness  # noqa: E402  (benchmarks/, beside this script)
import matmul_rates  # noqa: E402
import training_run  # noqa: E402
from harness import PROBLEM  # noqa: E402

import tensorflow as tf  # noqa: E402  (after common: its quiet start)

# Operation types, first match wins: TensorFlow's names and oneDNN's (_MklMatMul,
# _MklFusedMatMul, _MklBatchMatMulV2, _MklSoftmax, _MklLayerNorm, ...).
GROUPS = [
    ("matrix multiplies", r"MatMul|Einsum|Conv"),
    ("softmax + loss over the vocabulary", r"SoftmaxCrossEntropy|OneHot|ArgMax|LogSoftmax"),
    ("attention softmax", r"^_?(Mkl)?Softmax$"),
    ("dropout random numbers", r"Random|Philox"),
    ("embedding gather / scatter", r"Gather|Scatter|UnsortedSegment"),
    ("optimizer and variable updates", r"Apply|Assign|ReadVariable|VarHandle"),
    ("transpose, reshape, concat", r"Transpose|Reshape|Concat|Pack|Unpack|Slice|Split|Tile|"
                                   r"Squeeze|ExpandDims|Pad"),
    ("reductions (layer norm, sums)", r"Mean|Sum|Max|Min|Prod|All|Any|BroadcastGradientArgs|"
                                      r"LayerNorm"),
    ("input pipeline", r"Iterator|Dataset|OptionalGetValue"),
    ("casts (float32 <-> bfloat16 under mixed precision)", r"^Cast$"),
    ("elementwise", r"."),
]

training_run.define_flags(flags)
common.define_thread_flags()
flags.DEFINE_integer("warmup_steps", 3, "Untimed steps before the profiled ones.")
flags.DEFINE_integer("steps", 8, "Profiled steps.")
flags.DEFINE_integer("pipeline_batches", 200, "Batches read to time the input pipeline.")
flags.DEFINE_integer("products_rounds", 3, "Rounds of the whole steps against the step's "
                     "products alone; 0 leaves them out.")
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")
flags.mark_flags_as_required(["data_dir"])


def op_self_seconds(function) -> collections.Counter:
    """{operation type: self seconds} of `function` run under tf.profiler, from the profiler's
    own framework_op_stats tool (idle time left out; self time adds up every thread)."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin
    with tempfile.TemporaryDirectory() as log_dir:
        tf.profiler.experimental.start(log_dir)
        function()
        tf.profiler.experimental.stop()
        paths = glob.glob(os.path.join(log_dir, "**", "*.xplane.pb"), recursive=True)
        data, ok = _pywrap_profiler_plugin.xspace_to_tools_data(paths, "framework_op_stats", {})
    if not ok:
        raise RuntimeError(f"the profiler's framework_op_stats tool failed: {data[:200]!r}")
    table = json.loads(data)[0]
    columns = [column["id"] for column in table["cols"]]
    self_seconds = collections.Counter()
    for row in table["rows"]:
        values = dict(zip(columns, (cell.get("v") for cell in row["c"])))
        if values["type"] != "IDLE":
            self_seconds[values["type"]] += values["total_self_time"] / 1e6
    return self_seconds


def matmul_flops(batch, hparams, vocab_size):
    """FLOPs of one step's matrix multiplies, forward and backward (3 x forward): the dense
    layers over every padded position and the attention-score products QK^T and weights · V."""
    rows, source = batch["inputs"].shape
    target = batch["targets"].shape[1]
    scores = 4 * rows * hparams.hidden_size * (  # 2 products of 2 * length * length * d each
        hparams.encoder_layers * source * source
        + hparams.decoder_layers * (target * target + target * source))
    dense = sum(training_run.shape_flops(training_run.dense_shapes(batch, hparams,
                                                                   vocab_size)).values())
    return 3 * (dense + scores)


def step_products(batch, hparams, vocab_size) -> list:
    """One training step's matrix products on `batch` as (a's shape, b's shape, transpose_a,
    transpose_b): a dense layer's x W, dy W^T and x^T dy; the pre-softmax projection h E^T and
    its e E and e^T h, in chunks of output_layer_chunk_rows real targets; each attention's
    q k^T, w v and their four gradient products."""
    products = []
    for (m, k, n), count in training_run.dense_shapes(batch, hparams, vocab_size).items():
        if (k, n) != (hparams.hidden_size, vocab_size):  # the pre-softmax projection: below
            products += [((m, k), (k, n), False, False),
                         ((m, n), (k, n), False, True),
                         ((m, k), (m, n), True, False)] * count
    d = hparams.hidden_size
    real_targets = int((batch["targets"].numpy() != 0).sum())
    chunk_rows = getattr(hparams, "output_layer_chunk_rows", 0) or real_targets
    for start in range(0, real_targets, chunk_rows):
        rows = min(chunk_rows, real_targets - start)
        products += [((rows, d), (vocab_size, d), False, True),
                     ((rows, vocab_size), (vocab_size, d), False, False),
                     ((rows, vocab_size), (rows, d), True, False)]
    batch_rows, source = batch["inputs"].shape
    target, heads = batch["targets"].shape[1], hparams.num_heads
    for queries, keys, layers in ((source, source, hparams.encoder_layers),
                                  (target, target, hparams.decoder_layers),
                                  (target, source, hparams.decoder_layers)):
        q, kv, w = ((batch_rows, heads, length, width) for length, width in (
            (queries, d // heads), (keys, d // heads), (queries, keys)))
        products += [(q, kv, False, True), (w, kv, False, False),
                     (q, kv, False, True), (w, q, True, False),
                     (w, kv, False, False), (w, q, True, False)] * layers
    return products


def product_flops(products) -> int:
    """2 · m · k · n of each product, times its leading (batch) dimensions, summed: 2 · n times
    the size of a, whichever way it is transposed."""
    return sum(2 * math.prod(a) * (b[-2] if transpose_b else b[-1])
               for a, b, _, transpose_b in products)


@tf.function(reduce_retracing=False)
def _run_products(operands, plan):
    """Every product of `plan` on its own pair of `operands`; one element of each, summed, so
    that all are computed and read back."""
    picked = []
    for (a, b), (_, _, transpose_a, transpose_b) in zip(operands, plan):
        picked.append(tf.reshape(tf.matmul(a, b, transpose_a=transpose_a,
                                           transpose_b=transpose_b), [-1])[0])
    return tf.add_n(picked)


def products_seconds(products) -> float:
    """Seconds of `_run_products` on fresh random operands (made before the clock starts)."""
    operands = [(tf.random.uniform(a, -1, 1), tf.random.uniform(b, -1, 1))
                for a, b, _, _ in products]
    _run_products.get_concrete_function(operands, tuple(products))  # once per batch shape
    start = time.perf_counter()
    _run_products(operands, tuple(products)).numpy()
    return time.perf_counter() - start


def products_against_steps(steps, batches, hparams, vocab_size) -> dict:
    """--products_rounds rounds, each the whole steps of `batches`, then their products alone."""
    plans = [step_products(batch, hparams, vocab_size) for batch in batches]
    for plan in plans:  # an untimed round: traces each batch shape and makes oneDNN's
        products_seconds(plan)  # primitives for its shapes, as the warm-up steps did
    rounds = []
    for index in range(FLAGS.products_rounds):
        print(f"products alone against whole steps, round {index + 1} of "
              f"{FLAGS.products_rounds}", flush=True)
        timed = training_run.timed_steps(steps, batches)
        rounds.append({"step_seconds": sum(step["seconds"] for step in timed),
                       "products_seconds": sum(products_seconds(plan) for plan in plans)})
    parameters = training_run.parameter_counts(steps.model, hparams, vocab_size)
    flops = sum(product_flops(plan) for plan in plans)
    alone = {"rounds": rounds, "batches": len(batches), "product_flops": flops,
             "model_flops": training_run.model_flops(
                 parameters, sum(step["inputs_real"] for step in timed),
                 sum(step["targets_real"] for step in timed)),
             **{key: statistics.median(r[key] for r in rounds)
                for key in ("products_seconds", "step_seconds")}}
    dense = training_run.dense_shapes(batches[0], hparams, vocab_size)
    print("float32 matmul rates", flush=True)
    alone["best_matmul"] = best = matmul_rates.best_rate({"after": matmul_rates.matmul_backends(
        matmul_rates.square_and(dense), runs=5)})
    alone.update(products_gflops=flops / alone["products_seconds"] / 1e9, **{
        f"mfu_of_{what}": alone["model_flops"] / alone[f"{key}_seconds"] / (best["gflops"] * 1e9)
        for what, key in (("products_alone", "products"), ("steps", "step"))})
    return alone


def print_tables(result):
    ops, total = result["ops"], sum(result["ops"]["groups"].values())
    print(f"\n{FLAGS.hparams_set} on {PROBLEM} in {result['compute_dtype']}, no XLA; "
          f"{harness.machine_line(result['machine'])}"
          f", oneDNN {'on' if result['machine']['onednn'] else 'off'}; {FLAGS.steps} profiled "
          f"steps, median step {ops['step_median_s']:.2f} s")
    print(harness.table(["group of operations", "self s/step", "share"], [
        [name, f"{seconds:.3f}", f"{100 * seconds / total:.1f}%"]
        for name, seconds in sorted(ops["groups"].items(), key=lambda item: -item[1])]))
    print("top operation types: " + ", ".join(
        f"{op} {100 * s / total:.1f}%" for op, s in ops["top_types"]))
    print(f"matrix multiplies: {ops['matmul_gflops']:.0f} GFLOP/s over their self time; a 2048^3 "
          f"float32 matmul: {ops['matmul_2048_gflops']:.0f} GFLOP/s; self time adds up every "
          f"core's threads ({total:.2f} s a step)")
    print("each dense-layer shape alone (first profiled batch, m x k x n: GFLOP/s): " + ", ".join(
        f"{shape} {rate:.0f}" for shape, rate in ops["standalone_gflops_by_shape"].items()))
    print(f"at those rates (FLOP-weighted: {ops['standalone_gflops_weighted']:.0f} GFLOP/s) a "
          f"step's {ops['matmul_gflop_per_step']:.0f} GFLOP of matmuls take "
          f"{ops['matmul_seconds_at_standalone_rate']:.2f} s of the {ops['step_median_s']:.2f} s "
          f"step, with nothing else running")
    p = result["pipeline"]
    print(f"input pipeline alone: {p['batches_per_s']:.1f} batches/s; training: "
          f"{p['steps_per_s']:.2f} steps/s ({p['batches_per_s'] / p['steps_per_s']:.0f} times "
          f"faster than it is read)")
    if "products_alone" in result:
        a = result["products_alone"]
        print(f"\nthe step's products alone ({a['batches']} batches, each product on its own "
              f"operands; {len(a['rounds'])} rounds alternating with the whole steps):\n"
              "  per round, products / whole steps: " + ", ".join(
                  f"{r['products_seconds']:.2f} / {r['step_seconds']:.2f} s" for r in a["rounds"]))
        print(f"  products {a['products_gflops']:.0f} GFLOP/s ({a['product_flops'] / 1e9:.0f} "
              f"GFLOP); best float32 matmul of the run {a['best_matmul']['gflops']:.0f} GFLOP/s "
              f"({a['best_matmul']['backend']}, {a['best_matmul']['shape']})\n"
              f"  MFU of a step made of its products alone: {100 * a['mfu_of_products_alone']:.1f}"
              f"%; of the whole steps: {100 * a['mfu_of_steps']:.1f}% (medians over rounds)")


def main(unused_argv):
    common.set_threads_from_flags()
    problem = registry.problem(PROBLEM)
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)  # keeps the splits already complete
    hparams, vocab_size = common.hparams_from_flags(), problem.vocab_size(FLAGS.data_dir)
    result = {"problem": PROBLEM, "hparams_set": FLAGS.hparams_set, "hparams": FLAGS.hparams,
              "machine": harness.machine(), "compute_dtype": hparams.compute_dtype}
    batches = list(training_run.trainer_batches(problem, FLAGS.data_dir, hparams).take(
        FLAGS.warmup_steps + FLAGS.steps))
    steps = training_run.training_steps(hparams, vocab_size, jit_compile=False)
    training_run.timed_steps(steps, batches[:FLAGS.warmup_steps])
    profiled = batches[FLAGS.warmup_steps:]
    seconds = [step["seconds"] for step in training_run.timed_steps(steps, profiled)]
    types = {op_type: value / len(profiled) for op_type, value in op_self_seconds(
        lambda: training_run.timed_steps(steps, profiled)).most_common()}  # per step
    groups = collections.Counter()
    for op_type, value in types.items():
        groups[next(name for name, pattern in GROUPS if re.search(pattern, op_type))] += value
    step_flops = sum(matmul_flops(batch, hparams, vocab_size) for batch in profiled) / len(profiled)
    dense = training_run.dense_shapes(profiled[0], hparams, vocab_size)
    rates = matmul_rates.tf_matmul_rates(dense, runs=5)
    weighted = matmul_rates.flop_weighted_gflops(rates, {
        matmul_rates.shape_key(shape): value
        for shape, value in training_run.shape_flops(dense).items()})
    result["ops"] = {
        "step_median_s": statistics.median(seconds), "groups": dict(groups), "types": types,
        "top_types": list(types.items())[:8],
        "matmul_gflops": step_flops / groups["matrix multiplies"] / 1e9,
        "matmul_2048_gflops": matmul_rates.tf_matmul_rates([matmul_rates.SQUARE])[
            matmul_rates.shape_key(matmul_rates.SQUARE)],
        "matmul_gflop_per_step": step_flops / 1e9,
        "standalone_gflops_by_shape": rates, "standalone_gflops_weighted": weighted,
        "matmul_seconds_at_standalone_rate": step_flops / weighted / 1e9}
    iterator = iter(training_run.trainer_batches(problem, FLAGS.data_dir, hparams))
    next(iterator)  # the input pipeline alone, timed after its first batch
    start = time.perf_counter()
    for _ in range(FLAGS.pipeline_batches):
        next(iterator)
    result["pipeline"] = {"batches_per_s": FLAGS.pipeline_batches / (time.perf_counter() - start),
                          "steps_per_s": len(seconds) / sum(seconds)}
    if FLAGS.products_rounds:
        result["products_alone"] = products_against_steps(steps, profiled, hparams, vocab_size)
    print_tables(result)
    if FLAGS.output_json:
        harness.write_json(FLAGS.output_json, result)


if __name__ == "__main__":
    harness.run_main(main)
