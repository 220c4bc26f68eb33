"""The quality race's tables and picture, from its record (race.py's race.json).

    python benchmarks/race_report.py RACE_JSON [--updates_per_minute=t2t_lite=40,eole=35,...]

The sweep table: every schedule a toolkit tried, its warmup beside the updates trained, the dev
BLEU at each milestone up to the choice and which was chosen, and how long the choice took.
The race table: each toolkit's chosen run, dev BLEU at every milestone and test BLEU at the
last. The picture: dev BLEU against updates and, with each toolkit's updates per minute from
one alternating speed run (train_speed.py --compare), against minutes.
"""
import argparse
import json
import os

import harness

NAMES = {"t2t_lite": "t2t_lite", "opennmt_tf": "OpenNMT-tf", "eole": "eole"}


def chosen_runs(record: dict) -> dict:
    """{run key: run entry} of each toolkit's chosen schedule, or of all its schedules while it
    has not chosen yet."""
    choices = record.get("choices", {})
    return {key: entry for key, entry in record["runs"].items() if entry["toolkit"] not in choices
            or key == f"{entry['toolkit']}/{choices[entry['toolkit']]['chosen']}"}


def bleu_cells(entry: dict, milestones: list) -> list:
    return [f"{entry['milestones'][str(m)]['dev_bleu']:.2f}" if str(m) in entry["milestones"]
            else "-" for m in milestones]


def sweep_table(record: dict, updates_per_minute: dict = None) -> str:
    early = [m for m in record["milestones"] if m <= record["choose_at"]]
    choices = record.get("choices", {})
    rows = [[NAMES[e["toolkit"]], str(e["warmup"]), f"{e['peak']:.1e}",
             str(max((int(step) for step in e["milestones"]), default=0)), *bleu_cells(e, early),
             "*" if choices.get(e["toolkit"], {}).get("chosen")
             == f"w{e['warmup']}_p{e['peak']:g}" else ""] for e in record["runs"].values()]
    return "\n".join([
        f"schedules tried: dev BLEU (greedy, first {record['dev_sentences']} dev sentences) at "
        f"each milestone up to the choice at {record['choose_at']} updates", harness.table(
            ["toolkit", "warmup", "peak", "updates", *(f"@{m}" for m in early), "chosen"], rows),
        *(choice_time(record, toolkit, choice, (updates_per_minute or {}).get(toolkit))
          for toolkit, choice in choices.items())])


def choice_time(record: dict, toolkit: str, choice: dict, rate: float = None) -> str:
    """How long a toolkit's choice took: its schedules' updates to the choice, in minutes at
    its updates per minute from the speed run (the figure that compares toolkits), beside the
    wall clock the record measured (training, restarts and dev decoding, on whatever load the
    machine had; a run trained before the record began counts only its decoding)."""
    runs = [entry for entry in record["runs"].values() if entry["toolkit"] == toolkit]
    updates = len(runs) * record["choose_at"]
    at_rate = f" = {updates / rate:.0f} min at {rate:g} updates/min" if rate else ""
    return (f"{NAMES[toolkit]}: the choice took {len(runs)} schedule(s) x "
            f"{record['choose_at']:,} updates{at_rate} (wall clock recorded: "
            f"{choice['seconds'] / 60:.0f} min of training and dev decoding)")


def race_table(record: dict, updates_per_minute: dict) -> str:
    milestones, rows = record["milestones"], []
    for entry in chosen_runs(record).values():
        last = entry["milestones"].get(str(milestones[-1]), {})
        rate = updates_per_minute.get(entry["toolkit"])
        rows.append([NAMES[entry["toolkit"]], f"w{entry['warmup']} p{entry['peak']:g}",
                     *bleu_cells(entry, milestones), harness.fmt(last.get("test_bleu"), ".2f"),
                     harness.fmt(rate, ".1f"), harness.fmt(rate and milestones[-1] / rate, ".0f")])
    return "\n".join([
        f"dev BLEU at equal updates (each toolkit's chosen schedule, or every schedule until it "
        f"has chosen); test: test_2016_flickr at {milestones[-1]} updates, last "
        f"{record['average_last']} checkpoints averaged, beam 4, alpha 0.6", harness.table(
            ["toolkit", "schedule", *(f"@{m}" for m in milestones), "test", "upd/min", "minutes"],
            rows), "upd/min: updates per minute in the speed run; minutes: the race's "
        f"{milestones[-1]:,} updates at that rate"])


def draw(record: dict, updates_per_minute: dict, path: str):
    plot, panels = harness.pyplot(), 2 if updates_per_minute else 1
    figure, axes = plot.subplots(1, panels, figsize=(6 * panels, 4.2), dpi=110, squeeze=False)
    for entry in chosen_runs(record).values():
        steps = sorted(int(step) for step in entry["milestones"])
        bleu = [entry["milestones"][str(step)]["dev_bleu"] for step in steps]
        label = f"{NAMES[entry['toolkit']]} (w{entry['warmup']}, peak {entry['peak']:g})"
        for axis, rate in zip(axes[0], (1, updates_per_minute.get(entry["toolkit"]))):
            if rate:  # updates, then minutes at the toolkit's updates per minute
                axis.plot([s / rate for s in steps], bleu, marker="o", label=label)
    for axis, xlabel in zip(axes[0], ["updates (4,096 tokens a batch)",
                                      "minutes at each toolkit's speed in one alternating run"]):
        axis.set(xlabel=xlabel, ylabel=f"dev BLEU (greedy, {record['dev_sentences']} sentences)",
                 xlim=(0, None), ylim=(0, None))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(f"{record['hparams_set']} on Multi30k de-en, each toolkit at its chosen "
                    "schedule (at each of its schedules until it has chosen)", fontsize=10)
    harness.save_figure(figure, path)
    plot.close(figure)


def parse_rates(text: str) -> dict:
    rates = {}
    for item in filter(None, (text or "").split(",")):
        toolkit, _, value = item.partition("=")
        if toolkit not in NAMES:
            raise ValueError(f"--updates_per_minute: unknown toolkit {toolkit!r} (one of "
                             f"{', '.join(NAMES)})")
        rates[toolkit] = float(value)
    return rates


def report(record: dict, updates_per_minute: dict, picture: str):
    print("\n" + sweep_table(record, updates_per_minute) + "\n\n"
          + race_table(record, updates_per_minute))
    if record["runs"]:
        draw(record, updates_per_minute, picture)
        print(f"picture: {picture}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("race_json")
    parser.add_argument("--updates_per_minute", default="",
                        help="TOOLKIT=RATE,...: updates per minute from one speed run")
    parser.add_argument("--picture", help="default: beside the JSON, .png")
    args = parser.parse_args()
    with open(args.race_json, encoding="utf-8") as handle:
        record = json.load(handle)
    report(record, parse_rates(args.updates_per_minute),
           args.picture or os.path.splitext(args.race_json)[0] + ".png")


if __name__ == "__main__":
    main()
