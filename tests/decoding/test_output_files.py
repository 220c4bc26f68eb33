"""The decoder's output formats (docs/decoding.md): the 1-best with its score after a tab, the
Moses n-best format, the i-j alignments, the scores of given translations; on stdout the
n-best lines or the 1-best with ' ||| ' and its alignment; a line not translated keeps its
place in every file; a decoding that fails keeps what it wrote of each file in OUT.partial."""
import pytest

from t2t_lite.decoding import output_files
from t2t_lite.decoding.output_files import DecodingOutputs, OutputForm
from t2t_lite.decoding.results import Hypothesis, TargetScore

FIRST = [Hypothesis([5, 6, 1], -0.25, -0.3, ((0, 0), (1, 1))),
         Hypothesis([5, 1], -1.5, -1.6, ((0, 0),))]
SECOND = [Hypothesis([7, 1], -0.125, -0.13, ((1, 0),)),
          Hypothesis([8, 1], -2.0, -2.1, ((0, 0),))]
TEXTS = [["a b", "a"], [], ["c", "d"]]
RESULTS = [FIRST, None, SECOND]
EVERYTHING = OutputForm(n_best=True, with_scores=True, alignments=True)


def test_the_files_of_an_n_best_decoding_with_scores_and_alignments(tmp_path):
    path = tmp_path / "out.txt"
    with DecodingOutputs(str(path), 3, EVERYTHING) as written:
        written.write(0, TEXTS[:2], RESULTS[:2])
        written.write(2, TEXTS[2:], RESULTS[2:])
    assert written.translations == ["a b", "", "c"]
    assert path.read_text() == "a b\t-0.250000\n\t\nc\t-0.125000\n"
    assert (tmp_path / "out.txt.nbest").read_text() == (
        "0 ||| a b ||| -0.250000\n0 ||| a ||| -1.500000\n1 |||  ||| \n"
        "2 ||| c ||| -0.125000\n2 ||| d ||| -2.000000\n")
    assert (tmp_path / "out.txt.align").read_text() == "0-0 1-1\n\n1-0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "out.txt.align",
                                                          "out.txt.nbest"]


def test_stdout_has_the_n_best_lines_with_their_alignments(capsys):
    with DecodingOutputs(None, 3, EVERYTHING) as written:
        written.write(0, TEXTS, RESULTS)
    assert capsys.readouterr().out.splitlines() == [
        "0 ||| a b ||| -0.250000 ||| 0-0 1-1", "0 ||| a ||| -1.500000 ||| 0-0",
        "1 |||  |||  ||| ", "2 ||| c ||| -0.125000 ||| 1-0", "2 ||| d ||| -2.000000 ||| 0-0"]
    with DecodingOutputs(None, 3, OutputForm(alignments=True)) as written:
        written.write(0, TEXTS, RESULTS)
    assert capsys.readouterr().out.splitlines() == ["a b ||| 0-0 1-1", " ||| ", "c ||| 1-0"]


def test_a_failed_decoding_keeps_each_file_s_lines_in_its_partial(tmp_path):
    path = tmp_path / "out.txt"
    with pytest.raises(KeyboardInterrupt):
        with DecodingOutputs(str(path), 3, EVERYTHING) as written:
            written.write(0, TEXTS[:1], RESULTS[:1])
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "out.txt.align.partial", "out.txt.nbest.partial", "out.txt.partial"]
    assert (tmp_path / "out.txt.partial").read_text() == "a b\t-0.250000\n"
    assert (tmp_path / "out.txt.nbest.partial").read_text().count("\n") == 2


def test_target_score_lines():
    assert output_files.target_score_line(TargetScore(-3.0, 4)) == "-3.000000\t4\t-0.750000"
    assert output_files.target_score_line(None) == ""
