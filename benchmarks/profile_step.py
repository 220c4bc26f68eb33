"""Where a training step's time goes: the ops, the input pipeline, thread settings, precision.

  python benchmarks/profile_step.py --data_dir=D [--hparams_set=transformer_small]
      [--steps=10] [--output_json=F]

The profile that train_speed's numbers call for, on translate_multi30k_deen, without XLA (XLA
fuses the step into clusters whose time the profiler cannot split by operation):

1. Ops: --steps training steps (after --warmup_steps) under `tf.profiler`, converted by the
   profiler's own `framework_op_stats` tool into self time per operation type, and grouped
   (matrix multiplies, the softmax and loss over the vocabulary, dropout's random numbers, ...).
   The matrix multiplies' rate is their FLOPs (from the batch shapes, as train_speed counts them
   plus the attention-score products) over their self time, next to the float32 rate of a
   2048 x 2048 matmul measured in the same run, and the time those FLOPs would take at the
   rate that each dense-layer shape of the step reaches alone (what the matmuls alone need).
2. Input pipeline: batches per second that `problem.dataset("train", training=True)` delivers
   on its own, against training steps per second.
3. Variants, each in its own process on the same seeded batches: TensorFlow's intra-op and
   inter-op thread pools (0 = TensorFlow's choice), mixed_precision=bfloat16, and TensorFlow's
   kernels (TF_ENABLE_ONEDNN_OPTS=0: its own Eigen kernels; 1: oneDNN's), set in the
   variant's environment before TensorFlow loads. "default" is the project's default (oneDNN
   on x86-64 unless TF_ENABLE_ONEDNN_OPTS says otherwise); the profile of 1. runs with the
   kernels this process loaded, named in its header.

4. The step's products alone (--products_rounds, 0 leaves it out): every matrix product of the
   profiled steps and nothing else: the dense layers forward with their input and weight
   gradients, the pre-softmax projection over the real target positions in chunks of
   output_layer_chunk_rows with its two gradients, and the attention's batched products, two
   forward and four backward. Each product has operands of its own, as in a step, where every
   layer reads its own activations and gradients from memory, and runs on the step's kernel
   (TensorFlow's for the forward and input-gradient products, t2t_lite.blas.matmul's where the
   step uses it). One graph per batch, timed in rounds that alternate with the whole steps on
   the same batches. That is the time a step made of nothing but its products would take, so
   the model FLOPs of those batches (train_speed's MFU count) over it, divided by the best
   float32 matmul rate of the run (reporting.matmul_backends: each backend in its own process
   on 2048^3 and on the step's dense shapes, where every run repeats one product on the same
   operands), is the highest MFU that such a step reaches on this machine.

Prints the tables and writes the JSON; the numbers compare only within one run on one machine.
"""
import collections
import json
import math
import os
import re
import statistics
import sys
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)
import training_run  # noqa: E402  (benchmarks/training_run.py)
from training_run import PROBLEM  # noqa: E402

import tensorflow as tf  # noqa: E402  (after common: its quiet start)

from t2t_lite.blas import matmul as blas  # noqa: E402

ONEDNN = reporting.ONEDNN
# name: (intra-op threads, inter-op threads, hparams overrides, TF_ENABLE_ONEDNN_OPTS; None: the
# variable removed, so that t2t_lite's default applies)
VARIANTS = {
    "default": (0, 0, "", None),
    "intra2_inter1": (2, 1, "", None),
    "intra1_inter2": (1, 2, "", None),
    "intra1_inter1": (1, 1, "", None),
    "bfloat16": (0, 0, "mixed_precision=bfloat16", None),
    "tf_kernels": (0, 0, "", "0"),
    "onednn": (0, 0, "", "1"),
}
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
    ("elementwise", r"."),
]

training_run.define_flags()
common.define_thread_flags()  # the profile's; each variant's process gets the variant's own
flags.DEFINE_integer("warmup_steps", 3, "Untimed steps before the profiled or timed ones.")
flags.DEFINE_integer("steps", 8, "Profiled steps, and timed steps of each variant.")
flags.DEFINE_integer("pipeline_batches", 200, "Batches read to time the input pipeline.")
flags.DEFINE_integer("products_rounds", 3, "Rounds of the whole steps against the step's "
                     "products alone (section 4); 0 leaves that section out.")
flags.DEFINE_list("variants", list(VARIANTS), "Variants to time, each in its own process.")
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")
flags.DEFINE_string("variant_child", None, "(internal) time this variant and print its JSON.")
flags.register_validator("variants", lambda names: set(names) <= set(VARIANTS),
                         f"each one of: {', '.join(VARIANTS)}")


def warmed_up_and_timed(problem, hparams):
    """A fresh model trained without XLA for --warmup_steps untimed steps, then --steps timed
    ones: (TrainingSteps, the timed steps' batches, training_run.timed_steps of them)."""
    batches = list(training_run.training_batches(problem, hparams).take(
        FLAGS.warmup_steps + FLAGS.steps))
    steps = training_run.training_steps(hparams, problem.vocab_size(FLAGS.data_dir),
                                        jit_compile=False)
    training_run.timed_steps(steps, batches[:FLAGS.warmup_steps])
    timed_batches = batches[FLAGS.warmup_steps:]
    return steps, timed_batches, training_run.timed_steps(steps, timed_batches)


def matmul_flops(batch, hparams, vocab_size):
    """FLOPs of one step's matrix multiplies, forward and backward (3 x forward): the dense
    layers over every padded position (as the ops compute them, padding included) and the
    attention-score products QK^T and weights . V."""
    rows, source = batch["inputs"].shape
    target = batch["targets"].shape[1]
    scores = 4 * rows * hparams.hidden_size * (  # 2 products of 2 * length * length * d each
        hparams.encoder_layers * source * source
        + hparams.decoder_layers * (target * target + target * source))
    dense = sum(training_run.shape_flops(training_run.dense_shapes(batch, hparams,
                                                                   vocab_size)).values())
    return 3 * (dense + scores)


def standalone_rates(shapes):
    """Each shape's float32 tf.matmul rate on its own in this process (GFLOP/s, median of 5;
    reporting.tf_matmul_rates, as train_speed measures them) and the rate of them all weighted
    by their FLOPs: the rate a step's matmuls could reach if nothing else ran."""
    rates = reporting.tf_matmul_rates(shapes, jit=False, runs=5)
    flops = {reporting.shape_key(shape): value
             for shape, value in training_run.shape_flops(shapes).items()}
    return rates, reporting.flop_weighted_gflops(rates, flops)


def step_products(batch, hparams, vocab_size) -> list:
    """The matrix products of one training step on `batch`, as (a's shape, b's shape,
    transpose_a, transpose_b, through blas.matmul), each on the kernel the step runs it on: a dense
    layer x [m, k] · W [k, n] forward by tf.matmul, dy · W^T by tf.matmul, x^T · dy by
    blas.matmul; the pre-softmax projection h · E^T by tf.matmul and both of its gradients,
    e · E and e^T · h, by blas.matmul (training/output_layer_loss.py), over the real targets in
    chunks of output_layer_chunk_rows; each attention's q k^T and w v, and backward dw = do v^T,
    dv = w^T do, dq = ds k, dk = ds^T q, all by tf.matmul."""
    products = []
    for (m, k, n), count in training_run.dense_shapes(batch, hparams, vocab_size).items():
        if (k, n) == (hparams.hidden_size, vocab_size):
            continue  # the pre-softmax projection, below
        products += [((m, k), (k, n), False, False, False), ((m, n), (k, n), False, True, False),
                     ((m, k), (m, n), True, False, True)] * count
    d = hparams.hidden_size
    real_targets = int((batch["targets"].numpy() != 0).sum())
    chunk_rows = getattr(hparams, "output_layer_chunk_rows", 0) or real_targets
    for start in range(0, real_targets, chunk_rows):
        rows = min(chunk_rows, real_targets - start)
        products += [((rows, d), (vocab_size, d), False, True, False),
                     ((rows, vocab_size), (vocab_size, d), False, False, True),
                     ((rows, vocab_size), (rows, d), True, False, True)]
    batch_rows, source = batch["inputs"].shape
    target = batch["targets"].shape[1]
    heads = hparams.num_heads
    for queries, keys, layers in ((source, source, hparams.encoder_layers),
                                  (target, target, hparams.decoder_layers),
                                  (target, source, hparams.decoder_layers)):
        q, kv, w = ((batch_rows, heads, length, width) for length, width in (
            (queries, d // heads), (keys, d // heads), (queries, keys)))
        products += [(q, kv, False, True, False), (w, kv, False, False, False),
                     (q, kv, False, True, False), (w, q, True, False, False),
                     (w, kv, False, False, False), (w, q, True, False, False)] * layers
    return products


def product_flops(products) -> int:
    """2 · m · k · n of each product, times its leading (batch) dimensions, summed."""
    total = 0
    for a, b, transpose_a, transpose_b, _ in products:
        m, k = (a[-1], a[-2]) if transpose_a else (a[-2], a[-1])
        n = b[-2] if transpose_b else b[-1]
        total += 2 * math.prod(a[:-2]) * m * k * n
    return total


@tf.function(reduce_retracing=False)
def _run_products(operands, plan):
    """Every product of `plan` (step_products) on its own pair of `operands`; returns one
    element of each, summed, so that all of them are computed and read back."""
    picked = []
    for (a, b), (_, _, transpose_a, transpose_b, through_blas) in zip(operands, plan):
        if through_blas:
            product = blas.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
        else:
            product = tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
        picked.append(tf.reshape(product, [-1])[0])
    return tf.add_n(picked)


def products_seconds(products) -> float:
    """Seconds of `_run_products` on fresh random operands of `products` (made before the
    clock starts), traced and run with the BLAS op allowed, as in a training step."""
    operands = [(tf.random.uniform(a, -1, 1), tf.random.uniform(b, -1, 1))
                for a, b, _, _, _ in products]
    plan = tuple(products)
    with blas.allowed():
        _run_products.get_concrete_function(operands, plan)  # traced once per batch shape
        start = time.perf_counter()
        _run_products(operands, plan).numpy()
    return time.perf_counter() - start


def products_against_steps(steps, batch_list, hparams, vocab_size, parameters):
    """Section 4: --products_rounds rounds, each the whole steps of `batch_list`, then their
    products alone; per round the seconds of each and their ratio."""
    plans = [step_products(batch, hparams, vocab_size) for batch in batch_list]
    for plan in plans:  # an untimed round: traces each batch shape, and makes oneDNN's
        products_seconds(plan)  # primitives for its shapes, as the warm-up steps did
    rounds = []
    for index in range(FLAGS.products_rounds):
        print(f"products alone against whole steps, round {index + 1} of "
              f"{FLAGS.products_rounds}", flush=True)
        timed = training_run.timed_steps(steps, batch_list)
        products = sum(products_seconds(plan) for plan in plans)
        step_seconds = sum(step["seconds"] for step in timed)
        rounds.append({"step_seconds": step_seconds, "products_seconds": products,
                       "products_share": products / step_seconds})
    source = sum(step["inputs_real"] for step in timed)
    target = sum(step["targets_real"] for step in timed)
    flops = sum(product_flops(plan) for plan in plans)
    products = statistics.median(r["products_seconds"] for r in rounds)
    return {"rounds": rounds, "batches": len(batch_list), "product_flops": flops,
            "model_flops": training_run.model_flops(parameters, source, target),
            "products_seconds": products,
            "step_seconds": statistics.median(r["step_seconds"] for r in rounds),
            "products_gflops": flops / products / 1e9}


def op_profile(steps, batch_list):
    """{op type: self seconds} over `batch_list`'s steps, from tf.profiler's trace."""
    _, operations = reporting.profiled_operations(
        lambda: training_run.timed_steps(steps, batch_list))
    self_seconds = collections.Counter()
    for operation in operations:
        self_seconds[operation["type"]] += operation["self_seconds"]
    return self_seconds


def group_of(op_type: str) -> str:
    return next(name for name, pattern in GROUPS if re.search(pattern, op_type))


def time_variant_in_this_process(name):
    """The child process (its thread pools set in main from the flags time_variants passes)."""
    intra, inter, overrides, onednn = VARIANTS[name]
    problem = registry.problem(PROBLEM)
    hparams = common.hparams_from_flags()
    if overrides:
        hparams = hparams.override_from_string(overrides)
    _, _, timed = warmed_up_and_timed(problem, hparams)
    seconds = [step["seconds"] for step in timed]
    print("VARIANT " + json.dumps({
        "variant": name, "intra_op_threads": intra, "inter_op_threads": inter,
        "hparams": overrides, ONEDNN: onednn, "onednn": reporting.onednn_enabled(),
        "step_seconds": seconds,
        "target_tokens_per_s": sum(step["targets_real"] for step in timed) / sum(seconds)}))


def time_variants():
    results = {}
    for name in FLAGS.variants:
        print(f"variant {name} (own process)", flush=True)
        intra, inter, _, onednn = VARIANTS[name]
        results[name] = reporting.run_child(
            [sys.executable, os.path.abspath(__file__), f"--variant_child={name}",
             f"--data_dir={FLAGS.data_dir}", f"--hparams_set={FLAGS.hparams_set}",
             f"--hparams={FLAGS.hparams}", f"--warmup_steps={FLAGS.warmup_steps}",
             f"--steps={FLAGS.steps}", f"--intra_op_parallelism_threads={intra}",
             f"--inter_op_parallelism_threads={inter}"],
            reporting.child_environment({ONEDNN: onednn}), "VARIANT")
    return results


def pipeline_rate(problem, hparams):
    """Batches per second from the input pipeline alone (after its first batch)."""
    iterator = iter(training_run.training_batches(problem, hparams))
    next(iterator)
    start = time.perf_counter()
    for _ in range(FLAGS.pipeline_batches):
        next(iterator)
    return FLAGS.pipeline_batches / (time.perf_counter() - start)


def print_tables(result):
    m, ops = result["machine"], result["ops"]
    print(f"\n{FLAGS.hparams_set} on {PROBLEM}, no XLA; {m['cpu']}, {m['cores']} cores, "
          f"TF {m['tensorflow']}, oneDNN {'on' if m['onednn'] else 'off'}; {FLAGS.steps} "
          f"profiled steps, median step {ops['step_median_s']:.2f} s")
    header = f"{'group of operations':<36}{'self s/step':>12}{'share':>8}"
    print(header + "\n" + "-" * len(header))
    total = sum(ops["groups"].values())
    for name, seconds in sorted(ops["groups"].items(), key=lambda item: -item[1]):
        print(f"{name:<36}{seconds:>12.3f}{100 * seconds / total:>7.1f}%")
    print("top operation types: " + ", ".join(
        f"{op} {100 * s / total:.1f}%" for op, s in ops["top_types"]))
    print(f"matrix multiplies: {ops['matmul_gflops']:.0f} GFLOP/s over their self time; "
          f"a 2048^2 float32 matmul: {result['matmul_2048_gflops']:.0f} GFLOP/s; self time "
          f"adds up both cores' threads ({total:.2f} s a step)")
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
        a, best = result["products_alone"], result["products_alone"]["best_matmul"]
        print(f"\nthe step's products alone ({a['batches']} batches, each product on its own "
              f"operands; {len(a['rounds'])} rounds alternating with the whole steps):")
        print("  per round, products / whole steps: " + ", ".join(
            f"{r['products_seconds']:.2f} / {r['step_seconds']:.2f} s" for r in a["rounds"]))
        print(f"  products {a['products_gflops']:.0f} GFLOP/s ({a['product_flops'] / 1e9:.0f} "
              f"GFLOP); best float32 matmul of the run {best['gflops']:.0f} GFLOP/s "
              f"({best['backend']}, {best['shape']})")
        print(f"  MFU of a step made of its products alone: {100 * a['mfu_of_products_alone']:.1f}%"
              f"; of the whole steps: {100 * a['mfu_of_steps']:.1f}% (medians over rounds)")
    if result["variants"]:
        header = (f"\n{'variant':<20}{'intra':>6}{'inter':>6}{'oneDNN':>7}{'target tok/s':>14}"
                  f"{'vs first':>9}")
        print(header + "\n" + "-" * (len(header) - 1))
        base = next(iter(result["variants"].values()))["target_tokens_per_s"]
        for name, v in result["variants"].items():
            print(f"{name:<20}{v['intra_op_threads']:>6}{v['inter_op_threads']:>6}"
                  f"{'on' if v['onednn'] else 'off':>7}{v['target_tokens_per_s']:>14.0f}"
                  f"{v['target_tokens_per_s'] / base:>9.2f}")
        print(f"oneDNN: as TensorFlow reported in the variant's process ({ONEDNN} unset, 0 "
              f"or 1 in its environment); vs first: against {next(iter(result['variants']))}")


def main(unused_argv):
    common.set_threads_from_flags()
    if FLAGS.variant_child:
        return time_variant_in_this_process(FLAGS.variant_child)
    problem = registry.problem(PROBLEM)
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)  # keeps the splits already complete
    hparams, vocab_size = common.hparams_from_flags(), problem.vocab_size(FLAGS.data_dir)
    result = {"problem": PROBLEM, "hparams_set": FLAGS.hparams_set, "hparams": FLAGS.hparams,
              "machine": reporting.machine()}
    result["matmul_2048_gflops"] = statistics.median(reporting.matmul_gflops(jit=False))

    steps, profiled, timed = warmed_up_and_timed(problem, hparams)
    seconds = [step["seconds"] for step in timed]
    self_seconds = op_profile(steps, profiled)
    groups = collections.Counter()
    for op_type, value in self_seconds.items():
        groups[group_of(op_type)] += value / len(profiled)
    flops = sum(matmul_flops(batch, hparams, vocab_size) for batch in profiled)
    result["ops"] = {
        "step_median_s": statistics.median(seconds),
        "groups": dict(groups),
        "types": {op: s / len(profiled) for op, s in self_seconds.most_common()},
        "top_types": [(op, s / len(profiled)) for op, s in self_seconds.most_common(8)],
        "matmul_gflops": flops / sum(s for op, s in self_seconds.items()
                                     if group_of(op) == "matrix multiplies") / 1e9}
    dense = training_run.dense_shapes(profiled[0], hparams, vocab_size)
    shape_rates, weighted = standalone_rates(dense)
    result["ops"].update({
        "matmul_gflop_per_step": flops / len(profiled) / 1e9,
        "standalone_gflops_by_shape": shape_rates, "standalone_gflops_weighted": weighted,
        "matmul_seconds_at_standalone_rate": flops / len(profiled) / weighted / 1e9})
    result["pipeline"] = {"batches_per_s": pipeline_rate(problem, hparams),
                          "steps_per_s": len(seconds) / sum(seconds)}
    if FLAGS.products_rounds:
        parameters = training_run.parameter_counts(steps.model, hparams, vocab_size)
        alone = products_against_steps(steps, profiled, hparams, vocab_size, parameters)
        shapes = reporting.square_and(dense)
        print(f"float32 matmul rates ({len(shapes)} shapes, {len(reporting.MATMUL_BACKENDS)} "
              "backends)", flush=True)
        alone["best_matmul"] = reporting.best_rate(
            {"after": reporting.matmul_backends(shapes, runs=5)})
        alone["mfu_of_products_alone"] = (alone["model_flops"] / alone["products_seconds"]
                                          / (alone["best_matmul"]["gflops"] * 1e9))
        alone["mfu_of_steps"] = (alone["model_flops"] / alone["step_seconds"]
                                 / (alone["best_matmul"]["gflops"] * 1e9))
        result["products_alone"] = alone
    result["variants"] = time_variants()
    print_tables(result)
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, result)


if __name__ == "__main__":
    common.run_main(main)
