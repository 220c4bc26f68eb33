"""The whole Multi30k example, timed, and with --compare a quality race against OpenNMT-tf.

  python benchmarks/multi30k_recipe.py --work_dir=W [--data_dir=D] [--train_minutes=30]
      [--t2t_lite_schedule=WARMUP,PEAK] [--compare [--peer_schedule=WARMUP,PEAK]]
      [--sweep --sweep_warmups=400,1000 --sweep_peaks=5e-4,1e-3,2e-3 --sweep_minutes=3]
      [--bleu_every_minutes=3] [--output_json=F]

1. `translate_multi30k_deen` into --data_dir (default W/data; generated from the raw files in
   --tmp_dir, splits already there are kept).
2. With --sweep, a learning-rate sweep for each toolkit (see below) chooses its schedule.
3. `transformer_small` (the comparison configuration) trained from scratch into W/t2t_lite for
   --train_minutes of training (or --train_steps updates, whichever comes first), a checkpoint
   every --save_every updates, and the model's weights every --bleu_every_minutes of training
   for the dev BLEU curve (learning_curves.py). The trainer evaluates nothing while it trains:
   no dev loss (eval_steps 0) and no dev BLEU (its DevBleu callback is not used).
4. The last --average_last checkpoints averaged (paper §6.1); test_2016_flickr decoded with
   beam 4, alpha 0.6 (paper §6.1) and scored with sacreBLEU.
5. The dev BLEU curve: each of the timed checkpoints translates the first --bleu_sentences dev
   sentences greedily, scored by sacreBLEU.
6. With --compare, then (never at the same time) the OpenNMT-tf peer (benchmarks/peers/
   opennmt_tf/run.py) does 3-5 on the same data, configuration and time budget with its own
   schedule, and the script prints both rows, both curves, each toolkit's final dev BLEU and
   test BLEU, and after how many minutes of training t2t_lite reached the peer's final dev
   BLEU (read off its curve, linearly interpolated between points). The curves are drawn into
   a PNG beside the JSON (default W/recipe.json and W/recipe.png).

The schedule of both toolkits is constant * min(1, s/warmup) * rsqrt(max(s, warmup)) *
rsqrt(hidden_size) (t2t's; OpenNMT-tf's NoamDecay is the same function, checked in run.py), and
is given as (warmup, peak learning rate): constant = peak * sqrt(warmup) * sqrt(256). One
schedule does not suit both toolkits: under short warmups OpenNMT-tf's model stays near a loss
of 5 for hundreds of updates, which says more about the schedule than the toolkit. So a race
gives each toolkit its own schedule, chosen by the same rule:

- --sweep: each toolkit trains each (warmup, peak) of --sweep_warmups x --sweep_peaks for
  --sweep_minutes from scratch (one run after the other), then its dev loss over the whole dev
  split is measured by its own evaluation, and the (warmup, peak) with the lowest dev loss is
  chosen. The two toolkits define the loss differently (t2t_lite: label-smoothed cross entropy
  minus its floor; OpenNMT-tf: cross entropy without label smoothing), which does not matter:
  the choice is made within one toolkit. The table says which is which. A toolkit whose
  schedule is given explicitly (--t2t_lite_schedule, --peer_schedule) is not swept, so the
  race can be rerun alone with the chosen schedules.
  A sweep run is short: at about 15 updates a minute on 2 CPU cores, 3 minutes are about 45
  updates, all within any warmup of 400 or more, so a short sweep prefers the schedules that
  rise fastest. A sweep of --sweep_minutes close to --train_minutes chooses for the race
  itself, at 12 times its cost.
- Without --sweep: --t2t_lite_schedule (400,1.5625e-3, i.e. constant 0.5: a 30-minute CPU run
  makes a few hundred updates and would end still warming up under the paper's 4000), and
  --peer_schedule (default: the same as t2t_lite's).

Other defaults:
- averaging the last 3 checkpoints, 100 updates apart: the paper averaged the last 5 of
  checkpoints 10 minutes apart; at a few hundred updates, older checkpoints are much worse;
- XLA only where a GPU is visible: on a CPU it compiles each of Multi30k's ~18 bucket shapes
  (10-15 s each) and then runs no faster (benchmarks/README.md, train_speed); the peer trains
  without XLA too;
- thread pools: TensorFlow's choice unless --intra_op/--inter_op_parallelism_threads are given;
  both toolkits get the same values. The peer's processes inherit this one's environment, so
  both train with the same kernel choice (TF_ENABLE_ONEDNN_OPTS, recorded in the JSON).
"""
import itertools
import json
import os
import shutil
import subprocess
import sys
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import learning_curves  # noqa: E402  (benchmarks/, beside this script)
import reporting  # noqa: E402

import keras  # noqa: E402  (after common: its quiet start)
import tensorflow as tf  # noqa: E402
from absl import logging  # noqa: E402

from t2t_lite.decoding import decoder  # noqa: E402
from t2t_lite.decoding.search import SearchHParams  # noqa: E402
from t2t_lite.training import averaging, schedules, trainer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TMP_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))
PEER = os.path.join(REPO, "benchmarks", "peers", "opennmt_tf", "run.py")
PEER_UNAVAILABLE = 3  # run.py's exit status when no Python for OpenNMT-tf's TensorFlow exists
PROBLEM = "translate_multi30k_deen"
HPARAMS_SET = "transformer_small"
T2T_LITE, PEER_NAME = "t2t_lite", "OpenNMT-tf"
DEV_LOSS_DEFINITIONS = {
    T2T_LITE: "label-smoothed cross entropy minus its floor per target token (the trainer's "
              "dev loss)",
    PEER_NAME: "cross entropy per target token, no label smoothing (OpenNMT-tf's evaluator)",
}

flags.DEFINE_string("work_dir", None, "Folder of the models and outputs (and of the data "
                    "unless --data_dir).")
flags.DEFINE_string("data_dir", None, "Generated translate_multi30k_deen (default W/data; "
                    "generated there if missing).")
flags.DEFINE_string("tmp_dir", DEFAULT_TMP_DIR, "Folder of the raw Multi30k files.")
flags.DEFINE_integer("train_steps", 100_000, "Stop training after this many updates.")
flags.DEFINE_float("train_minutes", 30, "Stop training after this many minutes (0: no limit).")
flags.DEFINE_string("t2t_lite_schedule", "400,1.5625e-3", "t2t_lite's WARMUP,PEAK learning "
                    "rate (not swept when given).")
flags.DEFINE_string("peer_schedule", None, "OpenNMT-tf's WARMUP,PEAK (default: "
                    "--t2t_lite_schedule; not swept when given).")
flags.DEFINE_boolean("sweep", False, "Choose each toolkit's schedule by a sweep (above).")
flags.DEFINE_list("sweep_warmups", ["400", "1000"], "Warmups of the sweep.")
flags.DEFINE_list("sweep_peaks", ["5e-4", "1e-3", "2e-3"], "Peak learning rates of the sweep.")
flags.DEFINE_float("sweep_minutes", 3, "Minutes of training of each sweep run.")
flags.DEFINE_string("hparams", "", "Other overrides of transformer_small (not with --compare: "
                    "the peer takes only the schedule).")
flags.DEFINE_integer("save_every", 100, "Updates between checkpoints.")
flags.DEFINE_integer("average_last", 3, "Checkpoints averaged before decoding.")
flags.DEFINE_float("bleu_every_minutes", 3, "Minutes of training between the checkpoints of "
                   "the dev BLEU curve (0: no curve).")
flags.DEFINE_integer("bleu_sentences", 100, "Dev sentences of the dev BLEU curve.")
flags.DEFINE_boolean("jit_compile", None, "Train with XLA (default: only where a GPU is "
                     "visible; see above).")
flags.DEFINE_integer("test_sentences", 0, "Decode only the first this many test sentences (0: "
                     "all 1,000; fewer only for a quick check, not for a result).")
flags.DEFINE_boolean("compare", False, "Also run the OpenNMT-tf peer with the same budget.")
flags.DEFINE_string("output_json", None, "The results (default W/recipe.json); the picture of "
                    "the curves goes beside it (.png).")
common.define_thread_flags()
flags.mark_flags_as_required(["work_dir"])


class PeerUnavailable(Exception):
    """The peer cannot run on this machine (run.py said why)."""


def use_xla() -> bool:
    if FLAGS.jit_compile is not None:
        return FLAGS.jit_compile
    return trainer.xla_pays(tf.distribute.get_strategy())


def data_dir() -> str:
    return FLAGS.data_dir or os.path.join(FLAGS.work_dir, "data")


def base_hparams():
    hparams = registry.hparams(HPARAMS_SET)
    return hparams.override_from_string(FLAGS.hparams) if FLAGS.hparams else hparams


def with_schedule(hparams, warmup: int, peak: float):
    """`hparams` with the warmup and the constant whose highest rate is `peak` (checked
    against t2t_lite's own schedule)."""
    constant = learning_curves.learning_rate_constant(warmup, peak, hparams.hidden_size)
    hparams = hparams.replace(learning_rate_warmup_steps=warmup, learning_rate_constant=constant)
    highest = float(schedules.learning_rate(warmup, hparams))
    if abs(highest - peak) > 1e-6 * peak:
        raise ValueError(f"learning_rate_schedule {'*'.join(hparams.learning_rate_schedule)} "
                         f"peaks at {highest:.3g}, not {peak:g}: it is not t2t's warmup / rsqrt "
                         "decay schedule")
    return hparams


# --- t2t_lite ------------------------------------------------------------------------------------

def train_t2t_lite(hparams, output_dir: str, minutes: float, save_every: int, keep: int,
                   curve_every_minutes: float = 0) -> dict:
    """Trains from scratch (output_dir is emptied first) with no evaluation during training."""
    shutil.rmtree(output_dir, ignore_errors=True)
    curve_dir = os.path.join(output_dir, "curve") if curve_every_minutes else None
    timer = learning_curves.TimedCheckpoints(minutes, curve_every_minutes, curve_dir)
    start = time.time()
    trainer.train(PROBLEM, "transformer", hparams, data_dir(), output_dir,
                  trainer.RunConfig(train_steps=FLAGS.train_steps, eval_every=FLAGS.train_steps,
                                    eval_steps=0, save_checkpoints_steps=save_every,
                                    keep_checkpoint_max=keep, log_every_steps=25,
                                    jit_compile=use_xla()),
                  callbacks=[timer])
    latest = tf.train.latest_checkpoint(output_dir)
    return {"train_seconds": time.time() - start,
            "train_loop_seconds": timer.last_update - timer.start,
            "steps": int(latest.rsplit("-", 1)[1]), "latest": latest, "curve": timer.points}


def t2t_lite_sweep_run(problem, warmup: int, peak: float) -> dict:
    hparams = with_schedule(base_hparams(), warmup, peak)
    output_dir = os.path.join(FLAGS.work_dir, "sweep", "t2t_lite", schedule_name(warmup, peak))
    row = {"toolkit": T2T_LITE, "warmup": warmup, "peak": peak}
    try:
        trained = train_t2t_lite(hparams, output_dir, FLAGS.sweep_minutes,
                                 save_every=FLAGS.train_steps, keep=1)
    except FloatingPointError as error:  # the trainer's NonFiniteLossError
        print(f"t2t_lite {schedule_name(warmup, peak)}: {error}")
        return {**row, "steps": None, "dev_loss": None, "failed": "loss not finite"}
    row.update(steps=trained["steps"], train_loop_seconds=trained["train_loop_seconds"])
    row["dev_loss"] = learning_curves.t2t_lite_dev_loss(problem, hparams, data_dir(),
                                                        trained["latest"])
    return row


def run_t2t_lite(problem, hparams, sources, references) -> dict:
    output_dir = os.path.join(FLAGS.work_dir, "t2t_lite")
    trained = train_t2t_lite(hparams, output_dir, FLAGS.train_minutes, FLAGS.save_every,
                             max(FLAGS.average_last, 5), FLAGS.bleu_every_minutes)
    times = {"train_seconds": trained["train_seconds"],
             "train_loop_seconds": trained["train_loop_seconds"]}

    start = time.time()
    averaged = os.path.join(output_dir, "averaged", "model.ckpt")
    available = len(tf.train.get_checkpoint_state(output_dir).all_model_checkpoint_paths)
    averaging.average_checkpoints(output_dir, min(FLAGS.average_last, available), averaged)
    times["average_seconds"] = time.time() - start

    start = time.time()
    paths = problem.text_paths(data_dir(), "test")
    test_sources, test_references = (
        decoder.read_sentences(paths[name])[:FLAGS.test_sentences or None]
        for name in ("inputs", "targets"))
    model = decoder.load_model("transformer", hparams, problem.vocab_size(data_dir()),
                               output_dir, averaged)
    translator = decoder.Translator(model, problem.feature_encoders(data_dir()),
                                    SearchHParams(beam_size=4, alpha=0.6),
                                    problem.max_length)
    hypotheses = translator.translate(test_sources)
    decoder.write_lines(os.path.join(output_dir, "test_2016_flickr.beam4.en"), hypotheses)
    times["decode_seconds"] = time.time() - start
    scores = decoder.score(hypotheses, test_references)

    start = time.time()
    curve = learning_curves.t2t_lite_curve(trained["curve"], problem, hparams, data_dir(),
                                           sources, references)
    times["dev_bleu_seconds"] = time.time() - start
    return {"toolkit": f"t2t_lite (TF {tf.__version__}, Keras {keras.__version__})",
            "warmup_steps": hparams.learning_rate_warmup_steps,
            "learning_rate_constant": hparams.learning_rate_constant,
            "steps": trained["steps"], "bleu": scores["bleu"],
            "bleu_signature": scores["bleu_signature"],
            "averaged_checkpoints": min(FLAGS.average_last, available), "xla": use_xla(),
            "dev_bleu_curve": curve, **times}


# --- The peer ------------------------------------------------------------------------------------

def run_peer(work_dir: str, warmup: int, peak: float, minutes: float, extra: list) -> dict:
    """run.py's JSON; None if the run failed (its output says why); PeerUnavailable if the
    peer cannot run here at all."""
    json_path = work_dir + ".json"
    if os.path.exists(json_path):
        os.remove(json_path)
    constant = learning_curves.learning_rate_constant(warmup, peak,
                                                      registry.hparams(HPARAMS_SET).hidden_size)
    command = [sys.executable, PEER, f"--data_dir={data_dir()}", f"--tmp_dir={FLAGS.tmp_dir}",
               f"--work_dir={work_dir}", f"--train_steps={FLAGS.train_steps}",
               f"--train_minutes={minutes}", f"--warmup_steps={warmup}",
               f"--learning_rate_constant={constant!r}",
               f"--intra_op_parallelism_threads={FLAGS.intra_op_parallelism_threads}",
               f"--inter_op_parallelism_threads={FLAGS.inter_op_parallelism_threads}",
               f"--output_json={json_path}", *extra]
    status = subprocess.run(command).returncode
    if status == PEER_UNAVAILABLE:
        raise PeerUnavailable(f"OpenNMT-tf peer did not run (exit status {status}); see above")
    if status:
        print(f"OpenNMT-tf peer run failed (exit status {status}); see above")
        return None
    with open(json_path, encoding="utf-8") as handle:
        return json.load(handle)


def peer_sweep_run(warmup: int, peak: float) -> dict:
    work_dir = os.path.join(FLAGS.work_dir, "sweep", "opennmt_tf", schedule_name(warmup, peak))
    row = {"toolkit": PEER_NAME, "warmup": warmup, "peak": peak}
    result = run_peer(work_dir, warmup, peak, FLAGS.sweep_minutes,
                      [f"--save_every={FLAGS.train_steps}", "--average_last=1", "--dev_loss"])
    if result is None:
        return {**row, "steps": None, "dev_loss": None, "failed": "run failed"}
    return {**row, "steps": result["steps"], "train_loop_seconds": result["train_loop_seconds"],
            "dev_loss": result["dev_loss"]}


def run_peer_race(warmup: int, peak: float, dev_files: dict) -> dict:
    extra = [f"--save_every={FLAGS.save_every}", f"--average_last={FLAGS.average_last}",
             f"--test_sentences={FLAGS.test_sentences}", "--decode",
             f"--curve_every_minutes={FLAGS.bleu_every_minutes}",
             f"--dev_bleu_source={dev_files['source']}",
             f"--dev_bleu_reference={dev_files['reference']}"]
    return run_peer(os.path.join(FLAGS.work_dir, "opennmt_tf"), warmup, peak,
                    FLAGS.train_minutes, extra)


# --- The sweep -----------------------------------------------------------------------------------

def schedule_name(warmup: int, peak: float) -> str:
    return learning_curves.schedule_name(warmup, peak)


def sweep(problem, toolkits: list) -> dict:
    """Trains every (warmup, peak) of each toolkit in `toolkits`; returns the rows (with
    `chosen`), the chosen schedules and the wall time. The peer's runs are skipped if it
    cannot run here (`peer_unavailable`)."""
    grid = list(itertools.product([int(w) for w in FLAGS.sweep_warmups],
                                  [float(p) for p in FLAGS.sweep_peaks]))
    start, rows, chosen, unavailable = time.time(), [], {}, None
    for toolkit in toolkits:
        toolkit_rows = []
        for warmup, peak in grid:
            print(f"\nsweep: {toolkit} warmup {warmup}, peak {peak:g}, "
                  f"{FLAGS.sweep_minutes:g} min", flush=True)
            if toolkit == T2T_LITE:
                toolkit_rows.append(t2t_lite_sweep_run(problem, warmup, peak))
                continue
            try:
                toolkit_rows.append(peer_sweep_run(warmup, peak))
            except PeerUnavailable as reason:
                unavailable = str(reason)
                print(unavailable)
                break
        measured = [row for row in toolkit_rows if row["dev_loss"] is not None]
        if measured:
            best = min(measured, key=lambda row: row["dev_loss"])
            best["chosen"] = True
            chosen[toolkit] = (best["warmup"], best["peak"])
        rows += toolkit_rows
    return {"rows": rows, "chosen": chosen, "seconds": time.time() - start,
            "minutes_each": FLAGS.sweep_minutes, "peer_unavailable": unavailable,
            "dev_loss_definitions": {toolkit: DEV_LOSS_DEFINITIONS[toolkit]
                                     for toolkit in toolkits}}


def print_sweep(result: dict):
    header = (f"{'toolkit':<12}{'warmup':>7}{'peak':>9}{'updates':>9}{'dev loss':>10}"
              f"{'chosen':>8}")
    print(f"\nlearning-rate sweep: {result['minutes_each']:g} min of training per run, from "
          f"scratch; dev loss over the whole dev split\n{header}\n{'-' * len(header)}")
    for row in result["rows"]:
        loss = f"{row['dev_loss']:.4f}" if row["dev_loss"] is not None else row["failed"]
        steps = "-" if row["steps"] is None else row["steps"]
        print(f"{row['toolkit']:<12}{row['warmup']:>7}{row['peak']:>9.1e}{steps:>9}"
              f"{loss:>10}{'*' if row.get('chosen') else '':>8}")
    for toolkit, definition in result["dev_loss_definitions"].items():
        print(f"dev loss of {toolkit}: {definition}")
    print(f"the sweep took {result['seconds'] / 60:.1f} min")


# --- Report --------------------------------------------------------------------------------------

def crossing(rows: list) -> dict:
    """When t2t_lite's curve reached the peer's final dev BLEU."""
    ours, peer = rows[0]["dev_bleu_curve"], rows[1]["dev_bleu_curve"]
    target, peer_minutes = peer[-1]["bleu"], peer[-1]["seconds"] / 60
    minutes = learning_curves.minutes_to_reach(ours, target)
    result = {"peer_final_dev_bleu": target, "peer_train_minutes": peer_minutes,
              "t2t_lite_minutes": minutes,
              "share_of_peer_time": None if minutes is None else minutes / peer_minutes,
              "at_first_point": minutes is not None and ours[0]["bleu"] >= target}
    if minutes is None:
        result["text"] = (f"t2t_lite did not reach OpenNMT-tf's final dev BLEU ({target:.2f}) "
                          f"in {ours[-1]['seconds'] / 60:.1f} minutes (its final: "
                          f"{ours[-1]['bleu']:.2f})")
    else:
        when = "by its first point, " if result["at_first_point"] else "after "
        result["text"] = (f"t2t_lite reached OpenNMT-tf's final dev BLEU ({target:.2f}) "
                          f"{when}{minutes:.1f} minutes ({result['share_of_peer_time']:.0%} of "
                          f"the peer's {peer_minutes:.1f} minutes of training)")
    return result


def print_report(rows: list):
    header = (f"{'toolkit':<36}{'warmup':>7}{'peak':>9}{'steps':>7}{'train min':>10}"
              f"{'dev BLEU':>9}{'test BLEU':>10}")
    print("\n" + header + "\n" + "-" * len(header))
    for row in rows:
        warmup, peak = row["schedule"]["warmup"], row["schedule"]["peak"]
        curve = row.get("dev_bleu_curve") or []
        dev = f"{curve[-1]['bleu']:.2f}" if curve else "-"
        loop = row.get("train_loop_seconds") or row["train_seconds"]
        print(f"{row['toolkit'][:35]:<36}{warmup:>7}{peak:>9.1e}{row['steps']:>7}"
              f"{loop / 60:>10.1f}{dev:>9}{row['bleu']:>10.2f}")
    count = FLAGS.test_sentences or 1000
    averaged = ", ".join(f"{row['toolkit'].split()[0]} {row['averaged_checkpoints']}"
                         for row in rows)
    print(f"train min: the training loop; test BLEU: the last --average_last checkpoints "
          f"averaged ({averaged}), beam 4, alpha 0.6, sacreBLEU on test_2016_flickr "
          f"({count:,} sentences), {rows[0]['bleu_signature']}")
    if any(row.get("dev_bleu_curve") for row in rows):
        print(f"dev BLEU: greedy, the first {FLAGS.bleu_sentences} dev sentences, the weights "
              f"after about every {FLAGS.bleu_every_minutes:g} min of training and at the end "
              "(each toolkit's own decoder, the same sacreBLEU call)")
        for row in rows:
            points = "  ".join(f"{p['seconds'] / 60:.1f} min {p['bleu']:.2f}"
                               for p in row.get("dev_bleu_curve") or [])
            print(f"  {row['toolkit'][:35]:<36}{points}")


def write_dev_pairs(sources: list, references: list) -> dict:
    files = {"source": os.path.join(FLAGS.work_dir, "dev_bleu.de"),
             "reference": os.path.join(FLAGS.work_dir, "dev_bleu.en")}
    decoder.write_lines(files["source"], sources)
    decoder.write_lines(files["reference"], references)
    return files


def main(unused_argv):
    common.set_threads_from_flags()
    if FLAGS.compare and FLAGS.hparams:
        raise ValueError("--hparams: the peer takes only the schedule, so --compare trains "
                         "transformer_small as registered")
    if "learning_rate" in FLAGS.hparams:
        raise ValueError("--hparams: give the schedule as --t2t_lite_schedule=WARMUP,PEAK")
    given = {T2T_LITE: FLAGS["t2t_lite_schedule"].present,
             PEER_NAME: FLAGS["peer_schedule"].present}
    schedule = {T2T_LITE: learning_curves.parse_schedule(FLAGS.t2t_lite_schedule)}
    schedule[PEER_NAME] = (learning_curves.parse_schedule(FLAGS.peer_schedule)
                           if FLAGS.peer_schedule else schedule[T2T_LITE])
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    output_json = FLAGS.output_json or os.path.join(FLAGS.work_dir, "recipe.json")
    problem = registry.problem(PROBLEM)
    start = time.time()
    problem.generate_data(data_dir(), FLAGS.tmp_dir)
    datagen_seconds = time.time() - start
    report = {"machine": reporting.machine(), "train_minutes": FLAGS.train_minutes,
              "train_steps": FLAGS.train_steps, "hparams_set": HPARAMS_SET,
              "hparams": FLAGS.hparams, "datagen_seconds": datagen_seconds,
              "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS")}

    toolkits = [T2T_LITE] + ([PEER_NAME] if FLAGS.compare else [])
    compare = FLAGS.compare
    if FLAGS.sweep:
        swept = [toolkit for toolkit in toolkits if not given[toolkit]]
        result = sweep(problem, swept) if swept else None
        if result:
            print_sweep(result)
            schedule.update(result["chosen"])
            report["sweep"] = result
            if result["peer_unavailable"]:
                compare = False
        for toolkit in toolkits if compare else [T2T_LITE]:
            if toolkit in swept and toolkit not in result["chosen"]:
                raise RuntimeError(f"no sweep run of {toolkit} ended with a dev loss")

    sources, references = learning_curves.first_dev_pairs(problem, data_dir(),
                                                          FLAGS.bleu_sentences)
    dev_files = write_dev_pairs(sources, references)
    print(f"\nrace: t2t_lite warmup {schedule[T2T_LITE][0]}, peak {schedule[T2T_LITE][1]:g}"
          + (f"; OpenNMT-tf warmup {schedule[PEER_NAME][0]}, peak {schedule[PEER_NAME][1]:g}"
             if compare else "") + f"; {FLAGS.train_minutes:g} min each", flush=True)
    hparams = with_schedule(base_hparams(), *schedule[T2T_LITE])
    start = time.time()
    rows = [run_t2t_lite(problem, hparams, sources, references)]
    rows[0]["total_seconds"] = time.time() - start
    if compare:
        try:
            peer = run_peer_race(*schedule[PEER_NAME], dev_files)
        except PeerUnavailable as reason:
            print(reason)
            peer = None
        if peer:
            rows.append(peer)
    for row, toolkit in zip(rows, (T2T_LITE, PEER_NAME)):
        row["schedule"] = dict(zip(("warmup", "peak"), schedule[toolkit]))
    report["rows"] = rows
    report["summary"] = {
        toolkit: {**row["schedule"], "steps": row["steps"],
                  "train_minutes": (row.get("train_loop_seconds") or row["train_seconds"]) / 60,
                  "final_dev_bleu": (row["dev_bleu_curve"][-1]["bleu"]
                                     if row.get("dev_bleu_curve") else None),
                  "test_bleu": row["bleu"]}
        for row, toolkit in zip(rows, (T2T_LITE, PEER_NAME))}

    print_report(rows)
    curves = {row["toolkit"]: row["dev_bleu_curve"] for row in rows
              if row.get("dev_bleu_curve")}
    if len(rows) == 2 and len(curves) == 2:
        report["crossing"] = crossing(rows)
        print(report["crossing"]["text"])
    if curves:
        picture = os.path.splitext(output_json)[0] + ".png"
        mark = report.get("crossing")
        if mark:
            mark = {"bleu": mark["peer_final_dev_bleu"], "minutes": mark["t2t_lite_minutes"],
                    "label": "OpenNMT-tf's final dev BLEU"}
        learning_curves.draw_curves(
            curves, picture, f"{HPARAMS_SET} on Multi30k de-en, {FLAGS.train_minutes:g} min of "
            f"training each; greedy, first {FLAGS.bleu_sentences} dev sentences", mark)
        report["picture"] = picture
        print(f"picture: {picture}")
    reporting.write_json(output_json, report)


if __name__ == "__main__":
    logging.set_verbosity(logging.INFO)
    common.run_main(main)
