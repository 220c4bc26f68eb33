"""The SavedModel's "score" signature (OpenNMT-tf's `onmt-main score` in the graph) and its
"n_best" signature (t2t's return_beams): the trained copy model exported once by export.export,
and loaded here and in one fresh process; its log-likelihoods are decoding.scoring's of the
same ids, those of the model's own translations are serving_default's beam scores times the
length penalty, a pair that cannot be scored fails alone; n_best's first is serving_default's
translation, its N distinct and in score order, each with the raw log probability that "score"
gives it."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data.vocab import EOS_ID
from t2t_lite.models import restoring
from t2t_lite.decoding.scoring import target_log_likelihoods
from t2t_lite.decoding.search import SearchHParams

SEARCH = SearchHParams(beam_size=4, alpha=0.6)
# Pairs of which the first alone is scored: an unencodable source, a blank one, an unencodable
# target.
MIXED = (["3 7 1", "abc 99", "", "2 2"], ["3 7 1", "3", "3", "2 x"])


@pytest.fixture(scope="module")
def exported(trained_copy_model):
    """(export_dir, the trained model, its encoders, the first 30 test lines): export.export of
    the copy model with SEARCH, to a folder of this module's beside its output_dir. In float32
    (the run records bfloat16 where the CPU has it): bfloat16 rounds the one pass of scoring
    and the search's steps differently, by about 1e-3."""
    from t2t_lite.serving.export import export
    from t2t_lite.decoding.trained_model import TrainedRun
    data_dir, output_dir, hparams = trained_copy_model
    export_dir = os.path.join(os.path.dirname(output_dir), "export_signatures", "1")
    export(TrainedRun(output_dir, "algorithmic_copy", "transformer", hparams, data_dir),
           export_dir, SEARCH)
    problem = registry.problem("algorithmic_copy")
    model = restoring.load_model("transformer", hparams, problem.vocab_size(data_dir), output_dir)
    with open(os.path.join(data_dir, "algorithmic_copy-test.inputs.txt")) as handle:
        lines = handle.read().splitlines()[:30]
    return export_dir, model, problem.feature_encoders(data_dir), lines


@pytest.fixture(scope="module")
def signatures(exported):
    return tf.saved_model.load(exported[0]).signatures


def score(signatures, inputs, targets):
    """The score signature's (log_likelihood, pieces) as lists."""
    result = signatures["score"](inputs=tf.constant(inputs), targets=tf.constant(targets))
    assert result["log_likelihood"].dtype == tf.float32 and result["pieces"].dtype == tf.int32
    return result["log_likelihood"].numpy().tolist(), result["pieces"].numpy().tolist()


def ids(vocabulary, lines):
    """Python's ids of lines: the pieces, EOS, 0-padding."""
    rows = [vocabulary.encode(line) + [EOS_ID] for line in lines]
    return np.array([row + [0] * (max(map(len, rows)) - len(row)) for row in rows], np.int32)


def test_the_signatures_are_serving_default_n_best_and_score(signatures):
    assert sorted(signatures.keys()) == ["n_best", "score", "serving_default"]
    assert sorted(signatures["n_best"].structured_outputs) == ["log_probs", "outputs", "scores"]
    assert sorted(signatures["score"].structured_input_signature[1]) == ["inputs", "targets"]
    assert sorted(signatures["score"].structured_outputs) == ["log_likelihood", "pieces"]


def test_the_scores_are_scorings_of_the_same_ids(exported, signatures):
    """The lines with their own copies and with other lines' (improbable translations)."""
    _, model, encoders, lines = exported
    targets = lines[:15] + lines[15:][::-1]
    log_likelihood, pieces = score(signatures, lines, targets)
    expected = target_log_likelihoods(model, ids(encoders["inputs"], lines),
                                      ids(encoders["targets"], targets))
    np.testing.assert_allclose(log_likelihood, expected[0].numpy(), atol=1e-4)
    assert pieces == expected[1].numpy().tolist() == [len(t.split()) + 1 for t in targets]
    assert min(log_likelihood[15:]) < -1 < max(log_likelihood[:15])


def test_own_translations_score_their_beam_scores_times_the_length_penalty(exported,
                                                                          signatures):
    lines = exported[3]
    translated = signatures["serving_default"](inputs=tf.constant(lines))
    outputs = [text.decode("utf-8") for text in translated["outputs"].numpy()]
    log_likelihood, pieces = score(signatures, lines, outputs)
    penalty = ((5.0 + np.array(pieces)) / 6.0) ** SEARCH.alpha
    np.testing.assert_allclose(log_likelihood, translated["scores"].numpy() * penalty,
                               atol=1e-4)


def test_a_pair_that_cannot_be_scored_fails_alone(signatures):
    log_likelihood, pieces = score(signatures, *MIXED)
    alone = score(signatures, MIXED[0][:1], MIXED[1][:1])
    assert log_likelihood[0] == pytest.approx(alone[0][0], abs=1e-5) and -1 < alone[0][0] < 0
    assert log_likelihood[1:] == [float("-inf")] * 3
    assert pieces == [4, 0, 0, 0]
    assert score(signatures, ["", "x"], ["1", "1"]) == ([float("-inf")] * 2, [0, 0])


def test_a_blank_target_scores_its_eos_alone_as_the_decoder_does(exported, signatures):
    from t2t_lite.decoding.decoder import Translator
    _, model, encoders, _ = exported
    log_likelihood, pieces = score(signatures, ["3 7 1", "3 7 1", "2 2"], ["", "  ", "2 2"])
    decoded = [result for _, window in Translator(model, encoders).score_in_order(
        ["3 7 1", "3 7 1"], ["", "  "], show_progress=False) for result in window]
    assert pieces[:2] == [target.pieces for target in decoded] == [1, 1]
    np.testing.assert_allclose(log_likelihood[:2], [target.log_likelihood
                                                    for target in decoded], atol=1e-4)
    assert log_likelihood[0] < 0 and pieces[2] == 3


def test_a_long_target_is_cut_to_max_length_with_eos(signatures):
    """max_length - 1 pieces and EOS, as source_ids cuts sources."""
    max_length = registry.problem("algorithmic_copy").max_length
    cut = score(signatures, ["3 3"], [" ".join(["3"] * (max_length + 9))])
    assert cut[1] == [max_length]
    as_cut = score(signatures, ["3 3"], [" ".join(["3"] * (max_length - 1))])
    assert cut[0] == pytest.approx(as_cut[0], abs=1e-5) and cut[1] == as_cut[1]


def test_a_fresh_process_scores_as_this_one(exported, signatures, tmp_path):
    """docs/serving.md's call, in a process that imports nothing of t2t_lite."""
    scored = str(tmp_path / "scored.json")
    script = textwrap.dedent(f"""
        import json
        import tensorflow as tf
        loaded = tf.saved_model.load({exported[0]!r})
        result = loaded.signatures["score"](inputs=tf.constant({MIXED[0]!r}),
                                            targets=tf.constant({MIXED[1]!r}))
        json.dump({{key: value.numpy().tolist() for key, value in result.items()}},
                  open({scored!r}, "w"))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    with open(scored) as handle:
        fresh = json.load(handle)
    log_likelihood, pieces = score(signatures, *MIXED)
    assert fresh["pieces"] == pieces
    assert fresh["log_likelihood"] == pytest.approx(log_likelihood, abs=1e-6)


def test_n_best_begins_with_the_default_and_its_log_probs_are_the_scores(exported,
                                                                        signatures):
    """The whole beam (SEARCH's 4) of each line: the first is serving_default's translation
    with its score, the 4 are distinct and in score order, and each one's log_probs is what the
    score signature gives the pair (1e-4, float32); a sentence not searched gets "" and -inf."""
    lines = exported[3][:10] + [""]
    found = signatures["n_best"](inputs=tf.constant(lines))
    outputs = found["outputs"].numpy().astype(str)
    scores, log_probs = found["scores"].numpy(), found["log_probs"].numpy()
    assert outputs.shape == scores.shape == (len(lines), SEARCH.beam_size)
    default = signatures["serving_default"](inputs=tf.constant(lines))
    assert outputs[:, 0].tolist() == default["outputs"].numpy().astype(str).tolist()
    np.testing.assert_allclose(scores[:, 0], default["scores"].numpy(), atol=1e-5)
    for row, row_scores in zip(outputs[:-1], scores[:-1]):
        assert len(set(row)) == SEARCH.beam_size
        assert list(row_scores) == sorted(row_scores, reverse=True)
    assert outputs[-1].tolist() == [""] * SEARCH.beam_size and np.all(scores[-1] == -np.inf)
    sources = [line for line in lines[:-1] for _ in range(SEARCH.beam_size)]
    log_likelihood, _ = score(signatures, sources, outputs[:-1].reshape(-1).tolist())
    np.testing.assert_allclose(log_probs[:-1].reshape(-1), log_likelihood, atol=1e-4)
