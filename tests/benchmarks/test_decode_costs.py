"""decode_costs.py's pieces: the shuffled references' permutation, the decoder's score lines and
the checks made of them, and the interactive decoder's answers read through its pipes (on a
stand-in program; nothing timed)."""
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
import decode_costs  # noqa: E402
import harness  # noqa: E402


@pytest.mark.parametrize("count", [2, 3, 10, 1000])
def test_the_shuffle_moves_every_reference_and_is_fixed(count):
    order = decode_costs.derangement(count, 52)
    assert sorted(order) == list(range(count))
    assert all(i != j for i, j in enumerate(order))
    assert order == decode_costs.derangement(count, 52)


def test_score_lines_read_with_the_unscored_pairs_kept():
    assert decode_costs.read_scores(["-3.500000\t7\t-0.500000", "", "-1.0\t2\t-0.5"]) == [
        (-3.5, 7), None, (-1.0, 2)]


def test_the_reference_is_preferred_by_the_mean_per_piece_and_by_the_sum():
    references = [(-4.0, 8), (-2.0, 2), None, (-3.0, 3)]
    shuffled = [(-3.0, 3), (-4.0, 2), (-1.0, 1), (-3.0, 3)]
    assert decode_costs.reference_preference(references, shuffled) == {
        "pairs": 3, "mean_above": 2 / 3, "sum_above": 1 / 3}


def test_engines_agree_by_their_largest_difference():
    agreement = decode_costs.score_agreement([(-4.0, 8), (-2.0, 2), None],
                                             [(-4.0, 8), (-2.002, 2), (-1.0, 1)])
    assert agreement["pairs"] == 2 and agreement["pieces_differ"] == 0
    assert agreement["max_mean_difference"] == pytest.approx(0.001)
    assert agreement["max_sum_difference"] == pytest.approx(0.002)


STAND_IN = """
import sys
print("loading", file=sys.stderr, flush=True)
print("I1202 decoder.py:1] " + sys.argv[1], file=sys.stderr, flush=True)
for line in sys.stdin:
    print(line.strip().upper(), flush=True)
"""


def test_interactive_answers_wait_for_ready_then_read_a_line_each(tmp_path):
    log = str(tmp_path / "interactive.log")
    result = decode_costs.interactive_answers(
        [sys.executable, "-c", STAND_IN, decode_costs.READY], ["ein hund", "zwei"], log)
    assert result["translations"] == ["EIN HUND", "ZWEI"]
    assert len(result["latency_seconds"]) == 2 and result["ready_seconds"] > 0
    assert decode_costs.READY in open(log, encoding="utf-8").read()
    summary = decode_costs.answer_summary([0.5, 0.1, 0.3, 0.2])
    assert summary == {"first_answer_seconds": 0.5, "other_answers_median_seconds": 0.2}


def test_an_interactive_decoder_that_ends_before_ready_names_its_log(tmp_path):
    log = str(tmp_path / "interactive.log")
    with pytest.raises(harness.ChildFailed, match="before its ready line.*interactive.log"):
        decode_costs.interactive_answers(
            [sys.executable, "-c", "import sys; sys.exit('no model')"], ["a"], log)
