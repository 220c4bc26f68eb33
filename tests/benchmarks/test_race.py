"""benchmarks/race.py's rules: schedules as flags, milestones that a checkpoint stands at and
warmups that end before the choice, the choice by dev BLEU at the choice's milestone, a race
resumed from its record without training again, and race_report's tables of that record.
No toolkit trains here: the measuring step is replaced by a table of dev BLEU scores."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import race  # noqa: E402
import race_report  # noqa: E402


def test_schedules_parse_per_toolkit():
    assert race.parse_schedules(["opennmt_tf=400:2e-3,800:1e-3", "eole=1000:5e-4"]) == {
        "opennmt_tf": [(400, 0.002), (800, 0.001)], "eole": [(1000, 0.0005)]}
    with pytest.raises(ValueError, match="TOOLKIT one of t2t_lite, opennmt_tf, eole"):
        race.parse_schedules(["fairseq=400:2e-3"])
    with pytest.raises(ValueError, match="WARMUP,PEAK"):
        race.parse_schedules(["eole=400"])


def test_milestones_must_rise_hold_a_checkpoint_and_follow_every_warmup():
    race.check_milestones([250, 500, 1000], 1000, 250, {"eole": [(400, 2e-3), (800, 1e-3)]})
    with pytest.raises(ValueError, match="must rise"):
        race.check_milestones([500, 250], 500, 250, {})
    with pytest.raises(ValueError, match="not one of --milestones"):
        race.check_milestones([250, 500], 750, 250, {})
    with pytest.raises(ValueError, match="multiple of --save_every"):
        race.check_milestones([250, 600], 250, 250, {})
    with pytest.raises(ValueError, match="warmup 1000 does not end before the choice"):
        race.check_milestones([250, 1000], 1000, 250, {"eole": [(400, 2e-3), (1000, 1e-3)]})
    # a toolkit with one schedule chooses nothing, so its warmup may be longer
    race.check_milestones([250, 1000], 1000, 250, {"t2t_lite": [(4000, 1e-3)]})


DEV_BLEU = {(400, 2e-3): {250: 1.0, 500: 9.0, 1000: 20.0},
            (800, 1.8e-3): {250: 0.5, 500: 12.0, 1000: 24.0},
            (400, 1e-3): {250: 2.0, 500: 10.0, 1000: 24.0}}


def fake_reach(calls):
    """race.reach that records a dev BLEU from DEV_BLEU instead of training and decoding."""
    def reach(record, record_path, toolkit, warmup, peak, milestone, dev, test=None):
        entry = race.run_entry(record, toolkit, warmup, peak)
        if str(milestone) not in entry["milestones"]:
            calls.append((warmup, peak, milestone))
            entry["milestones"][str(milestone)] = {
                "step": milestone, "dev_bleu": DEV_BLEU[(warmup, peak)][milestone],
                "seconds": 60.0}
            race.save_record(record_path, record)
        return entry["milestones"][str(milestone)]
    return reach


def test_the_choice_is_the_best_dev_bleu_at_its_milestone_and_the_first_of_equals(
        monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(race, "reach", fake_reach(calls))
    record, path = {"runs": {}}, str(tmp_path / "race.json")
    candidates = list(DEV_BLEU)
    chosen = race.sweep(record, path, "eole", candidates, [250, 500, 1000, 2000], 1000,
                        dev={}, test={})
    # (800, 1.8e-3) and (400, 1e-3) tie at 24.0 at the choice; the first listed wins, and
    # (400, 1e-3)'s better score at 250 updates does not count
    assert chosen == (800, 1.8e-3)
    assert len(calls) == 9 and all(milestone <= 1000 for _, _, milestone in calls)
    choice = record["choices"]["eole"]
    assert choice["chosen"] == "w800_p0.0018" and choice["seconds"] == 9 * 60.0
    assert json.load(open(path, encoding="utf-8"))["choices"]["eole"] == choice


def test_a_resumed_race_trains_nothing_that_its_record_holds(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(race, "reach", fake_reach(calls))
    path = str(tmp_path / "race.json")
    record = {"runs": {}}
    race.run_entry(record, "eole", 400, 2e-3)["milestones"]["250"] = {"step": 250,
                                                                      "dev_bleu": 1.0,
                                                                      "seconds": 60.0}
    race.save_record(path, record)
    resumed = race.load_record(path)
    race.sweep(resumed, path, "eole", [(400, 2e-3)], [250, 500], 500, dev={}, test={})
    assert calls == [(400, 2e-3, 500)]


def test_a_damaged_record_is_named_not_overwritten(tmp_path):
    path = tmp_path / "race.json"
    path.write_text("{garbage", encoding="utf-8")
    with pytest.raises(ValueError, match="race.json: not the race's record"):
        race.load_record(str(path))
    assert path.read_text(encoding="utf-8") == "{garbage"


def test_report_tables_show_the_sweep_the_chosen_runs_and_minutes(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(race, "reach", fake_reach(calls))
    record = {"runs": {}, "milestones": [250, 500, 1000], "choose_at": 500,
              "dev_sentences": 100, "average_last": 3, "hparams_set": "transformer_small"}
    path = str(tmp_path / "race.json")
    race.sweep(record, path, "eole", [(400, 2e-3), (400, 1e-3)], [250, 500, 1000], 500,
               dev={}, test={})
    record["runs"]["eole/w400_p0.001"]["milestones"]["1000"] = {"dev_bleu": 24.0,
                                                               "test_bleu": 30.5}
    sweep = race_report.sweep_table(record, {"eole": 40.0})
    assert "eole" in sweep and sweep.count("*") == 1
    # two schedules to the choice at 500 updates: 1,000 updates, 25 min at 40 a minute
    assert "2 schedule(s) x 500 updates = 25 min at 40 updates/min" in sweep
    chosen_line = next(line for line in sweep.splitlines() if line.rstrip().endswith("*"))
    assert "4.0e-04" not in chosen_line and "1.0e-03" in chosen_line
    table = race_report.race_table(record, {"eole": 40.0})
    row = next(line for line in table.splitlines() if line.startswith("eole"))
    assert row.split()[-3:] == ["30.50", "40.0", "25"]  # 1,000 updates at 40 a minute
    race_report.draw(record, {"eole": 40.0}, str(tmp_path / "race.png"))
    assert (tmp_path / "race.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="unknown toolkit 'marian'"):
        race_report.parse_rates("marian=3")


def test_until_a_toolkit_has_chosen_every_schedule_of_it_is_shown():
    record = {"runs": {}, "milestones": [250, 500], "choose_at": 500, "dev_sentences": 100,
              "average_last": 3, "hparams_set": "transformer_small"}
    for warmup, peak in ((400, 2e-3), (400, 1e-3)):
        race.run_entry(record, "eole", warmup, peak)["milestones"]["250"] = {"dev_bleu": 1.0}
    rows = [line for line in race_report.race_table(record, {}).splitlines()
            if line.startswith("eole")]
    assert len(rows) == 2
    record["choices"] = {"eole": {"chosen": "w400_p0.001", "seconds": 0.0}}
    rows = [line for line in race_report.race_table(record, {}).splitlines()
            if line.startswith("eole")]
    assert len(rows) == 1 and "p0.001" in rows[0]
