"""The quality race, counted in updates: t2t_lite, OpenNMT-tf and eole on Multi30k de->en
(benchmarks/README.md, race.py).

  python benchmarks/race.py --work_dir=W [--data_dir=D] [--toolkits=t2t_lite,opennmt_tf,eole]
      [--schedules=opennmt_tf=400:2e-3,800:1.8e-3 ...] [--milestones=250,500,1000,2000,3000]

Each toolkit trains each of its --schedules to --choose_at updates, keeps the best by dev BLEU
and goes on to the last milestone, in segments that resume from the run's checkpoints; every
milestone is recorded at once in W/race.json, so the same command goes on where it stopped.
"""
import json
import os
import sys
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry
common.load_tensorflow()  # the programs' start: a quiet TensorFlow

import harness  # noqa: E402  (benchmarks/, beside this script)
import race_report  # noqa: E402
from harness import HPARAMS_SET, PROBLEM, schedule_name as run_name  # noqa: E402

from t2t_lite.decoding import decoder, output_files  # noqa: E402
from t2t_lite.decoding.dev_bleu import first_dev_pairs  # noqa: E402

# The peers' run.py flags besides the race's own ("--curve_every_minutes" huge: OpenNMT-tf's dev
# BLEU point is the weights after the last update, with no timed points).
PEER_FLAGS = {"opennmt_tf": ["--curve_every_minutes=1000000"], "eole": []}
TOOLKITS = ["t2t_lite", *PEER_FLAGS]
# The schedules each toolkit chooses from, as (warmup, peak): where each comes from is in
# docs/benchmarks.md (the recipe's; the maintainers' scaled to 4,096 tokens an update; one more).
DEFAULT_SCHEDULES = {
    "t2t_lite": [(400, 2e-3)],
    "opennmt_tf": [(400, 2e-3), (800, 1.8e-3), (400, 1e-3)],
    "eole": [(400, 2e-3), (800, 1.1e-3), (400, 3e-3)],
}

flags.DEFINE_string("work_dir", None, "Folder of the runs and of race.json.")
harness.define_data_flags(flags, test_sentences=True)
flags.DEFINE_list("toolkits", TOOLKITS, "Toolkits in the race, in this order.")
flags.DEFINE_multi_string("schedules", [], "TOOLKIT=WARMUP:PEAK[,WARMUP:PEAK...]: the "
                          "schedules a toolkit chooses from (default: DEFAULT_SCHEDULES).")
flags.DEFINE_list("milestones", ["250", "500", "1000", "2000", "3000"], "Updates at which dev "
                  "BLEU is read; the last one also gets the test BLEU.")
flags.DEFINE_integer("choose_at", 1000, "The milestone at which each toolkit's schedule is "
                     "chosen by dev BLEU.", lower_bound=1)
flags.DEFINE_boolean("choose_only", False, "Stop when every toolkit has chosen (the chosen runs "
                     "go on when the race is run again without it).")
flags.DEFINE_integer("save_every", 250, "Updates between checkpoints (milestones must be "
                     "multiples of it).", lower_bound=1)
flags.DEFINE_integer("average_last", 3, "Checkpoints averaged for the test translation.",
                     lower_bound=1)
flags.DEFINE_integer("dev_sentences", 100, "Dev pairs (the first, in datagen's order) of the "
                     "dev BLEU.", lower_bound=1)
flags.DEFINE_string("updates_per_minute", "", "TOOLKIT=RATE,...: each toolkit's updates per "
                    "minute in one alternating speed run (train_speed.py --compare), which turn "
                    "its updates into minutes in the table and picture.")
flags.DEFINE_string("output_json", None, "The race (default W/race.json).")
flags.DEFINE_string("picture", None, "Dev BLEU against updates and minutes (default beside "
                    "the JSON, .png).")
flags.mark_flags_as_required(["work_dir"])


def parse_schedules(values: list) -> dict:
    """["opennmt_tf=400:2e-3,800:1e-3"] -> {"opennmt_tf": [(400, 0.002), (800, 0.001)]}."""
    schedules = {}
    for value in values:
        toolkit, _, text = value.partition("=")
        if toolkit not in TOOLKITS or not text:
            raise ValueError(f"--schedules={value!r}: expected TOOLKIT=WARMUP:PEAK[,...] with "
                             f"TOOLKIT one of {', '.join(TOOLKITS)}")
        schedules[toolkit] = [harness.parse_schedule(item.replace(":", ","))
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
    harness.write_json(path, record, announce=False)


def run_entry(record: dict, toolkit: str, warmup: int, peak: float) -> dict:
    key = f"{toolkit}/{run_name(warmup, peak)}"
    return record["runs"].setdefault(key, {"toolkit": toolkit, "warmup": warmup, "peak": peak,
                                           "milestones": {}})


def run_logged(command: list, log_path: str) -> float:
    start = time.time()
    harness.run_logged(command, log_path, append=True)
    return time.time() - start


def t2t_lite_segment(run_dir: str, warmup: int, constant: float, steps: int, dev: dict,
                     test: dict = None) -> dict:
    """t2t_lite-trainer to `steps` (resuming), then t2t_lite-decoder greedily on the dev
    sentences from the checkpoint at `steps`, scored; with `test`, the test set too, with beam 4
    and alpha 0.6 (the decoder's defaults) from the last --average_last checkpoints averaged."""
    log_path = os.path.join(run_dir, "race.log")
    folders = [f"--data_dir={data_dir()}", f"--output_dir={run_dir}"]
    result = {"dev_hypotheses": os.path.join(run_dir, f"dev.greedy.{steps}.en")}
    result["train_process_seconds"] = run_logged(harness.t2t_lite_command("trainer") + [
        *folders, f"--problem={PROBLEM}", "--model=transformer",
        f"--hparams_set={HPARAMS_SET}", f"--train_steps={steps}",
        f"--hparams=learning_rate_warmup_steps={warmup},learning_rate_constant={constant!r}",
        f"--save_checkpoints_steps={FLAGS.save_every}", "--keep_checkpoint_max=100",
        "--eval_every=1000000", "--eval_steps=0", "--eval_bleu_sentences=0",
        "--log_every_steps=50"], log_path)
    decode = harness.t2t_lite_command("decoder") + folders
    result["dev_decode_seconds"] = run_logged(decode + [
        f"--checkpoint_path={os.path.join(run_dir, f'model.ckpt-{steps}')}",
        f"--decode_from_file={dev['source']}", f"--decode_to_file={result['dev_hypotheses']}",
        "--decode_hparams=beam_size=1"], log_path)
    result["dev_bleu"] = decoder.score(decoder.read_sentences(result["dev_hypotheses"]),
                                       dev["references"])["bleu"]
    if test:
        averaged = os.path.join(run_dir, harness.AVERAGED)
        run_logged(harness.t2t_lite_command("avg-checkpoints") + [
            f"--output_dir={run_dir}", f"--num_last={FLAGS.average_last}", f"--out={averaged}"],
            log_path)
        result["test_hypotheses"] = os.path.join(run_dir, "test_2016_flickr.beam4.en")
        result["test_decode_seconds"] = run_logged(decode + [
            f"--checkpoint_path={averaged}", f"--decode_from_file={test['source']}",
            f"--decode_to_file={result['test_hypotheses']}"], log_path)
        scores = decoder.score(decoder.read_sentences(result["test_hypotheses"]),
                               test["references"])
        result.update(test_bleu=scores["bleu"], test_bleu_signature=scores["bleu_signature"],
                      averaged_checkpoints=FLAGS.average_last)
    return result


def peer_segment(toolkit: str, run_dir: str, warmup: int, constant: float, steps: int,
                 dev: dict, test: dict = None, resume: bool = False) -> dict:
    """The peer's run.py to `steps` (--continue_training after the first segment), which also
    translates the dev sentences greedily with the last checkpoint and, with `test`, averages
    the last checkpoints and translates the test set with beam 4 (--decode)."""
    json_path = os.path.join(run_dir, f"segment.{steps}.json")
    command = [sys.executable, os.path.join(harness.PEERS, toolkit, "run.py"),
               f"--data_dir={data_dir()}", f"--tmp_dir={FLAGS.tmp_dir}",
               f"--work_dir={run_dir}", f"--train_steps={steps}", f"--warmup_steps={warmup}",
               f"--learning_rate_constant={constant!r}", f"--save_every={FLAGS.save_every}",
               f"--average_last={FLAGS.average_last}", f"--dev_bleu_source={dev['source']}",
               f"--dev_bleu_reference={dev['reference']}", "--log_every=50",
               f"--output_json={json_path}", *PEER_FLAGS[toolkit]]
    command += ["--continue_training"] * resume + (
        ["--decode", f"--test_sentences={FLAGS.test_sentences}"] if test else [])
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
    name = f"{race_report.NAMES[toolkit]} {run_name(warmup, peak)}"
    print(f"\n{name}: to {milestone} updates" + (" and the test set" if test else ""), flush=True)
    start = time.time()
    constant = harness.learning_rate_constant(warmup, peak,
                                              registry.hparams(HPARAMS_SET).hidden_size)
    if toolkit == "t2t_lite":
        segment = t2t_lite_segment(run_dir, warmup, constant, milestone, dev, test)
    else:
        segment = peer_segment(toolkit, run_dir, warmup, constant, milestone, dev, test,
                               resume=bool(entry["milestones"]))
    segment.update(step=milestone, seconds=time.time() - start,
                   finished=time.strftime("%Y-%m-%d %H:%M:%S"),
                   machine=harness.machine()["cpu_kind"])
    entry["milestones"][str(milestone)] = segment
    save_record(record_path, record)
    print(f"{name} at {milestone} updates: dev BLEU {segment['dev_bleu']:.2f}"
          + (f", test BLEU {segment['test_bleu']:.2f}" if test else ""), flush=True)
    return segment


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
    scores = {schedule: runs[schedule][str(choose_at)]["dev_bleu"] for schedule in candidates}
    chosen = max(candidates, key=lambda schedule: scores[schedule])
    record.setdefault("choices", {})[toolkit] = {
        "chosen": run_name(*chosen),
        "dev_bleu_at_choice": {run_name(*schedule): bleu for schedule, bleu in scores.items()},
        "seconds": sum(segment["seconds"] for segments in runs.values()
                       for step, segment in segments.items() if int(step) <= choose_at)}
    save_record(record_path, record)
    return chosen


def write_pairs(name: str, sources: list, references: list) -> dict:
    """W/NAME.de and W/NAME.en, the files each toolkit's decoder reads."""
    files = {"source": os.path.join(FLAGS.work_dir, f"{name}.de"),
             "reference": os.path.join(FLAGS.work_dir, f"{name}.en"), "references": references}
    output_files.write_lines(files["source"], sources)
    output_files.write_lines(files["reference"], references)
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
    dev = write_pairs("dev", *first_dev_pairs(problem, data_dir(), FLAGS.dev_sentences))
    test = write_pairs("test", *(decoder.read_sentences(path)[:FLAGS.test_sentences or None]
                                 for path in problem.text_paths(data_dir(), "test").values()))
    chosen = {}
    for toolkit in FLAGS.toolkits:  # every choice first, then the chosen runs to the end
        try:
            chosen[toolkit] = sweep(record, record_path, toolkit, schedules[toolkit],
                                    milestones, FLAGS.choose_at, dev, test)
        except harness.ChildFailed as error:  # a peer's run.py that cannot run here
            if error.status != harness.NO_PYTHON_EXIT_STATUS or toolkit == "t2t_lite":
                raise
            print(f"{toolkit} left out: {error} (no Python for it)")
    for toolkit, schedule in ({} if FLAGS.choose_only else chosen).items():
        for milestone in (m for m in milestones if m > FLAGS.choose_at):
            reach(record, record_path, toolkit, *schedule, milestone, dev,
                  test if milestone == milestones[-1] else None)
    race_report.report(record, race_report.parse_rates(FLAGS.updates_per_minute),
                       FLAGS.picture or os.path.splitext(record_path)[0] + ".png")


if __name__ == "__main__":
    harness.run_main(main)
