"""Training speed on translate_multi30k_deen, with XLA and without, and model FLOPs utilisation.

  python benchmarks/train_speed.py --data_dir=D [--hparams_set=transformer_small] [--steps=60]

Each mode trains a fresh model as the trainer does (TrainingSteps, forward/backward XLA-compiled
or not) on the real training batches, timing each step. XLA compiles once per padded batch
shape: under XLA, steps with a new shape count in "compile s" (time - median step time), not in
the rates (medians over windows of --window timed steps of real tokens, or steps, per second).

MFU = model FLOP/s / matmul FLOP/s, by the 6 · parameters · tokens estimate (2 FLOPs forward and
4 backward per weight and token), each token counting the parameters it passes through:
  model FLOP/s = 6 · (N_src · S + (N_tgt + d · V) · T)
S, T: real source and target tokens/s; N_src: the encoder and the key/value projections of the
encoder-decoder attention; N_tgt: the rest of the decoder; d · V: the pre-softmax projection.
Embedding lookups, attention scores (QK^T, weights·V) and padding count nothing. Matmul rate: the
better of eager and XLA tf.matmul of 2048x2048 float32, median of runs before and after training.
"""
import json
import os
import statistics
import subprocess
import sys

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)
import training_run  # noqa: E402  (benchmarks/training_run.py)
from training_run import PROBLEM  # noqa: E402

import tensorflow as tf  # noqa: E402  (after common: its quiet start)

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "opennmt_tf", "run.py")

training_run.define_flags()
flags.DEFINE_integer("steps", 60, "Timed training steps per mode.")
flags.DEFINE_integer("warmup_steps", 20, "Untimed steps per mode before the timed ones.")
flags.DEFINE_integer("window", 10, "Steps per timing window.")
MODES = {  # name: (XLA, hparams.length_bucketing)
    "xla": (True, "longer"),
    "no_xla": (False, "longer"),
    "no_xla_each": (False, "each"),  # source and target lengths bucketed apart: less padding
}
flags.DEFINE_list("modes", ["xla", "no_xla"], "Of: " + ", ".join(
    f"{name} (XLA {'on' if xla else 'off'}, length_bucketing={bucketing})"
    for name, (xla, bucketing) in MODES.items()))
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")
flags.DEFINE_boolean("compare", False, "Also train OpenNMT-tf (benchmarks/peers/opennmt_tf) "
                     "for --warmup_steps + --steps with the same configuration and data.")
flags.DEFINE_string("peer_work_dir", "/tmp/t2t_lite_peer_speed", "The peer's work folder.")
common.define_thread_flags()  # for t2t_lite and, with --compare, the peer alike
flags.register_validator("modes", lambda modes: set(modes) <= set(MODES), ", ".join(MODES))


def parameter_counts(model):
    """{"source_side": N_src, "target_side": N_tgt, "embedding": ...}, as in the docstring."""
    counts = {"source_side": 0, "target_side": 0, "embedding": 0}
    for variable in model.trainable_variables:
        path = variable.path  # e.g. transformer/decoder_layer_0/self_attention/query/kernel
        source = path.split("/")[1].startswith("encoder_") or any(
            f"encoder_decoder_attention/{name}/" in path for name in ("key", "value"))
        group = "source_side" if source else "target_side"
        counts["embedding" if path.endswith("/embeddings") else group] += int(tf.size(variable))
    return counts


def run_mode(mode, problem, hparams, vocab_size):
    xla, bucketing = MODES[mode]
    hparams = hparams.replace(length_bucketing=bucketing)
    training_steps = training_run.training_steps(hparams, vocab_size, jit_compile=xla)
    steps = training_run.timed_steps(training_steps, training_run.training_batches(
        problem, hparams).take(FLAGS.warmup_steps + FLAGS.steps))
    seen = set()
    for step in steps:
        step["new_shape"] = tuple(step["shape"]) not in seen
        seen.add(tuple(step["shape"]))
        # XLA compiles every new shape; without it the trace turns shape-generic after the
        # first few shapes (reduce_retracing), within the warm-up.
        step["compiles"] = step["new_shape"] and xla
    timed = steps[FLAGS.warmup_steps:]
    steady = [step for step in timed if not step["compiles"]]
    if not steady:
        raise ValueError("every timed step had a new batch shape: use more --steps")
    typical = statistics.median(step["seconds"] for step in steps if not step["compiles"])
    size = min(FLAGS.window, len(steady))
    windows = [steady[i:i + size] for i in range(0, len(steady) - size + 1, size)]

    def rates(value):  # one a window
        return [sum(map(value, w)) / sum(s["seconds"] for s in w) for w in windows]

    real = sum(s["inputs_real"] + s["targets_real"] for s in timed)
    target = rates(lambda s: s["targets_real"])
    return training_steps.model, {
        "target_tokens_per_s": statistics.median(target), "window_target_tokens_per_s": target,
        "source_tokens_per_s": statistics.median(rates(lambda s: s["inputs_real"])),
        "steps_per_s": statistics.median(rates(lambda s: 1)),
        "padding_fraction": 1 - real / sum(s["tensor"] for s in timed), "step_median_s": typical,
        "warmup_seconds": sum(step["seconds"] for step in steps[:FLAGS.warmup_steps]),
        "compile_seconds": sum(s["seconds"] - typical for s in steps if s["compiles"]),
        "distinct_shapes": len(seen), "new_shapes_in_timed_steps": len(timed) - len(steady),
        "steps": [{k: s[k] for k in ("seconds", "shape", "new_shape", "compiles")}
                  for s in steps]}


def model_flops_per_s(parameters, stats):
    """6 · (N_src · S + (N_tgt + d · V) · T), as in the docstring."""
    return 6 * (parameters["source_side"] * stats["source_tokens_per_s"] + (
        parameters["target_side"] + parameters["softmax_d_times_v"])
        * stats["target_tokens_per_s"])


def print_table(result, peak):
    m, p, modes, gflops = (result[k] for k in ("machine", "parameters", "modes", "matmul_gflops"))
    print(f"\n{FLAGS.hparams_set} ({FLAGS.hparams or 'no overrides'}) on {PROBLEM}; {m['cpu']}, "
          f"{m['cores']} cores, TF {m['tensorflow']}; {FLAGS.warmup_steps} warm-up + {FLAGS.steps} "
          f"timed steps a mode; fp32 matmul 2048^2: {gflops['eager']:.0f} GFLOP/s eager, "
          f"{gflops['xla']:.0f} XLA; threads intra-op {FLAGS.intra_op_parallelism_threads}, "
          f"inter-op {FLAGS.inter_op_parallelism_threads} (0: TensorFlow's choice)")
    header = (f"{'mode':<11} {'target tok/s':>12} {'best':>6} {'source tok/s':>12} {'steps/s':>8} "
              f"{'padding':>8} {'warm-up s':>9} {'compile s':>9} {'shapes':>6} {'MFU':>6}")
    print(header + "\n" + "-" * len(header))
    for mode, s in modes.items():
        print(f"{mode:<11} {s['target_tokens_per_s']:>12.0f} "
              f"{max(s['window_target_tokens_per_s']):>6.0f} {s['source_tokens_per_s']:>12.0f} "
              f"{s['steps_per_s']:>8.2f} {100 * s['padding_fraction']:>7.1f}% "
              f"{s['warmup_seconds']:>9.1f} {s['compile_seconds']:>9.1f} "
              f"{s['distinct_shapes']:>6d} {100 * s['mfu']:>5.1f}%")
    if "xla_speedup" in result:
        print(f"XLA / no XLA (target tokens/s): {result['xla_speedup']:.2f}")
    print(f"tokens: non-pad; rates: median over windows of {FLAGS.window} timed steps without a "
          f"new batch shape (best: the fastest window); shapes: distinct padded batch shapes\n"
          f"MFU = 6 * ({p['source_side']:,} * source tok/s + ({p['target_side']:,} + "
          f"{p['softmax_d_times_v']:,}) * target tok/s) / {peak / 1e9:.0f} GFLOP/s "
          f"(encoder; decoder + softmax; attention scores and embedding lookups not counted)")


def run_peer(hparams):
    """OpenNMT-tf's throughput from its log (see peers/opennmt_tf/README.md), or None with the
    reason printed when it cannot run here."""
    json_path = os.path.join(FLAGS.peer_work_dir, "train_speed.json")
    command = [sys.executable, PEER, f"--data_dir={FLAGS.data_dir}", f"--tmp_dir={FLAGS.tmp_dir}",
               f"--work_dir={FLAGS.peer_work_dir}",
               f"--train_steps={FLAGS.warmup_steps + FLAGS.steps}",
               f"--warmup_steps={hparams.learning_rate_warmup_steps}",
               f"--learning_rate_constant={hparams.learning_rate_constant}",
               f"--log_every={FLAGS.window}", f"--skip_steps={FLAGS.warmup_steps}",
               f"--save_every={FLAGS.warmup_steps + FLAGS.steps}", f"--output_json={json_path}",
               f"--intra_op_parallelism_threads={FLAGS.intra_op_parallelism_threads}",
               f"--inter_op_parallelism_threads={FLAGS.inter_op_parallelism_threads}"]
    if subprocess.run(command).returncode:
        print("the OpenNMT-tf peer did not run; see its message above")
        return None
    with open(json_path, encoding="utf-8") as handle:
        return json.load(handle)


def print_comparison(result):
    peer, ours = result["peer"], result["modes"]
    print(f"\n{'toolkit':<40} {'target tok/s':>12} {'source tok/s':>12} {'steps/s':>8} "
          f"{'MFU':>6}")
    rows = [("t2t_lite " + mode, s) for mode, s in ours.items()] + [(peer["toolkit"], peer)]
    for name, s in rows:
        print(f"{name[:40]:<40} {s['target_tokens_per_s']:>12.0f} "
              f"{s['source_tokens_per_s']:>12.0f} {s['steps_per_s']:>8.2f} "
              f"{100 * s['mfu']:>5.1f}%")
    for mode, ratio in result["ratio_to_peer"].items():
        print(f"t2t_lite {mode} / OpenNMT-tf (target tokens/s): {ratio:.2f}")


def main(unused_argv):
    common.set_threads_from_flags()
    problem = registry.problem(PROBLEM)
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)  # keeps the splits already complete
    hparams, vocab_size = common.hparams_from_flags(), problem.vocab_size(FLAGS.data_dir)
    result = {"problem": PROBLEM, "hparams_set": FLAGS.hparams_set, "hparams": FLAGS.hparams,
              "steps": FLAGS.steps, "warmup_steps": FLAGS.warmup_steps, "window": FLAGS.window,
              "threads": {"intra_op": FLAGS.intra_op_parallelism_threads,
                          "inter_op": FLAGS.inter_op_parallelism_threads},
              "machine": {**reporting.machine(), "load_average_at_start": os.getloadavg()},
              "modes": {}}
    matmuls = {name: reporting.matmul_gflops(name == "xla") for name in ("eager", "xla")}
    for mode in FLAGS.modes:
        print(f"mode {mode}: {FLAGS.warmup_steps} + {FLAGS.steps} steps", flush=True)
        model, result["modes"][mode] = run_mode(mode, problem, hparams, vocab_size)
    result["matmul_gflops"] = {
        name: statistics.median(rates + reporting.matmul_gflops(name == "xla"))
        for name, rates in matmuls.items()}  # before and after training
    peak = max(result["matmul_gflops"].values()) * 1e9
    p = result["parameters"] = {**parameter_counts(model), "total": model.count_params(),
                                "softmax_d_times_v": hparams.hidden_size * vocab_size}
    for stats in result["modes"].values():
        stats["model_flops_per_s"] = model_flops_per_s(p, stats)
        stats["mfu"] = stats["model_flops_per_s"] / peak
    if {"xla", "no_xla"} <= set(result["modes"]):
        result["xla_speedup"] = (result["modes"]["xla"]["target_tokens_per_s"]
                                 / result["modes"]["no_xla"]["target_tokens_per_s"])
    result["machine"]["load_average_at_end"] = os.getloadavg()  # 1, 5, 15 min
    print_table(result, peak)
    if FLAGS.compare:
        result["peer"] = run_peer(hparams)
        if result["peer"]:  # the same model, so the same FLOPs per token
            result["peer"]["mfu"] = model_flops_per_s(p, result["peer"]) / peak
            result["ratio_to_peer"] = {
                mode: stats["target_tokens_per_s"] / result["peer"]["target_tokens_per_s"]
                for mode, stats in result["modes"].items()}
            print_comparison(result)
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, result)


if __name__ == "__main__":
    common.run_main(main)
