"""Training speed on translate_multi30k_deen, in alternating rounds, and model FLOPs utilisation
against the fastest float32 matmul the machine runs.

  python benchmarks/train_speed.py --data_dir=D [--modes=no_xla_each] [--rounds=3]
      [--compare] [--warmup_steps=20 --steps=60 --window=10] [--output_json=F]

Contestants. Each requested --modes is a contestant: t2t_lite trained as the trainer trains it
(TrainingSteps, forward/backward XLA-compiled or not) with the project's defaults, on the seeded
training batches (every t2t_lite contestant sees the same ones). --kernels_compare (on with
--compare) adds the first mode on TensorFlow's default kernels (TF_ENABLE_ONEDNN_OPTS=0, where
t2t_lite asks for oneDNN), to show what oneDNN gives on this CPU; --blas_compare (on with
--compare) the first mode without the BLAS weight gradients (T2T_LITE_BLAS=0, t2t_lite/blas),
to show what they give. --compare adds OpenNMT-tf
(benchmarks/peers/opennmt_tf) twice: as its users run it (TensorFlow's own choice of kernels and
thread pools) and with t2t_lite's TensorFlow settings (oneDNN, and the same --intra_op /
--inter_op_parallelism_threads).

Rounds. The speed of a shared or virtual machine drifts (by 1.5 times within ten minutes on the
one these figures come from), so contestants that run one after the other are not compared on
the same machine. The contestants run in turn, A, B, C, A, B, C, ... for --rounds rounds, each
contestant-round in a process of its own (its environment set before TensorFlow loads) for
--warmup_steps untimed and --steps timed steps. Each pair of contestants is compared round by
round: the ratio of their target tokens per second within a round (when they ran minutes
apart), then the median and the spread (min-max) of those ratios over the rounds. A
contestant's own figure is the median over rounds.

In a t2t_lite round every step is timed until its counts are read back; its rates are medians
over windows of --window timed steps (real tokens, or steps, per second), leaving out the steps
whose padded batch shape is new under XLA, since XLA compiles each of those ("compile s": their
time minus the median step time). The peer's rates are medians of OpenNMT-tf's own log windows
of --window updates after its first --warmup_steps.

MFU = model FLOP/s / the best float32 matmul rate measured in the same run, by the
6 · parameters · tokens estimate (2 FLOPs forward and 4 backward per weight and token), each
token counting the parameters it passes through:
  model FLOP/s = 6 · (N_src · S + (N_tgt + d · V) · T)
S, T: real source and target tokens/s; N_src: the encoder and the key/value projections of the
encoder-decoder attention; N_tgt: the rest of the decoder; d · V: the pre-softmax projection.
Embedding lookups, attention scores (QK^T, weights·V) and padding count nothing. OpenNMT-tf
trains the same model, so its tokens count the same FLOPs.
The matmul rates (reporting.matmul_backends): TensorFlow's default kernels (eager and XLA),
TensorFlow with oneDNN (eager and XLA) and numpy's BLAS, each in its own process, on a 2048^3
product and on each dense-layer shape of a t2t_lite step (training_run.dense_shapes of the first
timed batch), median of --matmul_runs runs, before the rounds and after them. The best of all
those medians is the denominator: what this CPU reached in float32 at its best moment of the run.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)
import training_run  # noqa: E402  (benchmarks/training_run.py)
from reporting import ONEDNN  # noqa: E402
from t2t_lite.blas.matmul import SWITCH_VARIABLE as BLAS  # noqa: E402
from training_run import PROBLEM  # noqa: E402


PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "opennmt_tf", "run.py")
PEER_NO_PYTHON = 3  # run.py's exit status when no Python 3.10 or 3.11 exists for OpenNMT-tf
ONEDNN_ON_LINE = "oneDNN custom operations are on"  # TensorFlow's log line when it loads oneDNN

training_run.define_flags()
flags.DEFINE_integer("steps", 60, "Timed training steps per contestant and round.")
flags.DEFINE_integer("warmup_steps", 20, "Untimed steps per contestant and round before the "
                     "timed ones.")
flags.DEFINE_integer("window", 10, "Steps per timing window.")
flags.DEFINE_integer("rounds", 3, "Rounds: every contestant runs once a round, in turn.",
                     lower_bound=1)
MODES = {  # name: (XLA, hparams.length_bucketing)
    "xla": (True, "longer"),
    "no_xla": (False, "longer"),
    "no_xla_each": (False, "each"),  # source and target lengths bucketed apart: less padding
}
flags.DEFINE_list("modes", ["no_xla_each"], "t2t_lite contestants, of: " + ", ".join(
    f"{name} (XLA {'on' if xla else 'off'}, length_bucketing={bucketing})"
    for name, (xla, bucketing) in MODES.items()))
flags.DEFINE_boolean("compare", False, "Add OpenNMT-tf (benchmarks/peers/opennmt_tf) as two "
                     "contestants: as its users run it, and with t2t_lite's TensorFlow settings.")
flags.DEFINE_boolean("kernels_compare", None, "Add the first of --modes on TensorFlow's default "
                     "kernels (TF_ENABLE_ONEDNN_OPTS=0). Default: on with --compare.")
flags.DEFINE_boolean("blas_compare", None, "Add the first of --modes without the BLAS weight "
                     "gradients (T2T_LITE_BLAS=0, t2t_lite/blas). Default: on with --compare.")
flags.DEFINE_integer("matmul_runs", 10, "Runs of each matmul shape and backend, before and "
                     "after the rounds.", lower_bound=1)
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")
flags.DEFINE_string("peer_work_dir", "/tmp/t2t_lite_peer_speed", "The peer's work folder (its "
                    "logs of every round are kept there).")
flags.DEFINE_string("contestant_child", None, "(internal) train this mode in this process for "
                    "one round and print its JSON.")
common.define_thread_flags()  # t2t_lite's, and the peer's with t2t_lite's TensorFlow settings
flags.register_validator("modes", lambda modes: modes and set(modes) <= set(MODES),
                         "one or more of " + ", ".join(MODES))


# --- One t2t_lite round (the contestant's own process) -------------------------------------------

def run_mode(mode, problem, hparams, vocab_size):
    """(the trained Keras model, this round's rates and timings) of t2t_lite in `mode`."""
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


def contestant_child(mode):
    """Trains `mode` for one round and prints "CONTESTANT {json}" (rates, the model's parameter
    counts, and whether TensorFlow runs oneDNN in this process)."""
    problem = registry.problem(PROBLEM)
    hparams, vocab_size = common.hparams_from_flags(), problem.vocab_size(FLAGS.data_dir)
    model, stats = run_mode(mode, problem, hparams, vocab_size)
    stats["parameters"] = training_run.parameter_counts(model, hparams, vocab_size)
    stats["onednn"] = reporting.onednn_enabled()
    print("CONTESTANT " + json.dumps(stats))


# --- The contestants and their rounds ------------------------------------------------------------

def contestants() -> list:
    """[{name, kind, mode, environment changes, threads}] in the order each round runs them."""
    own_threads = [FLAGS.intra_op_parallelism_threads, FLAGS.inter_op_parallelism_threads]
    result = [{"name": f"t2t_lite {mode}", "kind": "t2t_lite", "mode": mode,
               # the project's default kernels (oneDNN on x86-64, t2t_lite/cpu_kernels.py)
               "environment": {ONEDNN: None}, "threads": own_threads} for mode in FLAGS.modes]
    blas_off = FLAGS.compare if FLAGS.blas_compare is None else FLAGS.blas_compare
    if blas_off and MODES[FLAGS.modes[0]][0]:
        print(f"--blas_compare left out: {FLAGS.modes[0]} uses XLA, which never runs the op")
    elif blas_off:
        result.append({"name": f"t2t_lite {FLAGS.modes[0]} no BLAS", "kind": "t2t_lite",
                       "mode": FLAGS.modes[0], "environment": {ONEDNN: None, BLAS: "0"},
                       "threads": own_threads})
    kernels = FLAGS.compare if FLAGS.kernels_compare is None else FLAGS.kernels_compare
    if kernels:
        result.append({"name": f"t2t_lite {FLAGS.modes[0]} TF kernels", "kind": "t2t_lite",
                       "mode": FLAGS.modes[0], "environment": {ONEDNN: "0"},
                       "threads": own_threads})
    if FLAGS.compare:
        # As its users run it: no TF_ENABLE_ONEDNN_OPTS. run.py imports t2t_lite, which sets the
        # variable to 1 when it is absent and hands its environment on to onmt-main; an empty
        # value survives that and makes TensorFlow fall back to its own default (it logs a
        # warning saying so). TF_CPP_MIN_LOG_LEVEL=0 keeps TensorFlow's line saying whether
        # oneDNN is on in the peer's training log, which each round reads back.
        result.append({"name": "OpenNMT-tf as users run it", "kind": "peer",
                       "environment": {ONEDNN: "", "TF_CPP_MIN_LOG_LEVEL": "0"},
                       "threads": [0, 0]})
        result.append({"name": "OpenNMT-tf t2t_lite's TF settings", "kind": "peer",
                       "environment": {ONEDNN: "1", "TF_CPP_MIN_LOG_LEVEL": "0"},
                       "threads": own_threads})
    return result


def thread_flags(threads) -> list:
    return [f"--intra_op_parallelism_threads={threads[0]}",
            f"--inter_op_parallelism_threads={threads[1]}"]


def run_t2t_lite(contestant) -> dict:
    command = [sys.executable, os.path.abspath(__file__),
               f"--contestant_child={contestant['mode']}", f"--data_dir={FLAGS.data_dir}",
               f"--tmp_dir={FLAGS.tmp_dir}", f"--hparams_set={FLAGS.hparams_set}",
               f"--hparams={FLAGS.hparams}", f"--warmup_steps={FLAGS.warmup_steps}",
               f"--steps={FLAGS.steps}", f"--window={FLAGS.window}",
               *thread_flags(contestant["threads"])]
    return reporting.run_child(command, reporting.child_environment(contestant["environment"]),
                               "CONTESTANT")


def run_peer(contestant, hparams, round_index) -> dict:
    """One round of OpenNMT-tf (see peers/opennmt_tf/README.md); its output and training log
    are kept in --peer_work_dir as round<R>_<contestant>.log and .train.log."""
    os.makedirs(FLAGS.peer_work_dir, exist_ok=True)
    stem = os.path.join(FLAGS.peer_work_dir, f"round{round_index + 1}_" + "".join(
        c if c.isalnum() else "_" for c in contestant["name"]))
    json_path = stem + ".json"
    command = [sys.executable, PEER, f"--data_dir={FLAGS.data_dir}", f"--tmp_dir={FLAGS.tmp_dir}",
               f"--work_dir={FLAGS.peer_work_dir}",
               f"--train_steps={FLAGS.warmup_steps + FLAGS.steps}",
               f"--warmup_steps={hparams.learning_rate_warmup_steps}",
               f"--learning_rate_constant={hparams.learning_rate_constant}",
               f"--log_every={FLAGS.window}", f"--skip_steps={FLAGS.warmup_steps}",
               f"--save_every={FLAGS.warmup_steps + FLAGS.steps}", f"--output_json={json_path}",
               *thread_flags(contestant["threads"])]
    environment = reporting.child_environment(contestant["environment"])
    with open(stem + ".log", "w", encoding="utf-8") as log:
        status = subprocess.run(command, stdout=log, stderr=log, env=environment).returncode
    if status:
        with open(stem + ".log", encoding="utf-8") as log:
            print("".join(log.readlines()[-30:]))
        raise reporting.ChildFailed(f"the OpenNMT-tf peer failed (exit status {status}); its "
                                    f"output: {stem}.log", status)
    train_log = os.path.join(FLAGS.peer_work_dir, "train.log")
    shutil.copyfile(train_log, stem + ".train.log")
    with open(json_path, encoding="utf-8") as handle:
        result = json.load(handle)
    with open(train_log, encoding="utf-8") as handle:
        result["onednn"] = ONEDNN_ON_LINE in handle.read()
    return result


def run_rounds(entries, hparams) -> list:
    """Runs every contestant once a round, in turn; fills each entry's "rounds" (a result, or
    None where it did not run) and returns the order in which they ran, with times."""
    order = []
    for entry in entries:
        entry["rounds"] = []
    for round_index in range(FLAGS.rounds):
        for entry in entries:
            if entry.get("dropped"):
                entry["rounds"].append(None)
                continue
            print(f"round {round_index + 1}/{FLAGS.rounds}: {entry['name']} "
                  f"({FLAGS.warmup_steps} + {FLAGS.steps} steps)", flush=True)
            start, load = time.time(), os.getloadavg()
            try:
                if entry["kind"] == "t2t_lite":
                    result = run_t2t_lite(entry)
                else:
                    result = run_peer(entry, hparams, round_index)
            except reporting.ChildFailed as error:
                if entry["kind"] == "t2t_lite":
                    raise
                reason = ("no Python 3.10 or 3.11 for it" if error.status == PEER_NO_PYTHON
                          else str(error))
                print(f"  left out of the remaining rounds: {reason}", flush=True)
                entry["dropped"], result = reason, None
            seconds = time.time() - start
            order.append({"round": round_index + 1, "contestant": entry["name"],
                          "start": start, "seconds": seconds, "load_average_before": load})
            entry["rounds"].append(result)
            if result:
                rate = result.get("target_tokens_per_s")
                print(f"  {'-' if rate is None else f'{rate:.0f}'} target tok/s, oneDNN "
                      f"{'on' if result['onednn'] else 'off'}, {seconds:.0f} s", flush=True)
    return order


# --- Summaries -----------------------------------------------------------------------------------

def per_round(entry, key="target_tokens_per_s") -> list:
    return [result.get(key) if result else None for result in entry["rounds"]]


def summarize(entry, parameters, peak_gflops):
    """The contestant's medians over rounds (and, for t2t_lite, its timings) and MFU."""
    rates = [rate for rate in per_round(entry) if rate is not None]
    if not rates:
        return None
    median = statistics.median
    ran = [result for result in entry["rounds"] if result]
    summary = {"target_tokens_per_s": median(rates), "min": min(rates), "max": max(rates),
               "per_round": per_round(entry), "rounds": len(rates),
               "source_tokens_per_s": median(
                   r for r in per_round(entry, "source_tokens_per_s") if r is not None),
               "steps_per_s": median(r for r in per_round(entry, "steps_per_s") if r is not None),
               "onednn": sorted({result["onednn"] for result in ran})}
    if entry["kind"] == "t2t_lite":
        summary.update({
            "best_window": max(max(r["window_target_tokens_per_s"]) for r in ran),
            "padding_fraction": median(r["padding_fraction"] for r in ran),
            "warmup_seconds": median(r["warmup_seconds"] for r in ran),
            "compile_seconds": median(r["compile_seconds"] for r in ran),
            "distinct_shapes": max(r["distinct_shapes"] for r in ran)})
    else:
        summary["toolkit"] = ran[0]["toolkit"]
    summary["model_flops_per_s"] = training_run.model_flops(
        parameters, summary["source_tokens_per_s"], summary["target_tokens_per_s"])
    summary["mfu"] = summary["model_flops_per_s"] / (peak_gflops * 1e9)
    return summary


def ratio_pairs(entries) -> list:
    """(numerator, denominator) contestants: every t2t_lite one against every peer, the BLAS
    weight gradients against none, oneDNN against TensorFlow's kernels, XLA against no XLA."""
    ours = [e for e in entries if e["kind"] == "t2t_lite"]
    pairs = [(a, b) for a in ours for b in entries if b["kind"] == "peer"]
    by_name = {e["name"]: e for e in entries}
    for other in ("no BLAS", "TF kernels"):
        if f"t2t_lite {FLAGS.modes[0]} {other}" in by_name:
            pairs.append((by_name[f"t2t_lite {FLAGS.modes[0]}"],
                          by_name[f"t2t_lite {FLAGS.modes[0]} {other}"]))
    if "t2t_lite xla" in by_name and "t2t_lite no_xla" in by_name:
        pairs.append((by_name["t2t_lite xla"], by_name["t2t_lite no_xla"]))
    return pairs


def ratios(entries) -> list:
    """Per pair: the ratio of target tokens/s within each round, their median, min and max."""
    result = []
    for a, b in ratio_pairs(entries):
        each = [x / y if x and y else None for x, y in zip(per_round(a), per_round(b))]
        valid = [value for value in each if value is not None]
        result.append({"numerator": a["name"], "denominator": b["name"], "per_round": each,
                       "median": statistics.median(valid) if valid else None,
                       "min": min(valid) if valid else None,
                       "max": max(valid) if valid else None})
    return result


# --- Tables --------------------------------------------------------------------------------------

def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def print_matmul_table(matmul, shape_counts):
    before, after = matmul["before"], matmul["after"]
    backends = list(before["rates"])
    blas = before["backends"]["numpy"]["blas"]
    blas_text = (f"{blas.get('name') or blas.get('libraries')} {blas.get('version', '')} "
                 f"({blas.get('architecture', '?')} kernels)")
    print(f"\nfloat32 matmul GFLOP/s, median of {FLAGS.matmul_runs} runs, before / after the "
          f"rounds; each backend in its own process; numpy's BLAS: {blas_text}")
    header = f"{'m x k x n':<16}{'matmuls':>8}" + "".join(f"{b:>17}" for b in backends)
    print(header + "\n" + "-" * len(header))
    for shape in before["rates"][backends[0]]:
        count = shape_counts.get(shape)
        print(f"{shape:<16}{fmt(count, 'd'):>8}" + "".join(
            f"{before['rates'][b][shape]:>11.0f} / {after['rates'][b][shape]:<3.0f}"
            for b in backends))
    print(f"{'step (FLOP-weighted)':<24}" + "".join(
        f"{before['step_weighted'][b]:>11.0f} / {after['step_weighted'][b]:<3.0f}"
        for b in backends))
    best = matmul["best"]
    print(f"matmuls: of that shape in one forward pass of the first timed batch (the backward "
          f"pass doubles them); best: {best['gflops']:.0f} GFLOP/s ({best['backend']}, "
          f"{best['shape']}, {best['when']} the rounds), the MFU denominator")


def print_tables(result):
    m = result["machine"]
    print(f"\n{FLAGS.hparams_set} ({FLAGS.hparams or 'no overrides'}) on {PROBLEM}; {m['cpu']}, "
          f"{m['cores']} cores, TF {m['tensorflow']}; {FLAGS.rounds} rounds of "
          f"{FLAGS.warmup_steps} warm-up + {FLAGS.steps} timed steps a contestant, in turn; "
          f"threads intra/inter-op (0: TensorFlow's choice)")
    header = (f"{'contestant':<34}{'oneDNN':>7}{'threads':>8}{'target tok/s':>13}{'min':>6}"
              f"{'max':>6}{'source tok/s':>13}{'steps/s':>8}{'MFU':>7}  per round")
    print(header + "\n" + "-" * (len(header) + 10))
    for entry in result["contestants"]:
        s = entry["summary"]
        if s is None:
            print(f"{entry['name']:<34}  no rate: "
                  f"{entry.get('dropped') or 'no log window after the warm-up steps'}")
            continue
        onednn = "/".join("on" if on else "off" for on in s["onednn"])
        print(f"{entry['name']:<34}{onednn:>7}{'/'.join(map(str, entry['threads'])):>8}"
              f"{s['target_tokens_per_s']:>13.0f}{s['min']:>6.0f}{s['max']:>6.0f}"
              f"{s['source_tokens_per_s']:>13.0f}{s['steps_per_s']:>8.3f}"
              f"{100 * s['mfu']:>6.1f}%  " + " ".join(fmt(r, ".0f") for r in s["per_round"]))
    peers = [e["summary"]["toolkit"] for e in result["contestants"]
             if e["kind"] == "peer" and e["summary"]]
    print(f"target tok/s: median over rounds (min, max, each round) of {FLAGS.window}-step "
          f"windows' medians; oneDNN: as TensorFlow reported in the contestant's process"
          + (f"; OpenNMT-tf: {peers[0]}" if peers else ""))
    p = result["parameters"]
    print(f"MFU = 6 * ({p['source_side']:,} * source tok/s + ({p['target_side']:,} + "
          f"{p['softmax_d_times_v']:,}) * target tok/s) / {result['matmul']['best']['gflops']:.0f}"
          f" GFLOP/s (encoder; decoder + softmax; attention scores and embedding lookups not "
          f"counted)")

    ours = [e for e in result["contestants"] if e["kind"] == "t2t_lite" and e["summary"]]
    header = (f"\n{'t2t_lite':<34}{'best':>6}{'padding':>8}{'warm-up s':>10}{'compile s':>10}"
              f"{'shapes':>7}")
    print(header + "\n" + "-" * (len(header) - 1))
    for entry in ours:
        s = entry["summary"]
        print(f"{entry['name']:<34}{s['best_window']:>6.0f}{100 * s['padding_fraction']:>7.1f}%"
              f"{s['warmup_seconds']:>10.1f}{s['compile_seconds']:>10.1f}"
              f"{s['distinct_shapes']:>7d}")
    print("best: the fastest window of any round; padding: of the timed steps' positions; "
          "warm-up s, compile s: medians over rounds; shapes: distinct padded batch shapes")

    if result["ratios"]:
        header = (f"\n{'target tok/s ratio, same round':<68}{'median':>7}{'min':>6}{'max':>6}"
                  f"  per round")
        print(header + "\n" + "-" * (len(header) + 8))
        for r in result["ratios"]:
            print(f"{r['numerator'] + ' / ' + r['denominator']:<68}{fmt(r['median'], '.2f'):>7}"
                  f"{fmt(r['min'], '.2f'):>6}{fmt(r['max'], '.2f'):>6}  "
                  + " ".join(fmt(value, ".2f") for value in r["per_round"]))


# --- The run -------------------------------------------------------------------------------------

def first_timed_batch(problem, hparams):
    """The batch of the first timed step of the first mode (its dense-layer shapes are the
    ones whose matmul rates are measured)."""
    hparams = hparams.replace(length_bucketing=MODES[FLAGS.modes[0]][1])
    batches = training_run.training_batches(problem, hparams).skip(FLAGS.warmup_steps)
    return hparams, next(iter(batches.take(1)))


def measure_matmuls(shapes, dense_flops) -> dict:
    """reporting.matmul_backends on `shapes`, and each backend's rate over the step's dense
    layers (FLOP-weighted)."""
    measured = reporting.matmul_backends(shapes, runs=FLAGS.matmul_runs)
    measured["step_weighted"] = {
        backend: reporting.flop_weighted_gflops(rates, dense_flops)
        for backend, rates in measured["rates"].items()}
    return measured


def main(unused_argv):
    if FLAGS.contestant_child:
        common.set_threads_from_flags()
        return contestant_child(FLAGS.contestant_child)
    problem = registry.problem(PROBLEM)
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)  # keeps the splits already complete
    hparams, vocab_size = common.hparams_from_flags(), problem.vocab_size(FLAGS.data_dir)
    entries = contestants()
    result = {"problem": PROBLEM, "hparams_set": FLAGS.hparams_set, "hparams": FLAGS.hparams,
              "steps": FLAGS.steps, "warmup_steps": FLAGS.warmup_steps, "window": FLAGS.window,
              "rounds": FLAGS.rounds, "matmul_runs": FLAGS.matmul_runs,
              "threads": {"intra_op": FLAGS.intra_op_parallelism_threads,
                          "inter_op": FLAGS.inter_op_parallelism_threads},
              "machine": {**reporting.machine(), "load_average_at_start": os.getloadavg()}}

    shape_hparams, batch = first_timed_batch(problem, hparams)
    dense = training_run.dense_shapes(batch, shape_hparams, vocab_size)
    dense_flops = {reporting.shape_key(s): f for s, f in training_run.shape_flops(dense).items()}
    shapes = reporting.square_and(dense)
    print(f"float32 matmul rates before the rounds ({len(shapes)} shapes, "
          f"{len(reporting.MATMUL_BACKENDS)} backends)", flush=True)
    matmul = {"before": measure_matmuls(shapes, dense_flops),
              "dense_shapes": {reporting.shape_key(s): n for s, n in dense.items()}}

    result["order"] = run_rounds(entries, hparams)

    print("float32 matmul rates after the rounds", flush=True)
    matmul["after"] = measure_matmuls(shapes, dense_flops)
    matmul["best"] = reporting.best_rate({when: matmul[when] for when in ("before", "after")})
    gflops = matmul["best"]["gflops"]
    result["matmul"] = matmul
    result["machine"]["load_average_at_end"] = os.getloadavg()  # 1, 5, 15 min

    first = next(r for e in entries if e["kind"] == "t2t_lite" for r in e["rounds"] if r)
    parameters = result["parameters"] = first["parameters"]
    for entry in entries:
        entry["summary"] = summarize(entry, parameters, gflops)
    result["contestants"] = entries
    result["ratios"] = ratios(entries)
    print_matmul_table(matmul, matmul["dense_shapes"])
    print_tables(result)
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, result)


if __name__ == "__main__":
    common.run_main(main)
