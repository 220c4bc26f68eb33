"""Training speed on translate_multi30k_deen, in alternating rounds, and model FLOPs utilisation
against the fastest float32 matmul the machine runs.

  python benchmarks/train_speed.py --data_dir=D [--modes=no_xla_each] [--rounds=3]
      [--compare] [--peers=opennmt_tf,eole] [--warmup_steps=20 --steps=60 --window=10]
      [--work_dir=/tmp/t2t_lite_train_speed] [--output_json=F]

One clock for every toolkit: each contestant is its toolkit's own training program, run as a
subprocess, and timed by the wall clock between that program's progress lines. Each logs every
--window updates; a log window is the time between two lines (the first from the start of the
training loop), and a contestant-round's rates are medians over the windows that start after its
first --warmup_steps updates, of the real (non-pad) tokens they trained, end of sentence
included, per second.

Contestants. Each requested --modes is a contestant: t2t_lite-trainer (t2t_lite's own training
program: its loop, callbacks and checkpoint saver, with the project's defaults) with XLA or not
and the mode's length_bucketing, no evaluation, a checkpoint only after the last update, the
same --intra_op / --inter_op_parallelism_threads as its users pass. Its progress lines give the
update, target tokens per second and a timestamp; the source tokens, which they leave out, and
the batch shapes are counted here on the same seeded batches (training_run.trainer_batches:
the trainer's --seed, its order), and the trainer's own target tokens/s of every window must
agree with that count within 2%. --kernels_compare (on with --compare) adds the first mode on
TensorFlow's default kernels (TF_ENABLE_ONEDNN_OPTS=0, where t2t_lite asks for oneDNN), to show
what oneDNN gives on this CPU; --blas_compare (on with --compare) the first mode without the BLAS
weight gradients (T2T_LITE_BLAS=0, t2t_lite/blas), to show what they give. --compare adds every
peer of PEERS (--peers chooses among them) twice: as its users run it (its own defaults) and
with t2t_lite's settings. A peer is a run.py under benchmarks/peers/ with the OpenNMT-tf peer's
contract (peers/opennmt_tf/README.md): the flags --data_dir --work_dir --train_steps --log_every
--skip_steps --intra_op_parallelism_threads --inter_op_parallelism_threads --output_json, exit
status 3 when it cannot run on this machine (no Python for it), and a JSON with
target_tokens_per_s, source_tokens_per_s, steps_per_s, target_tokens_per_step, log_windows and
toolkit, its rates medians over its toolkit's log windows of --log_every updates that start
after --skip_steps. A peer whose run.py is missing or cannot run here is left out with the
reason printed.

Rounds. The speed of a shared or virtual machine drifts (by 1.5 times within ten minutes on the
one these figures come from), so contestants that run one after the other are not compared on
the same machine. The contestants run in turn, A, B, C, A, B, C, ... for --rounds rounds, each
contestant-round a fresh process with its environment for --warmup_steps + --steps updates.
Each pair of contestants is compared round by round: the ratio of their target tokens per
second within a round (when they ran minutes apart), then the median and the spread (min-max)
of those ratios over the rounds. A contestant's own figure is the median over rounds. Under XLA
the windows with an update of a new batch shape, which XLA compiles, are left out of t2t_lite's
rates ("compile s": their time beyond their updates at the median update time).

MFU = model FLOP/s / the best float32 matmul rate measured in the same run, by the
6 · parameters · tokens estimate (2 FLOPs forward and 4 backward per weight and token), each
token counting the parameters it passes through:
  model FLOP/s = 6 · (N_src · S + (N_tgt + d · V) · T)
S, T: real source and target tokens/s; N_src: the encoder and the key/value projections of the
encoder-decoder attention; N_tgt: the rest of the decoder; d · V: the pre-softmax projection.
Embedding lookups, attention scores (QK^T, weights·V) and padding count nothing. The peers
train the same model, so their tokens count the same FLOPs.
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
from peers import peer_environment  # noqa: E402  (benchmarks/peers/peer_environment.py)
from reporting import ONEDNN  # noqa: E402
import t2t_lite  # noqa: E402
from t2t_lite import kernel_choice  # noqa: E402
from t2t_lite.blas.matmul import SWITCH_VARIABLE as BLAS  # noqa: E402
from training_run import PROBLEM  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# a peer's run.py exit status when it cannot run here (no Python for it)
PEER_UNAVAILABLE = peer_environment.NO_PYTHON_EXIT_STATUS
ONEDNN_ON_LINE = "oneDNN custom operations are on"  # TensorFlow's log line when it loads oneDNN
COUNT_TOLERANCE = 0.02  # the trainer's target tokens/s against the count of the same window
OWN_THREADS = [0, 0]  # a toolkit's own choice of threads: TensorFlow's, or torch's defaults
# run.py flags besides the contract's, as race.py passes them too: the raw data, the schedule
# of --hparams_set, and one checkpoint, after the last update (a save inside a window would
# count in its time).
PEER_EXTRA_FLAGS = ("tmp_dir", "warmup_steps", "learning_rate_constant", "save_every")
# The peers, in the order each round runs them. Each runs in two variants: "own" threads (0/0)
# and environment, as its users run it, and t2t_lite's --intra_op / --inter_op threads.
# "train_log": the file in the peer's work dir where its TensorFlow says whether it loaded
# oneDNN (None: not TensorFlow). "extra_flags": those of PEER_EXTRA_FLAGS it takes.
PEERS = [
    {"key": "opennmt_tf", "name": "OpenNMT-tf",
     "run": os.path.join(HERE, "peers", "opennmt_tf", "run.py"), "train_log": "train.log",
     "extra_flags": PEER_EXTRA_FLAGS,
     # As its users run it: no TF_ENABLE_ONEDNN_OPTS. run.py imports t2t_lite, which sets the
     # variable to 1 when it is absent and hands its environment on to onmt-main; an empty
     # value survives that and makes TensorFlow fall back to its own default (it logs a
     # warning saying so). TF_CPP_MIN_LOG_LEVEL=0 keeps TensorFlow's line saying whether
     # oneDNN is on in the peer's training log, which each round reads back.
     # (Its rows keep the names of the tables in docs/benchmarks.md.)
     "variants": [{"label": "as users run it", "threads": "own",
                   "environment": {ONEDNN: "", "TF_CPP_MIN_LOG_LEVEL": "0"}},
                  {"label": "t2t_lite's TF settings", "threads": "t2t_lite",
                   "environment": {ONEDNN: "1", "TF_CPP_MIN_LOG_LEVEL": "0"}}]},
    {"key": "eole", "name": "eole", "run": os.path.join(HERE, "peers", "eole", "run.py"),
     "train_log": None,
     "extra_flags": PEER_EXTRA_FLAGS,
     "variants": [{"label": "as its users run it", "threads": "own", "environment": {}},
                  {"label": "with t2t_lite's thread settings", "threads": "t2t_lite",
                   "environment": {}}]},
]

training_run.define_flags()
flags.DEFINE_integer("steps", 60, "Timed training steps per contestant and round.")
flags.DEFINE_integer("warmup_steps", 20, "Untimed steps per contestant and round before the "
                     "timed ones.", lower_bound=0)
flags.DEFINE_integer("window", 10, "Steps per log window (every toolkit logs this often).",
                     lower_bound=1)
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
flags.DEFINE_boolean("compare", False, "Add every peer of --peers as two contestants: as its "
                     "users run it, and with t2t_lite's settings.")
flags.DEFINE_list("peers", [peer["key"] for peer in PEERS], "The peers --compare adds, of: "
                  + ", ".join(f"{peer['key']} ({peer['name']})" for peer in PEERS))
flags.DEFINE_boolean("kernels_compare", None, "Add the first of --modes on TensorFlow's default "
                     "kernels (TF_ENABLE_ONEDNN_OPTS=0). Default: on with --compare.")
flags.DEFINE_boolean("blas_compare", None, "Add the first of --modes without the BLAS weight "
                     "gradients (T2T_LITE_BLAS=0, t2t_lite/blas). Default: on with --compare.")
flags.DEFINE_boolean("bfloat16_compare", None, "Add the first of --modes with "
                     "mixed_precision=bfloat16. Default: on with --compare where the CPU has "
                     "AVX512_BF16 or AMX.")
flags.DEFINE_integer("matmul_runs", 10, "Runs of each matmul shape and backend, before and "
                     "after the rounds.", lower_bound=1)
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")
flags.DEFINE_string("work_dir", "/tmp/t2t_lite_train_speed", "Folder of every contestant-round's "
                    "output (round<R>_<contestant>.log, and a peer's .train.log), the last "
                    "t2t_lite model and each peer's work dir.")
common.define_thread_flags()  # t2t_lite's, and the peers' with t2t_lite's settings
flags.register_validator("modes", lambda modes: modes and set(modes) <= set(MODES),
                         "one or more of " + ", ".join(MODES))
flags.register_validator("peers", lambda keys: set(keys) <= {peer["key"] for peer in PEERS},
                         "any of " + ", ".join(peer["key"] for peer in PEERS))


# --- The contestants -----------------------------------------------------------------------------

def contestants() -> list:
    """[{name, kind, mode or peer, environment changes, threads}] in the order each round runs
    them; a peer that cannot run has "dropped" (why) set."""
    own_threads = [FLAGS.intra_op_parallelism_threads, FLAGS.inter_op_parallelism_threads]
    result = [{"name": f"t2t_lite {mode}", "kind": "t2t_lite", "mode": mode,
               # the project's default kernels (oneDNN on x86-64, t2t_lite/cpu_kernels.py)
               "environment": {ONEDNN: None}, "threads": own_threads} for mode in FLAGS.modes]
    bfloat16 = FLAGS.bfloat16_compare
    if bfloat16 is None:
        flags_present = reporting.machine()["cpu_flags"]
        bfloat16 = FLAGS.compare and any(flags_present.get(name) for name in
                                         ("avx512_bf16", "amx_bf16"))
    if bfloat16:
        result.append({"name": f"t2t_lite {FLAGS.modes[0]} bfloat16", "kind": "t2t_lite",
                       "mode": FLAGS.modes[0], "hparams": "mixed_precision=bfloat16",
                       "environment": {ONEDNN: None}, "threads": own_threads})
    # the other side of the weight-gradient choice (t2t_lite/kernel_choice.py) than the one
    # the defaults made on this CPU
    blas_chosen = kernel_choice.applied() is None or \
        kernel_choice.applied().choice.blas_weight_gradients
    blas_other = FLAGS.compare if FLAGS.blas_compare is None else FLAGS.blas_compare
    if blas_other and MODES[FLAGS.modes[0]][0]:
        print(f"--blas_compare left out: {FLAGS.modes[0]} uses XLA, which never runs the op")
    elif blas_other:
        result.append({"name": f"t2t_lite {FLAGS.modes[0]} {'no' if blas_chosen else 'with'} "
                               f"BLAS", "kind": "t2t_lite", "mode": FLAGS.modes[0],
                       "environment": {ONEDNN: None, BLAS: "0" if blas_chosen else "1"},
                       "threads": own_threads})
    kernels = FLAGS.compare if FLAGS.kernels_compare is None else FLAGS.kernels_compare
    if kernels:
        result.append({"name": f"t2t_lite {FLAGS.modes[0]} TF kernels", "kind": "t2t_lite",
                       "mode": FLAGS.modes[0], "environment": {ONEDNN: "0"},
                       "threads": own_threads})
    if FLAGS.compare:
        for peer in PEERS:
            if peer["key"] in FLAGS.peers:
                result += peer_contestants(peer, own_threads)
    return result


def peer_contestants(peer, own_threads) -> list:
    """The peer's two contestants. Left out ("dropped"), with the reason printed: all when its
    run.py does not exist, the second when it would run just as the first (t2t_lite's threads
    are the toolkit's own choice too, and nothing else differs)."""
    missing = None if os.path.exists(peer["run"]) else f"{peer['run']} does not exist"
    entries = []
    for variant in peer["variants"]:
        threads = OWN_THREADS if variant["threads"] == "own" else list(own_threads)
        entry = {"name": f"{peer['name']} {variant['label']}", "kind": "peer",
                 "peer": peer["key"], "environment": variant["environment"], "threads": threads}
        same = next((e for e in entries if e["threads"] == threads
                     and e["environment"] == variant["environment"]), None)
        if missing or same:
            entry["dropped"] = missing or (f"would run as {same['name']} (t2t_lite's threads "
                                           f"{threads[0]}/{threads[1]} are its own choice too)")
            print(f"{entry['name']} left out: {entry['dropped']}")
        entries.append(entry)
    return entries


def thread_flags(threads) -> list:
    return [f"--intra_op_parallelism_threads={threads[0]}",
            f"--inter_op_parallelism_threads={threads[1]}"]


def round_stem(entry, round_index) -> str:
    """work_dir/round<R>_<contestant>: the start of the round's file names."""
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    return os.path.join(FLAGS.work_dir, f"round{round_index + 1}_" + "".join(
        c if c.isalnum() else "_" for c in entry["name"]))


def log_tail(path, lines=30) -> str:
    with open(path, encoding="utf-8", errors="replace") as log:
        return "".join(log.readlines()[-lines:])


# --- One round of t2t_lite-trainer ---------------------------------------------------------------

def mode_hparams(mode, extra: str = None) -> str:
    """--hparams of the trainer in `mode`: this run's overrides with the mode's bucketing (and
    the contestant's own, e.g. mixed_precision=bfloat16)."""
    return ",".join(filter(None, [FLAGS.hparams, f"length_bucketing={MODES[mode][1]}", extra]))


def run_trainer(entry, round_index, updates, parameters) -> dict:
    """One round of t2t_lite-trainer in the entry's mode, environment and threads, its output
    (stdout and stderr) in round<R>_<contestant>.log. Rates over its log windows
    (training_run.trainer_windows, with `updates`: the tokens of the batches it trains on)."""
    stem = round_stem(entry, round_index)
    output_dir = os.path.join(FLAGS.work_dir, "t2t_lite_model")
    shutil.rmtree(output_dir, ignore_errors=True)  # a fresh model every round
    train_steps = FLAGS.warmup_steps + FLAGS.steps
    xla = MODES[entry["mode"]][0]
    command = [sys.executable, "-m", "t2t_lite.bin.trainer", f"--problem={PROBLEM}",
               "--model=transformer", f"--hparams_set={FLAGS.hparams_set}",
               f"--hparams={mode_hparams(entry['mode'], entry.get('hparams'))}",
               f"--data_dir={FLAGS.data_dir}",
               f"--output_dir={output_dir}", f"--train_steps={train_steps}",
               f"--log_every_steps={FLAGS.window}", f"--eval_every={train_steps}",
               "--eval_steps=0", "--eval_bleu_sentences=0",
               f"--save_checkpoints_steps={train_steps}", "--keep_checkpoint_max=1",
               "--jit_compile" if xla else "--nojit_compile",
               f"--seed={training_run.TRAINER_SEED}", *thread_flags(entry["threads"])]
    # TensorFlow's start-up lines kept, among them whether it loaded oneDNN.
    environment = reporting.child_environment(
        {**entry["environment"], "TF_CPP_MIN_LOG_LEVEL": "0", "T2T_LITE_VERBOSE_STARTUP": "1"})
    launched = time.time()
    with open(stem + ".log", "w", encoding="utf-8") as log:
        status = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                                env=environment).returncode
    wall_seconds = time.time() - launched
    if status:
        print(log_tail(stem + ".log"))
        raise reporting.ChildFailed(f"t2t_lite-trainer failed (exit status {status}); its "
                                    f"output: {stem}.log", status)
    with open(stem + ".log", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    log = training_run.parse_trainer_log(text, time.localtime(launched).tm_year)
    if log["parameters"] != parameters["total"]:
        raise ValueError(f"t2t_lite-trainer built {log['parameters']} parameters, this script "
                         f"{parameters['total']}: not the same model ({stem}.log)")
    windows = training_run.trainer_windows(log, updates)

    def compiles(window):  # XLA compiles every new batch shape
        return xla and window["new_shapes"] > 0

    def updates_in(window):
        return window["step"] - window["first_step"] + 1

    kept = training_run.kept_windows(windows, FLAGS.warmup_steps, compiles)
    off = [w for w in kept if abs(w["count_check"]) > COUNT_TOLERANCE]
    if off:
        w = off[0]
        raise ValueError(
            f"t2t_lite-trainer logged {w['logged_target_tokens_per_s']:.0f} target tokens/s for "
            f"updates {w['first_step']}-{w['step']}, where the batches counted here give "
            f"{w['target_tokens_per_s']:.0f}: they are not the batches it trained on ({stem}.log)")
    result = training_run.throughput(windows, FLAGS.warmup_steps, compiles)
    typical = statistics.median(w["seconds"] / updates_in(w) for w in kept) if kept else None
    real = sum(w["source_tokens"] + w["target_tokens"] for w in kept)
    positions = sum(w["positions"] for w in kept)
    result.update({
        "window_target_tokens_per_s": [w["target_tokens_per_s"] for w in kept],
        "padding_fraction": 1 - real / positions if positions else None,
        "step_median_s": typical,
        "startup_seconds": log["start"] - launched,  # to the trainer's "training ..." line
        "warmup_seconds": sum(w["seconds"] for w in windows
                              if w["first_step"] <= FLAGS.warmup_steps),
        "compile_seconds": sum(max(0.0, w["seconds"] - updates_in(w) * typical)
                               for w in windows if compiles(w)) if typical else 0.0,
        "distinct_shapes": len({tuple(shape) for u in updates for shape in u["shapes"]}),
        "new_shapes_in_timed_windows": sum(w["new_shapes"] for w in windows
                                           if w["first_step"] > FLAGS.warmup_steps),
        "count_check_max": max((abs(w["count_check"]) for w in kept), default=None),
        "wall_seconds": wall_seconds, "log_windows": windows,
        "onednn": ONEDNN_ON_LINE in text, "toolkit": toolkit_name()})
    return result


def toolkit_name() -> str:
    import tensorflow as tf
    return f"t2t_lite {t2t_lite.__version__} / TF {tf.__version__}"


# --- One round of a peer -------------------------------------------------------------------------

def run_peer(entry, hparams, round_index) -> dict:
    """One round of the entry's peer (its run.py; see peers/opennmt_tf/README.md); its output
    is kept in work_dir as round<R>_<contestant>.log, and its training log, when it has one,
    as .train.log."""
    peer = next(p for p in PEERS if p["key"] == entry["peer"])
    stem = round_stem(entry, round_index)
    work_dir = os.path.join(FLAGS.work_dir, peer["key"])
    json_path = stem + ".json"
    train_steps = FLAGS.warmup_steps + FLAGS.steps
    extra = {"tmp_dir": FLAGS.tmp_dir, "warmup_steps": hparams.learning_rate_warmup_steps,
             "learning_rate_constant": hparams.learning_rate_constant, "save_every": train_steps}
    command = [sys.executable, peer["run"], f"--data_dir={FLAGS.data_dir}",
               f"--work_dir={work_dir}", f"--train_steps={train_steps}",
               f"--log_every={FLAGS.window}", f"--skip_steps={FLAGS.warmup_steps}",
               *thread_flags(entry["threads"]), f"--output_json={json_path}",
               *(f"--{name}={extra[name]}" for name in peer["extra_flags"])]
    if os.path.exists(json_path):
        os.remove(json_path)
    environment = reporting.child_environment(entry["environment"])
    with open(stem + ".log", "w", encoding="utf-8") as log:
        status = subprocess.run(command, stdout=log, stderr=log, env=environment).returncode
    if status:
        if status != PEER_UNAVAILABLE:
            print(log_tail(stem + ".log"))
        raise reporting.ChildFailed(f"{peer['name']}'s run.py failed (exit status {status}); "
                                    f"its output: {stem}.log", status)
    with open(json_path, encoding="utf-8") as handle:
        result = json.load(handle)
    result.setdefault("onednn", None)
    if peer["train_log"]:
        train_log = os.path.join(work_dir, peer["train_log"])
        shutil.copyfile(train_log, stem + ".train.log")
        with open(train_log, encoding="utf-8", errors="replace") as handle:
            result["onednn"] = ONEDNN_ON_LINE in handle.read()
    return result


# --- The rounds ----------------------------------------------------------------------------------

def run_rounds(entries, hparams, updates, parameters) -> list:
    """Runs every contestant once a round, in turn; fills each entry's "rounds" (a result, or
    None where it did not run) and returns the order in which they ran, with times.
    `updates`: {mode: the tokens of each update of its batches}."""
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
                    result = run_trainer(entry, round_index, updates[entry["mode"]], parameters)
                else:
                    result = run_peer(entry, hparams, round_index)
            except reporting.ChildFailed as error:
                if entry["kind"] == "t2t_lite":
                    raise
                result = None
                if error.status == PEER_UNAVAILABLE:  # none of the peer's contestants can run
                    reason = (f"its run.py cannot run here (exit status {PEER_UNAVAILABLE}: no "
                              f"Python for it; see {round_stem(entry, round_index)}.log)")
                    for other in entries:
                        if other.get("peer") == entry["peer"] and not other.get("dropped"):
                            other["dropped"] = reason
                else:
                    entry["dropped"] = reason = str(error)
                print(f"  left out of the remaining rounds: {reason}", flush=True)
            seconds = time.time() - start
            order.append({"round": round_index + 1, "contestant": entry["name"],
                          "start": start, "seconds": seconds, "load_average_before": load})
            entry["rounds"].append(result)
            if result:
                rate = result.get("target_tokens_per_s")
                onednn = {True: "on", False: "off", None: "-"}[result["onednn"]]
                print(f"  {'-' if rate is None else f'{rate:.0f}'} target tok/s, oneDNN "
                      f"{onednn}, {seconds:.0f} s", flush=True)
    return order


# --- Summaries -----------------------------------------------------------------------------------

def per_round(entry, key="target_tokens_per_s") -> list:
    return [result.get(key) if result else None for result in entry["rounds"]]


def distinct(values) -> list:
    """`values` without repeats, in their order."""
    result = []
    for value in values:
        if value not in result:
            result.append(value)
    return result


def summarize(entry, parameters, peak_gflops):
    """The contestant's medians over rounds (and, for t2t_lite, its timings) and MFU."""
    rates = [rate for rate in per_round(entry) if rate is not None]
    if not rates:
        return None
    median = statistics.median
    ran = [result for result in entry["rounds"] if result]
    timed = [r for r in ran if r.get("target_tokens_per_s") is not None]

    def median_of(key):  # over the rounds that have it
        values = [r[key] for r in timed if r.get(key) is not None]
        return median(values) if values else None

    summary = {"target_tokens_per_s": median(rates), "min": min(rates), "max": max(rates),
               "per_round": per_round(entry), "rounds": len(rates),
               "source_tokens_per_s": median_of("source_tokens_per_s"),
               "steps_per_s": median_of("steps_per_s"),
               "target_tokens_per_step": median_of("target_tokens_per_step"),
               "onednn": distinct(result["onednn"] for result in ran),
               "toolkit": ran[0].get("toolkit")}
    if entry["kind"] == "t2t_lite":
        summary.update({
            "best_window": max(max(r["window_target_tokens_per_s"]) for r in timed),
            "padding_fraction": median(r["padding_fraction"] for r in timed),
            "startup_seconds": median(r["startup_seconds"] for r in ran),
            "warmup_seconds": median(r["warmup_seconds"] for r in ran),
            "compile_seconds": median(r["compile_seconds"] for r in ran),
            "distinct_shapes": max(r["distinct_shapes"] for r in ran)})
    summary["model_flops_per_s"] = summary["mfu"] = None
    if summary["source_tokens_per_s"] is not None:
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
    """Per pair: the ratio of target tokens/s within each round, their median, min and max
    (pairs with a contestant that never ran left out)."""
    result = []
    for a, b in ratio_pairs(entries):
        if not (any(a["rounds"]) and any(b["rounds"])):
            continue
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


ONEDNN_TEXT = {True: "on", False: "off", None: "-"}


def print_tables(result):
    m = result["machine"]
    name_width = max([34] + [len(entry["name"]) + 2 for entry in result["contestants"]])
    print(f"\n{FLAGS.hparams_set} ({FLAGS.hparams or 'no overrides'}) on {PROBLEM}; {m['cpu']}, "
          f"{m['cores']} cores, TF {m['tensorflow']}; {FLAGS.rounds} rounds of "
          f"{FLAGS.warmup_steps} warm-up + {FLAGS.steps} timed steps a contestant, in turn; "
          f"threads intra/inter-op (0: the toolkit's own choice)")
    header = (f"{'contestant':<{name_width}}{'oneDNN':>7}{'threads':>8}{'target tok/s':>13}"
              f"{'min':>6}{'max':>6}{'source tok/s':>13}{'steps/s':>8}{'tgt/step':>9}{'MFU':>7}"
              f"  per round")
    print(header + "\n" + "-" * (len(header) + 10))
    for entry in result["contestants"]:
        s = entry["summary"]
        if s is None:
            print(f"{entry['name']:<{name_width}}  no rate: "
                  f"{entry.get('dropped') or 'no log window after the warm-up steps'}")
            continue
        onednn = "/".join(ONEDNN_TEXT[on] for on in s["onednn"])
        print(f"{entry['name']:<{name_width}}{onednn:>7}"
              f"{'/'.join(map(str, entry['threads'])):>8}"
              f"{s['target_tokens_per_s']:>13.0f}{s['min']:>6.0f}{s['max']:>6.0f}"
              f"{fmt(s['source_tokens_per_s'], '.0f'):>13}{fmt(s['steps_per_s'], '.3f'):>8}"
              f"{fmt(s['target_tokens_per_step'], '.0f'):>9}"
              f"{fmt(s['mfu'] and 100 * s['mfu'], '.1f'):>6}%  "
              + " ".join(fmt(r, ".0f") for r in s["per_round"]))
    toolkits = distinct(e["summary"]["toolkit"] for e in result["contestants"] if e["summary"])
    print(f"target tok/s: median over rounds (min, max, each round) of the medians of the "
          f"toolkit's own log windows of {FLAGS.window} updates after its first "
          f"{FLAGS.warmup_steps}, each timed between two progress lines of its training "
          f"program (t2t_lite: t2t_lite-trainer); real tokens, end of sentence included; "
          f"tgt/step: target tokens per update; oneDNN: as TensorFlow reported in the "
          f"contestant's log (-: not TensorFlow); " + ", ".join(filter(None, toolkits)))
    p = result["parameters"]
    print(f"MFU = 6 * ({p['source_side']:,} * source tok/s + ({p['target_side']:,} + "
          f"{p['softmax_d_times_v']:,}) * target tok/s) / {result['matmul']['best']['gflops']:.0f}"
          f" GFLOP/s (encoder; decoder + softmax; attention scores and embedding lookups not "
          f"counted)")

    ours = [e for e in result["contestants"] if e["kind"] == "t2t_lite" and e["summary"]]
    name_width = max([34] + [len(entry["name"]) + 2 for entry in ours])
    header = (f"\n{'t2t_lite':<{name_width}}{'best':>6}{'padding':>8}{'start s':>8}"
              f"{'warm-up s':>10}{'compile s':>10}{'shapes':>7}")
    print(header + "\n" + "-" * (len(header) - 1))
    for entry in ours:
        s = entry["summary"]
        print(f"{entry['name']:<{name_width}}{s['best_window']:>6.0f}"
              f"{100 * s['padding_fraction']:>7.1f}%{s['startup_seconds']:>8.1f}"
              f"{s['warmup_seconds']:>10.1f}{s['compile_seconds']:>10.1f}"
              f"{s['distinct_shapes']:>7d}")
    print("best: the fastest window of any round; padding: of the timed windows' positions; "
          "start s: from launching t2t_lite-trainer to its training loop; warm-up s: the "
          "windows left out at the start; compile s: XLA's new shapes; all medians over "
          "rounds; shapes: distinct padded batch shapes (rows, source, target length)")

    if result["ratios"]:
        width = max([30] + [len(r["numerator"] + r["denominator"]) + 4 for r in result["ratios"]])
        header = (f"\n{'target tok/s ratio, same round':<{width}}{'median':>7}{'min':>6}"
                  f"{'max':>6}  per round")
        print(header + "\n" + "-" * (len(header) + 8))
        for r in result["ratios"]:
            print(f"{r['numerator'] + ' / ' + r['denominator']:<{width}}"
                  f"{fmt(r['median'], '.2f'):>7}"
                  f"{fmt(r['min'], '.2f'):>6}{fmt(r['max'], '.2f'):>6}  "
                  + " ".join(fmt(value, ".2f") for value in r["per_round"]))


# --- The run -------------------------------------------------------------------------------------

def mode_batches(problem, hparams, mode) -> tuple:
    """(hparams, the batches) t2t_lite-trainer trains on in `mode`, its warm-up and timed
    updates', in its order."""
    hparams = hparams.replace(length_bucketing=MODES[mode][1])
    per_update = max(1, hparams.optimizer_multistep_accumulate_steps)
    count = (FLAGS.warmup_steps + FLAGS.steps) * per_update
    return hparams, list(training_run.trainer_batches(problem, hparams).take(count))


def measure_matmuls(shapes, dense_flops) -> dict:
    """reporting.matmul_backends on `shapes`, and each backend's rate over the step's dense
    layers (FLOP-weighted)."""
    measured = reporting.matmul_backends(shapes, runs=FLAGS.matmul_runs)
    measured["step_weighted"] = {
        backend: reporting.flop_weighted_gflops(rates, dense_flops)
        for backend, rates in measured["rates"].items()}
    return measured


def main(unused_argv):
    problem = registry.problem(PROBLEM)
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)  # keeps the splits already complete
    hparams, vocab_size = common.hparams_from_flags(), problem.vocab_size(FLAGS.data_dir)
    entries = contestants()
    result = {"problem": PROBLEM, "hparams_set": FLAGS.hparams_set, "hparams": FLAGS.hparams,
              "steps": FLAGS.steps, "warmup_steps": FLAGS.warmup_steps, "window": FLAGS.window,
              "rounds": FLAGS.rounds, "matmul_runs": FLAGS.matmul_runs,
              "threads": {"intra_op": FLAGS.intra_op_parallelism_threads,
                          "inter_op": FLAGS.inter_op_parallelism_threads},
              "machine": {**reporting.machine(), "load_average_at_start": os.getloadavg()},
              "cpu_kernels": kernel_choice.applied() and kernel_choice.applied().line()}
    print(result["cpu_kernels"] or "CPU kernels: TensorFlow's defaults", flush=True)

    # What the trainer's lines leave out, from the same model and batches: the parameter
    # counts (MFU), and each update's tokens and shapes in every mode.
    parameters = result["parameters"] = training_run.parameter_counts(
        training_run.training_steps(hparams, vocab_size, jit_compile=False).model, hparams,
        vocab_size)
    updates, first = {}, None
    for mode in distinct(e["mode"] for e in entries if e["kind"] == "t2t_lite"):
        batch_hparams, batches = mode_batches(problem, hparams, mode)
        per_update = len(batches) // (FLAGS.warmup_steps + FLAGS.steps)
        updates[mode] = training_run.update_tokens(batches, len(batches) // per_update,
                                                   per_update)
        if first is None:  # the first timed batch of the first mode: its matmul shapes
            first = (batch_hparams, batches[FLAGS.warmup_steps * per_update])
    result["t2t_lite_updates"] = updates
    dense = training_run.dense_shapes(first[1], first[0], vocab_size)
    dense_flops = {reporting.shape_key(s): f for s, f in training_run.shape_flops(dense).items()}
    shapes = reporting.square_and(dense)
    print(f"float32 matmul rates before the rounds ({len(shapes)} shapes, "
          f"{len(reporting.MATMUL_BACKENDS)} backends)", flush=True)
    matmul = {"before": measure_matmuls(shapes, dense_flops),
              "dense_shapes": {reporting.shape_key(s): n for s, n in dense.items()}}

    result["order"] = run_rounds(entries, hparams, updates, parameters)

    print("float32 matmul rates after the rounds", flush=True)
    matmul["after"] = measure_matmuls(shapes, dense_flops)
    matmul["best"] = reporting.best_rate({when: matmul[when] for when in ("before", "after")})
    gflops = matmul["best"]["gflops"]
    result["matmul"] = matmul
    result["machine"]["load_average_at_end"] = os.getloadavg()  # 1, 5, 15 min

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
