"""The quality race, counted in updates: t2t_lite, OpenNMT-tf and eole on Multi30k de->en.

  python benchmarks/race.py --work_dir=W [--data_dir=D] [--toolkits=t2t_lite,opennmt_tf,eole]
      [--schedules=t2t_lite=400:2e-3 --schedules=opennmt_tf=400:2e-3,800:1.8e-3 ...]
      [--milestones=250,500,1000,2000,3000] [--choose_at=1000] [--updates_per_minute=...]

Updates do not depend on the machine, minutes do. So every toolkit trains the same model
(`transformer_small`: d 256, ff 1024, 4 heads, 3+3 layers, shared embeddings) on the same
sentence pairs and SentencePiece pieces with the same tokens per batch (4,096), and its
quality is read at the same update counts (--milestones): dev BLEU of the first
--dev_sentences dev pairs, translated greedily by the toolkit's own decoder from the
checkpoint at that update and scored by one sacreBLEU call (`decoder.score`). Minutes come
only from a separate alternating speed run (train_speed.py --compare), which
turns each toolkit's updates into its minutes on that run's machine (--updates_per_minute).

Each toolkit trains each of its --schedules (WARMUP:PEAK, t2t's warmup / rsqrt decay, the same
function as OpenNMT-tf's NoamDecay and eole's noam) from scratch up to --choose_at updates;
the schedule with the best dev BLEU there is chosen (every warmup must end before it). When
every toolkit has chosen, the chosen runs go on to the last milestone. There its last --average_last checkpoints
(--save_every updates apart) are averaged and test_2016_flickr is translated with beam 4 and
alpha 0.6 and scored.

Each run trains in segments, one per milestone, each a fresh process of the toolkit's own
trainer that resumes from the run's checkpoints: t2t_lite-trainer (which resumes by itself)
and the peers' run.py --continue_training. Every finished milestone is recorded at once in
W/race.json (written atomically, with the machine it ran on), so the race can be stopped at
any point and resumed in a later sitting, on this machine or, with W copied, another one: the
recorded milestones are kept and training goes on from the checkpoints.

Nothing is evaluated while a toolkit trains; the dev and test translations run between
segments and their time is not training time.
"""
import json
import os
import subprocess
import sys
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import learning_curves  # noqa: E402  (benchmarks/, beside this script)
import race_report  # noqa: E402
import reporting  # noqa: E402
from peers import peer_environment  # noqa: E402  (benchmarks/peers/peer_environment.py)

from absl import logging  # noqa: E402

from t2t_lite.decoding import decoder  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TMP_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))
PROBLEM = "translate_multi30k_deen"
HPARAMS_SET = "transformer_small"
# a peer's run.py exit status when it cannot run here (no Python for it)
PEER_UNAVAILABLE = peer_environment.NO_PYTHON_EXIT_STATUS
TOOLKITS = {
    "t2t_lite": {"name": "t2t_lite"},
    "opennmt_tf": {"name": "OpenNMT-tf", "run": os.path.join(REPO, "benchmarks", "peers",
                                                               "opennmt_tf", "run.py"),
                   # its dev BLEU point: the weights after the last update (no timed points)
                   "extra": ["--curve_every_minutes=1000000"]},
    "eole": {"name": "eole", "run": os.path.join(REPO, "benchmarks", "peers", "eole", "run.py"),
             "extra": []},
}

flags.DEFINE_string("work_dir", None, "Folder of the runs and of race.json.")
flags.DEFINE_string("data_dir", None, "Generated translate_multi30k_deen (default W/data; "
                    "generated there if missing).")
flags.DEFINE_string("tmp_dir", DEFAULT_TMP_DIR, "Folder of the raw Multi30k files.")
flags.DEFINE_list("toolkits", list(TOOLKITS), "Toolkits in the race, in this order.")
flags.DEFINE_multi_string("schedules", [], "TOOLKIT=WARMUP:PEAK[,WARMUP:PEAK...]: the "
                          "schedules a toolkit chooses from (default: each toolkit's entry "
                          "in DEFAULT_SCHEDULES).")
flags.DEFINE_list("milestones", ["250", "500", "1000", "2000", "3000"], "Updates at which dev "
                  "BLEU is read; the last one also gets the test BLEU.")
flags.DEFINE_integer("choose_at", 1000, "The milestone at which each toolkit's schedule is "
                     "chosen by dev BLEU.")
flags.DEFINE_boolean("choose_only", False, "Stop when every toolkit has chosen (the chosen runs "
                     "go on when the race is run again without it).")
flags.DEFINE_integer("save_every", 250, "Updates between checkpoints (milestones must be "
                     "multiples of it).")
flags.DEFINE_integer("average_last", 3, "Checkpoints averaged for the test translation.")
flags.DEFINE_integer("dev_sentences", 100, "Dev pairs (the first, in datagen's order) of the "
                     "dev BLEU.")
flags.DEFINE_integer("test_sentences", 0, "Translate only the first this many test sentences "
                     "(0: all 1,000; fewer only for a quick check).")
flags.DEFINE_string("updates_per_minute", "", "TOOLKIT=RATE,...: each toolkit's updates per "
                    "minute in one alternating speed run (train_speed.py --compare), which turn "
                    "its updates into minutes in the table and picture.")
flags.DEFINE_string("output_json", None, "The race (default W/race.json).")
flags.DEFINE_string("picture", None, "Dev BLEU against updates and minutes (default beside "
                    "the JSON, .png).")
flags.mark_flags_as_required(["work_dir"])

# The schedules each toolkit chooses from, as (warmup, peak): docs/benchmarks.md says where
# each comes from (t2t_lite's recipe; each peer's maintainers' recommendation scaled to 4,096
# tokens per update; one more).
DEFAULT_SCHEDULES = {
    "t2t_lite": [(400, 2e-3)],
    "opennmt_tf": [(400, 2e-3), (800, 1.8e-3), (400, 1e-3)],
    "eole": [(400, 2e-3), (800, 1.1e-3), (400, 3e-3)],
}


class PeerUnavailable(Exception):
    """A peer cannot run on this machine (its run.py said why)."""


def parse_schedules(values: list) -> dict:
    """["opennmt_tf=400:2e-3,800:1e-3"] -> {"opennmt_tf": [(400, 0.002), (800, 0.001)]}."""
    schedules = {}
    for value in values:
        toolkit, _, text = value.partition("=")
        if toolkit not in TOOLKITS or not text:
            raise ValueError(f"--schedules={value!r}: expected TOOLKIT=WARMUP:PEAK[,...] with "
                             f"TOOLKIT one of {', '.join(TOOLKITS)}")
        schedules[toolkit] = [learning_curves.parse_schedule(item.replace(":", ","))
                              for item in text.split(",")]
    return schedules


def check_milestones(milestones: list, choose_at: int, save_every: int, schedules: dict):
    if milestones != sorted(set(milestones)) or milestones[0] < 1:
        raise ValueError(f"--milestones must rise: {milestones}")
    if choose_at not in milestones:
        raise ValueError(f"--choose_at={choose_at} is not one of --milestones {milestones}")
    if any(milestone % save_every for milestone in milestones):
        raise ValueError(f"--milestones {milestones}: each must be a multiple of --save_every "
                         f"({save_every}), so that a checkpoint stands at each")
    for toolkit, candidates in schedules.items():
        late = [warmup for warmup, _ in candidates if warmup >= choose_at]
        if len(candidates) > 1 and late:
            raise ValueError(f"{toolkit}: warmup {late[0]} does not end before the choice at "
                             f"{choose_at} updates")


def run_name(warmup: int, peak: float) -> str:
    return learning_curves.schedule_name(warmup, peak)


# --- The race's record ---------------------------------------------------------------------------

def load_record(path: str) -> dict:
    if not os.path.exists(path):
        return {"runs": {}}
    with open(path, encoding="utf-8") as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not the race's record ({error}); move it away to start "
                             "the race again") from None


def save_record(path: str, record: dict):
    learning_curves.write_json_atomically(path, record)


def run_entry(record: dict, toolkit: str, warmup: int, peak: float) -> dict:
    key = f"{toolkit}/{run_name(warmup, peak)}"
    return record["runs"].setdefault(key, {"toolkit": toolkit, "warmup": warmup, "peak": peak,
                                           "milestones": {}})


# --- Running one segment -------------------------------------------------------------------------

def run_logged(command: list, log_path: str) -> float:
    """Runs `command`, its output appended to `log_path`; returns its seconds. A failure names
    the log and shows its end."""
    start = time.time()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        status = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
    if status == PEER_UNAVAILABLE and "run.py" in " ".join(command[:2]):
        raise PeerUnavailable(f"{command[1]} cannot run here (exit status 3); see {log_path}")
    if status:
        with open(log_path, encoding="utf-8", errors="replace") as log:
            tail = log.read()[-3000:]
        raise RuntimeError(f"{' '.join(command[:3])} failed (exit status {status}); {log_path} "
                           f"has its output, which ends:\n{tail}")
    return time.time() - start


def t2t_lite_segment(run_dir: str, warmup: int, peak: float, steps: int, dev: dict,
                     test: dict = None) -> dict:
    """t2t_lite-trainer to `steps` (resuming), then t2t_lite-decoder greedily on the dev
    sentences from the checkpoint at `steps`; with `test`, the last --average_last checkpoints
    averaged and the test set translated with beam 4, alpha 0.6 (the decoder's defaults)."""
    hidden_size = registry.hparams(HPARAMS_SET).hidden_size
    constant = learning_curves.learning_rate_constant(warmup, peak, hidden_size)
    log_path = os.path.join(run_dir, "race.log")
    python = [sys.executable, "-m"]
    train_seconds = run_logged(python + [
        "t2t_lite.bin.trainer", f"--problem={PROBLEM}", "--model=transformer",
        f"--hparams_set={HPARAMS_SET}",
        f"--hparams=learning_rate_warmup_steps={warmup},learning_rate_constant={constant!r}",
        f"--data_dir={data_dir()}", f"--output_dir={run_dir}", f"--train_steps={steps}",
        f"--save_checkpoints_steps={FLAGS.save_every}", "--keep_checkpoint_max=100",
        "--eval_every=1000000", "--eval_steps=0", "--eval_bleu_sentences=0",
        "--log_every_steps=50"], log_path)
    output = os.path.join(run_dir, f"dev.greedy.{steps}.en")
    decode_seconds = run_logged(python + [
        "t2t_lite.bin.decoder", f"--data_dir={data_dir()}", f"--output_dir={run_dir}",
        f"--checkpoint_path={os.path.join(run_dir, f'model.ckpt-{steps}')}",
        f"--decode_from_file={dev['source']}", f"--decode_to_file={output}",
        "--decode_hparams=beam_size=1"], log_path)
    result = {"dev_hypotheses": output, "train_process_seconds": train_seconds,
              "dev_decode_seconds": decode_seconds}
    if test:
        averaged = os.path.join(run_dir, "averaged", "model.ckpt")
        run_logged(python + ["t2t_lite.bin.avg_checkpoints", f"--output_dir={run_dir}",
                             f"--num_last={FLAGS.average_last}", f"--out={averaged}"], log_path)
        test_output = os.path.join(run_dir, "test_2016_flickr.beam4.en")
        start = time.time()
        run_logged(python + ["t2t_lite.bin.decoder", f"--data_dir={data_dir()}",
                             f"--output_dir={run_dir}", f"--checkpoint_path={averaged}",
                             f"--decode_from_file={test['source']}",
                             f"--decode_to_file={test_output}"], log_path)
        result.update(test_hypotheses=test_output, test_decode_seconds=time.time() - start)
    return result


def peer_segment(toolkit: str, run_dir: str, warmup: int, peak: float, steps: int,
                 dev: dict, test: dict = None, resume: bool = False) -> dict:
    """The peer's run.py to `steps` (--continue_training after the first segment), which also
    translates the dev sentences greedily with the last checkpoint and, with `test`, averages
    the last checkpoints and translates the test set with beam 4 (--decode)."""
    hidden_size = registry.hparams(HPARAMS_SET).hidden_size
    constant = learning_curves.learning_rate_constant(warmup, peak, hidden_size)
    json_path = os.path.join(run_dir, f"segment.{steps}.json")
    command = [sys.executable, TOOLKITS[toolkit]["run"], f"--data_dir={data_dir()}",
               f"--tmp_dir={FLAGS.tmp_dir}", f"--work_dir={run_dir}", f"--train_steps={steps}",
               f"--warmup_steps={warmup}", f"--learning_rate_constant={constant!r}",
               f"--save_every={FLAGS.save_every}", f"--average_last={FLAGS.average_last}",
               f"--dev_bleu_source={dev['source']}", f"--dev_bleu_reference={dev['reference']}",
               "--log_every=50", f"--output_json={json_path}", *TOOLKITS[toolkit]["extra"]]
    if resume:
        command.append("--continue_training")
    if test:
        command += ["--decode", f"--test_sentences={FLAGS.test_sentences}"]
    os.makedirs(run_dir, exist_ok=True)
    seconds = run_logged(command, os.path.join(run_dir, "race.log"))
    with open(json_path, encoding="utf-8") as handle:
        result = json.load(handle)
    point = result["dev_bleu_curve"][-1]
    if point["step"] != steps:
        raise RuntimeError(f"{toolkit}: the segment to {steps} updates ended at {point['step']}; "
                           f"see {json_path}")
    segment = {"dev_bleu": point["bleu"], "process_seconds": seconds, "peer_json": json_path,
               "train_process_seconds": result.get("train_seconds"),
               "target_tokens_per_step": result.get("target_tokens_per_step"),
               "final_loss": result.get("final_loss"), "toolkit_version": result.get("toolkit")}
    if test:
        segment.update(test_bleu=result["bleu"], test_bleu_signature=result["bleu_signature"],
                       averaged_checkpoints=result.get("averaged_checkpoints"))
    return segment


# --- The race ------------------------------------------------------------------------------------

def data_dir() -> str:
    return FLAGS.data_dir or os.path.join(FLAGS.work_dir, "data")


def reach(record: dict, record_path: str, toolkit: str, warmup: int, peak: float,
          milestone: int, dev: dict, test: dict = None) -> dict:
    """The run's entry at `milestone`, trained and measured now unless already recorded."""
    entry = run_entry(record, toolkit, warmup, peak)
    recorded = entry["milestones"].get(str(milestone))
    if recorded and (not test or "test_bleu" in recorded):
        return recorded
    run_dir = os.path.join(FLAGS.work_dir, "runs", toolkit, run_name(warmup, peak))
    os.makedirs(run_dir, exist_ok=True)
    print(f"\n{TOOLKITS[toolkit]['name']} {run_name(warmup, peak)}: to {milestone} updates"
          + (" and the test set" if test else ""), flush=True)
    start = time.time()
    if toolkit == "t2t_lite":
        segment = t2t_lite_segment(run_dir, warmup, peak, milestone, dev, test)
        segment["dev_bleu"] = decoder.score(decoder.read_sentences(segment["dev_hypotheses"]),
                                            dev["references"])["bleu"]
        if test:
            scores = decoder.score(decoder.read_sentences(segment["test_hypotheses"]),
                                   test["references"])
            segment.update(test_bleu=scores["bleu"], test_bleu_signature=scores["bleu_signature"],
                           averaged_checkpoints=FLAGS.average_last)
    else:
        segment = peer_segment(toolkit, run_dir, warmup, peak, milestone, dev, test,
                               resume=bool(entry["milestones"]))
    segment.update(step=milestone, seconds=time.time() - start,
                   finished=time.strftime("%Y-%m-%d %H:%M:%S"), machine=machine_kind())
    entry["milestones"][str(milestone)] = segment
    save_record(record_path, record)
    print(f"{TOOLKITS[toolkit]['name']} {run_name(warmup, peak)} at {milestone} updates: dev "
          f"BLEU {segment['dev_bleu']:.2f}"
          + (f", test BLEU {segment['test_bleu']:.2f}" if test else ""), flush=True)
    return segment


def machine_kind() -> str:
    described = reporting.machine()
    return described.get("cpu_kind") or described.get("cpu", "")


def sweep(record: dict, record_path: str, toolkit: str, candidates: list, milestones: list,
          choose_at: int, dev: dict, test: dict) -> tuple:
    """Each of the toolkit's schedules from scratch up to `choose_at` updates; returns the one
    with the best dev BLEU there (the first of equals), recorded with how long the choice
    took (training and dev decoding of every candidate up to the choice)."""
    for warmup, peak in candidates:
        for milestone in (m for m in milestones if m <= choose_at):
            reach(record, record_path, toolkit, warmup, peak, milestone, dev,
                  test if milestone == milestones[-1] else None)
    runs = {schedule: run_entry(record, toolkit, *schedule)["milestones"]
            for schedule in candidates}
    scores = {schedule: runs[schedule][str(choose_at)]["dev_bleu"]
              for schedule in candidates}
    chosen = max(candidates, key=lambda schedule: scores[schedule])
    record.setdefault("choices", {})[toolkit] = {
        "chosen": run_name(*chosen),
        "dev_bleu_at_choice": {run_name(*schedule): bleu for schedule, bleu in scores.items()},
        "seconds": sum(segment["seconds"] for segments in runs.values()
                       for step, segment in segments.items() if int(step) <= choose_at)}
    save_record(record_path, record)
    return chosen


def write_pairs(folder: str, name: str, sources: list, references: list) -> dict:
    files = {"source": os.path.join(folder, f"{name}.de"),
             "reference": os.path.join(folder, f"{name}.en"), "references": references}
    decoder.write_lines(files["source"], sources)
    decoder.write_lines(files["reference"], references)
    return files


def main(unused_argv):
    milestones = [int(m) for m in FLAGS.milestones]
    schedules = {**DEFAULT_SCHEDULES, **parse_schedules(FLAGS.schedules)}
    schedules = {toolkit: schedules[toolkit] for toolkit in FLAGS.toolkits}
    check_milestones(milestones, FLAGS.choose_at, FLAGS.save_every, schedules)
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    record_path = FLAGS.output_json or os.path.join(FLAGS.work_dir, "race.json")
    record = load_record(record_path)
    record.update(hparams_set=HPARAMS_SET, milestones=milestones, choose_at=FLAGS.choose_at,
                  dev_sentences=FLAGS.dev_sentences, average_last=FLAGS.average_last,
                  save_every=FLAGS.save_every)
    problem = registry.problem(PROBLEM)
    problem.generate_data(data_dir(), FLAGS.tmp_dir)
    dev = write_pairs(FLAGS.work_dir, "dev", *learning_curves.first_dev_pairs(
        problem, data_dir(), FLAGS.dev_sentences))
    paths = problem.text_paths(data_dir(), "test")
    test = write_pairs(FLAGS.work_dir, "test", *(
        decoder.read_sentences(paths[name])[:FLAGS.test_sentences or None]
        for name in ("inputs", "targets")))
    chosen = {}
    for toolkit in FLAGS.toolkits:  # every choice first, then the chosen runs to the end
        try:
            chosen[toolkit] = sweep(record, record_path, toolkit, schedules[toolkit],
                                    milestones, FLAGS.choose_at, dev, test)
        except PeerUnavailable as reason:
            print(reason)
    for toolkit, schedule in ({} if FLAGS.choose_only else chosen).items():
        for milestone in (m for m in milestones if m > FLAGS.choose_at):
            reach(record, record_path, toolkit, *schedule, milestone, dev,
                  test if milestone == milestones[-1] else None)
    race_report.report(record, race_report.parse_rates(FLAGS.updates_per_minute),
                       FLAGS.picture or os.path.splitext(record_path)[0] + ".png")


if __name__ == "__main__":
    logging.set_verbosity(logging.INFO)
    common.run_main(main)
