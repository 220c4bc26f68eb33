"""Training speed on translate_multi30k_deen, in alternating rounds, and model FLOPs utilisation
against the fastest float32 matmul of the run, for a bfloat16 contestant also against the fastest
bfloat16 one (benchmarks/README.md, train_speed.py).

  python benchmarks/train_speed.py --data_dir=D [--modes=no_xla_each] [--rounds=3]
      [--compare] [--peers=opennmt_tf,eole] [--warmup_steps=20 --steps=60 --window=10]
      [--sampling_compare=ALPHA]
      [--work_dir=/tmp/t2t_lite_train_speed] [--output_json=F]

One clock for every toolkit: each contestant is its toolkit's own training program, timed by
the wall clock between its progress lines; a contestant-round's rates are medians over its log
windows after --warmup_steps updates (harness.window_medians) of real tokens a second. The
source tokens that t2t_lite-trainer's lines leave out are counted here on the same seeded
batches, whose target count must agree with the trainer's within 2%. A peer is a run.py under
peers/ with the contract of peers/opennmt_tf/README.md. --sampling_compare adds the first mode
with subword sampling (hparams.sentencepiece_alpha) and the input pipeline's own rate with and
without it, in real tokens per second of its process's CPU time.
"""
import json
import os
import shutil
import statistics
import sys
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry
common.load_tensorflow()  # the programs' start: a quiet TensorFlow

import harness  # noqa: E402  (benchmarks/, beside this script)
import matmul_rates  # noqa: E402
import training_run  # noqa: E402
from harness import ONEDNN, PROBLEM, fmt  # noqa: E402
import t2t_lite  # noqa: E402
from t2t_lite.training.trainer import cpu_multiplies_in_bfloat16, mixed_precision_for  # noqa: E402

COUNT_TOLERANCE = 0.02  # the trainer's target tokens/s against the count of the same window
OWN_THREADS = [0, 0]  # a toolkit's own choice of threads: TensorFlow's, or torch's defaults
MODES = {  # name: (XLA, hparams.length_bucketing)
    "xla": (True, "longer"),
    "no_xla": (False, "longer"),
    "no_xla_each": (False, "each"),  # source and target lengths bucketed apart: less padding
}
# The peers in each round's order, as their users run them and with t2t_lite's threads;
# "train_log": where its TensorFlow says whether it loaded oneDNN. OpenNMT-tf's users run
# TensorFlow's default oneDNN choice (TF_ENABLE_ONEDNN_OPTS unset); with t2t_lite's settings it
# gets this process's environment, as t2t_lite's contestants do. TF_CPP_MIN_LOG_LEVEL=0 keeps
# the oneDNN line in its log.
PEERS = {
    "opennmt_tf": {"name": "OpenNMT-tf", "train_log": "train.log", "variants": [
        ("as users run it", "own", {ONEDNN: None, "TF_CPP_MIN_LOG_LEVEL": "0"}),
        ("t2t_lite's TF settings", "t2t_lite", {"TF_CPP_MIN_LOG_LEVEL": "0"})]},
    "eole": {"name": "eole", "train_log": None, "variants": [
        ("as its users run it", "own", {}), ("with t2t_lite's thread settings", "t2t_lite", {})]},
}

training_run.define_flags(flags)
flags.DEFINE_integer("steps", 60, "Timed training steps per contestant and round.")
flags.DEFINE_integer("warmup_steps", 20, "Untimed steps per contestant and round first.",
                     lower_bound=0)
flags.DEFINE_integer("window", 10, "Steps per log window (every toolkit logs this often).",
                     lower_bound=1)
harness.define_rounds_flags(flags, "/tmp/t2t_lite_train_speed")
flags.DEFINE_list("modes", ["no_xla_each"], "t2t_lite contestants, of: " + ", ".join(
    f"{name} (XLA {'on' if xla else 'off'}, length_bucketing={bucketing})"
    for name, (xla, bucketing) in MODES.items()))
flags.DEFINE_boolean("compare", False, "Add every peer of --peers as two contestants: as its "
                     "users run it, and with t2t_lite's settings.")
flags.DEFINE_list("peers", list(PEERS), "The peers --compare adds, of: " + ", ".join(PEERS))
flags.DEFINE_boolean("onednn_compare", None, "Add the first of --modes with TensorFlow's oneDNN "
                     "switched the other way (TF_ENABLE_ONEDNN_OPTS=0 where it is on here, else "
                     "1). Default: on with --compare.")
flags.DEFINE_boolean("precision_compare", None, "Add the first of --modes in the other "
                     "precision: float32 where it trains in bfloat16 (mixed_precision=auto on a "
                     "CPU with AVX512_BF16 or AMX), else bfloat16. Default: on with --compare "
                     "where the CPU has AVX512_BF16 or AMX.")
flags.DEFINE_float("sampling_compare", None, "Add the first of --modes with "
                   "sentencepiece_alpha=this, and the input pipeline's rates with and without.")
flags.DEFINE_integer("pipeline_batches", 300, "Batches the input pipeline's rate is timed on.",
                     lower_bound=1)
flags.DEFINE_integer("matmul_runs", 10, "Runs of each matmul shape and backend, before and "
                     "after the rounds.", lower_bound=1)
common.define_thread_flags()  # t2t_lite's, and the peers' with t2t_lite's settings
flags.mark_flags_as_required(["data_dir"])
flags.register_validator("modes", lambda modes: modes and set(modes) <= set(MODES),
                         "one or more of " + ", ".join(MODES))
flags.register_validator("peers", lambda keys: set(keys) <= set(PEERS), "any of " + ", ".join(
    PEERS))


def default_on(flag: bool, when: bool) -> bool:
    return when if flag is None else flag


def contestants() -> list:
    """The entries of harness.run_rounds in the order each round runs them."""
    threads, first = [FLAGS.intra_op_parallelism_threads, FLAGS.inter_op_parallelism_threads], \
        FLAGS.modes[0]

    def ours(name, mode, environment=None, hparams=None):
        # this process's environment: TensorFlow's oneDNN choice, or the caller's switch
        return {"name": name, "kind": "t2t_lite", "ours": True, "mode": mode, "hparams": hparams,
                "environment": environment or {}, "threads": threads,
                "precision": precision(hparams)}

    result = [ours(f"t2t_lite {mode}", mode) for mode in FLAGS.modes]
    if default_on(FLAGS.precision_compare, FLAGS.compare and cpu_multiplies_in_bfloat16()):
        other = "float32" if result[0]["precision"] == "bfloat16" else "bfloat16"
        result.append(ours(f"t2t_lite {first} {other}", first, hparams=f"mixed_precision={other}"))
    if FLAGS.sampling_compare:
        result.append(ours(f"t2t_lite {first} sentencepiece_alpha={FLAGS.sampling_compare}",
                           first, hparams=f"sentencepiece_alpha={FLAGS.sampling_compare}"))
    if default_on(FLAGS.onednn_compare, FLAGS.compare):
        onednn = harness.onednn_enabled()  # as TensorFlow loaded here, and in the contestants
        result.append(ours(f"t2t_lite {first} oneDNN {'off' if onednn else 'on'}", first,
                           {ONEDNN: "0" if onednn else "1"}))
    for key in FLAGS.peers if FLAGS.compare else []:
        result += peer_contestants(key, threads)
    return result


def precision(overrides: str) -> str:
    """The dtype t2t_lite-trainer computes in with --hparams and then `overrides`: its own
    choice (mixed_precision_for) on this machine's devices, as its default strategy sees them."""
    import tensorflow as tf
    hparams = common.hparams_from_flags().override_from_string(overrides or "")
    return mixed_precision_for(hparams, tf.distribute.get_strategy())


def peer_contestants(key: str, threads: list) -> list:
    """The peer's two contestants; the second is left out when it would run just as the first
    (t2t_lite's threads are the toolkit's own choice too), both when run.py is missing."""
    peer, entries = PEERS[key], []
    run = os.path.join(harness.PEERS, key, "run.py")
    for label, which, environment in peer["variants"]:
        entry = {"name": f"{peer['name']} {label}", "kind": "peer", "group": key,
                 "environment": environment, "threads": OWN_THREADS if which == "own" else threads}
        same = next((e for e in entries if (e["threads"], e["environment"])
                     == (entry["threads"], environment)), None)
        if same or not os.path.exists(run):
            entry["dropped"] = (f"would run as {same['name']} (t2t_lite's threads "
                                f"{entry['threads'][0]}/{entry['threads'][1]} are its own choice "
                                f"too)" if same else f"{run} does not exist")
            print(f"{entry['name']} left out: {entry['dropped']}")
        entries.append(entry)
    return entries


def round_stem(entry, round_index) -> str:
    """work_dir/round<R>_<contestant>: the start of the round's file names."""
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    return os.path.join(FLAGS.work_dir, f"round{round_index + 1}_" + "".join(
        c if c.isalnum() else "_" for c in entry["name"]))


def run_trainer(entry, round_index, updates, parameters) -> dict:
    """One round of t2t_lite-trainer in the entry's mode, environment and threads, its output in
    round<R>_<contestant>.log; rates over its log windows, counted on `updates`."""
    stem, steps = round_stem(entry, round_index), FLAGS.warmup_steps + FLAGS.steps
    output_dir = os.path.join(FLAGS.work_dir, "t2t_lite_model")
    shutil.rmtree(output_dir, ignore_errors=True)  # a fresh model every round
    xla = MODES[entry["mode"]][0]
    overrides = [FLAGS.hparams, f"length_bucketing={MODES[entry['mode']][1]}", entry["hparams"]]
    command = [*harness.t2t_lite_command("trainer"), f"--problem={PROBLEM}",
               "--model=transformer", f"--hparams_set={FLAGS.hparams_set}",
               f"--hparams={','.join(filter(None, overrides))}", f"--data_dir={FLAGS.data_dir}",
               f"--output_dir={output_dir}", f"--train_steps={steps}",
               f"--log_every_steps={FLAGS.window}", f"--eval_every={steps}", "--eval_steps=0",
               "--eval_bleu_sentences=0", f"--save_checkpoints_steps={steps}",
               "--keep_checkpoint_max=1", "--jit_compile" if xla else "--nojit_compile",
               f"--seed={training_run.TRAINER_SEED}", *harness.thread_flags(*entry["threads"])]
    launched = time.time()  # TensorFlow's start-up lines kept: whether it loaded oneDNN
    text = harness.run_logged(command, stem + ".log", harness.child_environment(
        {**entry["environment"], "TF_CPP_MIN_LOG_LEVEL": "0", "T2T_LITE_VERBOSE_STARTUP": "1"}))
    log = training_run.parse_trainer_log(text, time.localtime(launched).tm_year)
    if log["parameters"] != parameters["total"]:
        raise ValueError(f"t2t_lite-trainer built {log['parameters']} parameters, this script "
                         f"{parameters['total']}: not the same model ({stem}.log)")
    windows = training_run.trainer_windows(log, updates)

    def compiles(window):  # XLA compiles every new batch shape
        return xla and window["new_shapes"] > 0

    def updates_in(window):
        return window["step"] - window["first_step"] + 1

    kept = harness.kept_windows(windows, FLAGS.warmup_steps, compiles)
    for w in kept:
        if abs(w["count_check"]) > COUNT_TOLERANCE:
            raise ValueError(f"t2t_lite-trainer logged {w['logged_target_tokens_per_s']:.0f} "
                             f"target tokens/s for updates {w['first_step']}-{w['step']}, where "
                             f"the batches counted here give {w['target_tokens_per_s']:.0f}: they "
                             f"are not the batches it trained on ({stem}.log)")
    typical = statistics.median(w["seconds"] / updates_in(w) for w in kept) if kept else None
    positions = sum(w["positions"] for w in kept)
    real = sum(w["source_tokens"] + w["target_tokens"] for w in kept)
    import tensorflow as tf
    return {**harness.window_medians(windows, FLAGS.warmup_steps, compiles),
            "window_target_tokens_per_s": [w["target_tokens_per_s"] for w in kept],
            "padding_fraction": 1 - real / positions if positions else None,
            "step_median_s": typical, "startup_seconds": log["start"] - launched,
            "warmup_seconds": sum(w["seconds"] for w in windows
                                  if w["first_step"] <= FLAGS.warmup_steps),
            "compile_seconds": sum(max(0.0, w["seconds"] - updates_in(w) * typical)
                                   for w in windows if compiles(w)) if typical else 0.0,
            "distinct_shapes": len({tuple(shape) for u in updates for shape in u["shapes"]}),
            "new_shapes_in_timed_windows": sum(w["new_shapes"] for w in windows
                                               if w["first_step"] > FLAGS.warmup_steps),
            "count_check_max": max((abs(w["count_check"]) for w in kept), default=None),
            "wall_seconds": time.time() - launched, "log_windows": windows,
            "onednn": harness.ONEDNN_ON_LINE in text,
            "toolkit": f"t2t_lite {t2t_lite.__version__} / TF {tf.__version__}"}


def run_peer(entry, hparams, round_index) -> dict:
    """One round of the entry's peer (its run.py), its output in round<R>_<contestant>.log, its
    JSON in .json and its training log, when TensorFlow's, in .train.log."""
    stem, steps = round_stem(entry, round_index), FLAGS.warmup_steps + FLAGS.steps
    work_dir = os.path.join(FLAGS.work_dir, entry["group"])
    if os.path.exists(stem + ".json"):
        os.remove(stem + ".json")
    # besides the contract's flags, race.py's: the raw data, the schedule of --hparams_set, and
    # one checkpoint, after the last update (a save inside a window would count in its time)
    harness.run_logged(
        [sys.executable, os.path.join(harness.PEERS, entry["group"], "run.py"),
         f"--data_dir={FLAGS.data_dir}", f"--work_dir={work_dir}", f"--train_steps={steps}",
         f"--log_every={FLAGS.window}", f"--skip_steps={FLAGS.warmup_steps}",
         *harness.thread_flags(*entry["threads"]), f"--output_json={stem}.json",
         f"--tmp_dir={FLAGS.tmp_dir}", f"--warmup_steps={hparams.learning_rate_warmup_steps}",
         f"--learning_rate_constant={hparams.learning_rate_constant}", f"--save_every={steps}"],
        stem + ".log", harness.child_environment(entry["environment"]))
    with open(stem + ".json", encoding="utf-8") as handle:
        result = {"onednn": None, **json.load(handle)}
    train_log = PEERS[entry["group"]]["train_log"]
    if train_log:
        shutil.copyfile(os.path.join(work_dir, train_log), stem + ".train.log")
        with open(stem + ".train.log", encoding="utf-8", errors="replace") as handle:
            result["onednn"] = harness.ONEDNN_ON_LINE in handle.read()
    return result


def run_round(entry, round_index, hparams, updates, parameters) -> dict:
    start = time.time()
    result = (run_trainer(entry, round_index, updates[batches_of(entry)], parameters)
              if entry["kind"] == "t2t_lite" else run_peer(entry, hparams, round_index))
    onednn = {True: "on", False: "off", None: "-"}[result["onednn"]]
    print(f"  {fmt(result.get('target_tokens_per_s'), '.0f')} target tok/s, oneDNN {onednn}, "
          f"{time.time() - start:.0f} s", flush=True)
    return result


def batches_of(entry) -> tuple:
    """What decides a t2t_lite contestant's batches: its mode and its hparams."""
    return entry["mode"], entry["hparams"] or ""


def pipeline_rates(problem, hparams) -> dict:
    """{"unsampled", "sampled"}: real tokens (source and target) of the first
    --pipeline_batches training batches over the CPU seconds of this process while reading
    them (the pipeline's rate per core; TensorFlow's own threads) and over the wall seconds."""
    rates = {}
    for name, alpha in (("unsampled", 0.0), ("sampled", FLAGS.sampling_compare)):
        batches = training_run.trainer_batches(problem, FLAGS.data_dir, hparams.replace(
            sentencepiece_alpha=alpha)).take(FLAGS.pipeline_batches)
        cpu, wall, tokens = time.process_time(), time.time(), 0
        for batch in batches:
            tokens += int(sum((batch[f].numpy() != 0).sum() for f in ("inputs", "targets")))
        cpu, wall = time.process_time() - cpu, time.time() - wall
        rates[name] = {"tokens": tokens, "tokens_per_cpu_s": tokens / cpu,
                       "tokens_per_s": tokens / wall}
        print(f"input pipeline, {name}: {tokens / cpu:,.0f} real tokens per CPU second, "
              f"{tokens / wall:,.0f} per second", flush=True)
    return rates


def summarize(entry, parameters, best):
    """The contestant's medians over rounds (and, for t2t_lite, its timings) and MFU against
    the float32 `best` rate (matmul_rates.best_rate), a bfloat16 one's also against the
    bfloat16 best ("mfu_bfloat16")."""
    ran = [result for result in entry["rounds"] if result]
    timed = [r for r in ran if r.get("target_tokens_per_s") is not None]
    if not timed:
        return None
    rates = harness.spread(r["target_tokens_per_s"] for r in timed)
    summary = {"target_tokens_per_s": rates["median"], "min": rates["min"], "max": rates["max"],
               "per_round": harness.per_round(entry, "target_tokens_per_s"),
               "rounds": len(timed), "onednn": list(dict.fromkeys(r["onednn"] for r in ran)),
               "toolkit": ran[0].get("toolkit"), **harness.medians(timed, (
                   "source_tokens_per_s", "steps_per_s", "target_tokens_per_step"))}
    if entry["kind"] == "t2t_lite":
        summary.update(harness.medians(ran, ("startup_seconds", "warmup_seconds",
                                             "compile_seconds")),
                       padding_fraction=statistics.median(r["padding_fraction"] for r in timed),
                       best_window=max(max(r["window_target_tokens_per_s"]) for r in timed),
                       distinct_shapes=max(r["distinct_shapes"] for r in ran))
    flops = summary["source_tokens_per_s"] and training_run.model_flops(
        parameters, summary["source_tokens_per_s"], summary["target_tokens_per_s"])
    bfloat16 = entry.get("precision") == "bfloat16" and best.get("bfloat16")
    return {**summary, "model_flops_per_s": flops or None,
            "mfu": flops / (best["float32"]["gflops"] * 1e9) if flops else None,
            "mfu_bfloat16": flops / (bfloat16["gflops"] * 1e9) if flops and bfloat16 else None}


def ratios(entries) -> list:
    """Target tokens/s round by round: every t2t_lite contestant against every peer, the first
    mode against its variants (the other precision, kernels), XLA against no XLA (pairs that
    never both ran left out)."""
    by_name = {e["name"]: e for e in entries}
    first = by_name[f"t2t_lite {FLAGS.modes[0]}"]
    pairs = [(a, b) for a in entries if a["kind"] == "t2t_lite" for b in entries
             if b["kind"] == "peer"]
    pairs += [(first, e) for e in entries if e["name"].startswith(first["name"] + " ")]
    if "t2t_lite xla" in by_name and "t2t_lite no_xla" in by_name:
        pairs.append((by_name["t2t_lite xla"], by_name["t2t_lite no_xla"]))
    return [harness.ratio(a, b, "target_tokens_per_s") for a, b in pairs
            if any(a["rounds"]) and any(b["rounds"])]


def print_matmul_table(matmul):
    before, after, best = matmul["before"], matmul["after"], matmul["best"]
    blas = before["backends"]["numpy"]["blas"]
    print(f"\nmatmul GFLOP/s, median of {FLAGS.matmul_runs} runs, before / after the "
          f"rounds; each backend in its own process; numpy's BLAS: "
          f"{blas.get('name') or blas.get('libraries')} {blas.get('version', '')} "
          f"({blas.get('architecture', '?')} kernels)")
    backends = list(before["rates"])
    rows = [[shape, fmt(matmul["dense_shapes"].get(shape), "d")] + [
        f"{before['rates'][b][shape]:.0f} / {after['rates'][b][shape]:.0f}" for b in backends]
        for shape in before["rates"][backends[0]]]
    rows.append(["step (FLOP-weighted)", ""] + [
        f"{before['step_weighted'][b]:.0f} / {after['step_weighted'][b]:.0f}" for b in backends])
    print(harness.table(["m x k x n", "matmuls"] + backends, rows))
    print("matmuls: of that shape in one forward pass of the first timed batch (the backward "
          "pass doubles them); " + "; ".join(
              f"best {dtype}: {b['gflops']:.0f} GFLOP/s ({b['backend']}, {b['shape']}, "
              f"{b['when']} the rounds)" for dtype, b in best.items() if b) +
          ": the MFU denominators")


def print_tables(result):
    onednn_text = {True: "on", False: "off", None: "-"}
    print(f"\n{FLAGS.hparams_set} ({FLAGS.hparams or 'no overrides'}) on {PROBLEM}; "
          f"{harness.machine_line(result['machine'])}; {FLAGS.rounds} rounds of "
          f"{FLAGS.warmup_steps} warm-up + {FLAGS.steps} timed steps a contestant, in turn; "
          f"threads intra/inter-op (0: the toolkit's own choice)")
    rows, left_out = [], []
    for entry in result["contestants"]:
        s = entry["summary"]
        if s is None:
            left_out.append(f"{entry['name']}  no rate: "
                            f"{entry.get('dropped') or 'no log window after the warm-up steps'}")
            continue
        rows.append([entry["name"], entry.get("precision", "float32"),
                     "/".join(onednn_text[on] for on in s["onednn"]),
                     "/".join(map(str, entry["threads"])), f"{s['target_tokens_per_s']:.0f}",
                     f"{s['min']:.0f}", f"{s['max']:.0f}", fmt(s["source_tokens_per_s"], ".0f"),
                     fmt(s["steps_per_s"], ".3f"), fmt(s["target_tokens_per_step"], ".0f"),
                     fmt(s["mfu"] and 100 * s["mfu"], ".1f") + "%",
                     " ".join(fmt(r, ".0f") for r in s["per_round"])])
    print(harness.table(["contestant", "dtype", "oneDNN", "threads", "target tok/s", "min", "max",
                         "source tok/s", "steps/s", "tgt/step", "MFU", "per round  "], rows))
    print("\n".join(left_out))
    toolkits = dict.fromkeys(e["summary"]["toolkit"] for e in result["contestants"]
                             if e["summary"])
    print(f"target tok/s: median over rounds (min, max, each) of the medians of the toolkit's "
          f"log windows of {FLAGS.window} updates after its first {FLAGS.warmup_steps}, timed "
          f"between its training program's progress lines; real tokens, end of sentence "
          f"included; oneDNN: as TensorFlow reported (-: not TensorFlow); "
          + ", ".join(filter(None, toolkits)))
    p = result["parameters"]
    print(f"MFU = 6 * ({p['source_side']:,} * source tok/s + ({p['target_side']:,} + "
          f"{p['softmax_d_times_v']:,}) * target tok/s) / "
          f"{result['matmul']['best']['float32']['gflops']:.0f} GFLOP/s (the best float32 matmul;"
          f" encoder; decoder + softmax; attention scores and embedding lookups not counted)")
    print("".join(f"{e['name']}: MFU {100 * s['mfu_bfloat16']:.1f}% against the best bfloat16 "
                  f"matmul ({result['matmul']['best']['bfloat16']['gflops']:.0f} GFLOP/s)\n"
                  for e in result["contestants"] for s in [e["summary"]]
                  if s and s.get("mfu_bfloat16")))
    print(harness.table(["t2t_lite", "best", "padding", "start s", "warm-up s", "compile s",
                         "shapes"], [
        [e["name"], f"{s['best_window']:.0f}", f"{100 * s['padding_fraction']:.1f}%",
         f"{s['startup_seconds']:.1f}", f"{s['warmup_seconds']:.1f}",
         f"{s['compile_seconds']:.1f}", str(s["distinct_shapes"])]
        for e in result["contestants"] if e["kind"] == "t2t_lite" for s in [e["summary"]] if s]))
    print("best: the fastest window of any round; padding: of the timed windows' positions; "
          "start s: from launching t2t_lite-trainer to its training loop; warm-up s: the "
          "windows left out at the start; compile s: XLA's new shapes; all medians over "
          "rounds; shapes: distinct padded batch shapes (rows, source, target length)\n")
    if result["ratios"]:
        print(harness.table(["target tok/s ratio, same round", "median", "min", "max",
                             "per round  "], [
            [*harness.ratio_cells(r), " ".join(fmt(value, ".2f") for value in r["per_round"])]
            for r in result["ratios"]]))


def main(unused_argv):
    problem = registry.problem(PROBLEM)
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)  # keeps the splits already complete
    hparams, vocab_size = common.hparams_from_flags(), problem.vocab_size(FLAGS.data_dir)
    result = {"problem": PROBLEM, **{name: FLAGS[name].value for name in (
                  "hparams_set", "hparams", "steps", "warmup_steps", "window", "rounds",
                  "matmul_runs")},
              "threads": {"intra_op": FLAGS.intra_op_parallelism_threads,
                          "inter_op": FLAGS.inter_op_parallelism_threads},
              "machine": harness.machine()}
    entries = contestants()

    # What the trainer's lines leave out, from the same model and batches: the parameter
    # counts (MFU), and each update's tokens and shapes in every mode.
    parameters = result["parameters"] = training_run.parameter_counts(
        training_run.training_steps(hparams, vocab_size, jit_compile=False).model, hparams,
        vocab_size)
    updates, first = {}, None
    for mode, overrides in dict.fromkeys(batches_of(e) for e in entries
                                         if e["kind"] == "t2t_lite"):
        mode_hparams = hparams.replace(length_bucketing=MODES[mode][1]).override_from_string(
            overrides)
        per_update = max(1, mode_hparams.optimizer_multistep_accumulate_steps)
        batches = list(training_run.trainer_batches(problem, FLAGS.data_dir, mode_hparams).take(
            (FLAGS.warmup_steps + FLAGS.steps) * per_update))
        updates[mode, overrides] = training_run.update_tokens(
            batches, len(batches) // per_update, per_update)
        first = first or (mode_hparams, batches[FLAGS.warmup_steps * per_update])
    result["t2t_lite_updates"] = {" ".join(filter(None, key)): value
                                  for key, value in updates.items()}
    if FLAGS.sampling_compare:
        result["pipeline"] = pipeline_rates(problem, hparams)
    dense = training_run.dense_shapes(first[1], first[0], vocab_size)
    dense_flops = {matmul_rates.shape_key(s): f
                   for s, f in training_run.shape_flops(dense).items()}
    shapes = matmul_rates.square_and(dense)
    matmul = {"dense_shapes": {matmul_rates.shape_key(s): n for s, n in dense.items()}}
    for when in ("before", "after"):
        if when == "after":
            result["order"] = harness.run_rounds(entries, FLAGS.rounds, lambda entry, index:
                                                 run_round(entry, index, hparams, updates,
                                                           parameters))
        print(f"matmul rates {when} the rounds", flush=True)
        matmul[when] = matmul_rates.matmul_backends(shapes, FLAGS.matmul_runs, dense_flops, any(
            e.get("precision") == "bfloat16" for e in entries))
    matmul["best"] = {dtype: matmul_rates.best_rate({when: matmul[when] for when in (
        "before", "after")}, dtype) for dtype in ("float32", "bfloat16")}
    result["matmul"] = matmul
    result["machine"]["load_average_at_end"] = os.getloadavg()  # 1, 5, 15 min
    for entry in entries:
        entry["summary"] = summarize(entry, parameters, matmul["best"])
    result["contestants"], result["ratios"] = entries, ratios(entries)
    print_matmul_table(matmul)
    print_tables(result)
    if FLAGS.output_json:
        harness.write_json(FLAGS.output_json, result)


if __name__ == "__main__":
    harness.run_main(main)
