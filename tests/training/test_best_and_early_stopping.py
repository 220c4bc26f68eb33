"""--keep_best and --early_stopping_patience on a run whose dev BLEU rises then falls (a metric
that reports a scripted BLEU by step, through the DevMetric interface DevBleu uses): O/best
holds the peak's weights (equal to the trainer's own checkpoint of that step) and best.json its
step and score, training stops after the patience with one line and a checkpoint at the stop
step, a rerun says it stopped and trains no more, and a run killed with SIGKILL between two
evaluations and resumed leaves the same O/best and stops at the same step. A setting that
follows a measure no evaluation takes is refused before anything is written."""
import dataclasses
import json
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import checkpoints
from t2t_lite.training import best, trainer
from t2t_lite.training.loop import DevMetric
from t2t_lite.training.signals import SignalWatch, StoppedBySignal

from program_runs import TINY, file_hashes, hparams_of, run

# Dev BLEU by step: it rises to 30 at step 10, then falls for 3 evaluations (patience 3).
BLEU = {2: 10.0, 4: 20.0, 6: 25.0, 8: 24.0, 10: 30.0, 12: 29.0, 14: 28.0, 16: 27.0,
        18: 50.0, 20: 60.0}
PEAK, STOP, PATIENCE = 10, 16, 3
KILLED_AT = 11  # after the evaluation of step 10 (a new best), before checkpoint 12


class ScriptedBleu(DevMetric):
    """val_bleu from BLEU at each evaluation's step."""
    names = ("val_bleu",)

    def measure(self, model, step):
        return {"val_bleu": BLEU[step]}


def config(save_every: int = 2) -> trainer.RunConfig:
    return trainer.RunConfig(train_steps=20, eval_every=2, eval_steps=1,
                             save_checkpoints_steps=save_every, log_every_steps=100,
                             keep_best="bleu", early_stopping_patience=PATIENCE)


def train(data_dir, output_dir, run_config, callbacks=(), signal_watch=None):
    keras.backend.clear_session()  # the variables' names of a new process
    trainer.train("algorithmic_copy", "transformer", hparams_of(TINY), data_dir,
                  str(output_dir), run_config, [ScriptedBleu(), *callbacks],
                  signal_watch=signal_watch)


def model_weights(checkpoint: str) -> dict:
    reader = checkpoints.reader(checkpoint)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if checkpoints.is_model_key(key)}


def best_record(output_dir) -> dict:
    return json.loads((output_dir / "best" / "best.json").read_text())


@pytest.fixture(scope="module")
def straight(data_dir, tmp_path_factory):
    """(output_dir, the lines best.py logged) of the uninterrupted run."""
    output_dir = tmp_path_factory.mktemp("best") / "straight"
    lines = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(best.logging, "info", lambda text, *args: lines.append(text % args))
        train(data_dir, output_dir, config())
    return output_dir, lines


def test_the_peak_is_kept_and_training_stops_after_the_patience(straight):
    output_dir, lines = straight
    record = best_record(output_dir)
    assert (record["metric"], record["step"], record["score"]) == ("bleu", PEAK, BLEU[PEAK])
    assert [entry["step"] for entry in record["evaluations"]] == list(range(2, PEAK + 1, 2))
    assert [entry["val_bleu"] for entry in record["evaluations"]] == [
        BLEU[step] for step in range(2, PEAK + 1, 2)]
    kept = checkpoints.resolve(str(output_dir), str(output_dir / "best"))
    assert kept == f"{output_dir}/best/model.ckpt-{PEAK}"
    # The best before the peak stays beside it (a kill between the two writes loses neither).
    before = max((step for step in range(2, PEAK, 2)), key=lambda step: (BLEU[step], -step))
    assert checkpoints.existing_checkpoints(str(output_dir / "best")) == sorted(
        [f"{output_dir}/best/model.ckpt-{before}", kept])
    peak = model_weights(kept)
    own = model_weights(f"{output_dir}/model.ckpt-{PEAK}")
    assert peak.keys() == own.keys() and peak
    assert all(np.array_equal(peak[key], own[key]) for key in own)
    assert checkpoints.run_id_of(kept) == checkpoints.run_id_of(f"{output_dir}/model.ckpt-{PEAK}")
    last = model_weights(f"{output_dir}/model.ckpt-{STOP}")
    assert any(not np.array_equal(peak[key], last[key]) for key in own)  # not the last one
    assert checkpoints.latest(str(output_dir)) == f"{output_dir}/model.ckpt-{STOP}"
    recorded = json.loads((output_dir / "evaluations.json").read_text())["evaluations"]
    assert [entry["step"] for entry in recorded] == list(range(2, STOP + 1, 2))
    stops = [line for line in lines if line.startswith("stopping early")]
    assert stops == [f"stopping early at step {STOP}: {PATIENCE} evaluations in a row without "
                     f"an improvement of at least 0 in dev bleu over the best, "
                     f"{BLEU[PEAK]:.4f} at step {PEAK}"]
    kept_lines = [line for line in lines if "new best" in line]
    assert [line.split()[1] for line in kept_lines] == ["2", "4", "6", "10"]


def test_the_best_so_far_is_in_tensorboard(straight):
    output_dir, _ = straight
    points = {}
    for path in tf.io.gfile.glob(f"{output_dir}/eval/events.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "best_bleu":
                    points[event.step] = float(tf.make_ndarray(value.tensor))
    running = [max(BLEU[at] for at in range(2, step + 1, 2)) for step in range(2, STOP + 1, 2)]
    assert [points[step] for step in sorted(points)] == running
    assert sorted(points) == list(range(2, STOP + 1, 2))


def test_a_run_stopped_early_does_not_train_on(straight, tmp_path, data_dir):
    """It says so and writes nothing in O: no checkpoint, no TensorBoard event file."""
    output_dir = tmp_path / "again"
    shutil.copytree(straight[0], output_dir)
    before = checkpoints.existing_checkpoints(str(output_dir))
    files = file_hashes(output_dir)
    lines = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(best.logging, "info", lambda text, *args: lines.append(text % args))
        train(data_dir, output_dir, config())
    assert [line for line in lines if line.startswith("stopped early")] == [
        f"stopped early already at step {STOP}: {PATIENCE} evaluations in a row without an "
        f"improvement of at least 0 in dev bleu over the best, {BLEU[PEAK]:.4f} at step {PEAK} "
        f"(--early_stopping_patience={PATIENCE}); nothing to train"]
    assert checkpoints.existing_checkpoints(str(output_dir)) == before
    assert best_record(output_dir) == best_record(straight[0])
    assert file_hashes(output_dir) == files


def test_a_resume_removes_the_temporary_folders_of_killed_saves(straight, tmp_path, data_dir):
    """A save killed with SIGKILL leaves TensorFlow's model.ckpt-STEP_temp/ with the shards it
    was writing, in O/best as in O; the next run there removes them and keeps the rest."""
    output_dir = tmp_path / "killed_save"
    shutil.copytree(straight[0], output_dir)
    files = file_hashes(output_dir)
    leftovers = [output_dir / "best" / f"model.ckpt-{PEAK + 2}_temp",
                 output_dir / f"model.ckpt-{STOP + 2}_temp"]
    for leftover in leftovers:
        leftover.mkdir()
        (leftover / "part-00000-of-00001.index").write_bytes(b"half")
        (leftover / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"written")
    train(data_dir, output_dir, config())
    assert not any(leftover.exists() for leftover in leftovers)
    assert file_hashes(output_dir) == files


KILLED_RUN = textwrap.dedent("""
    import os, signal, sys
    import keras
    sys.path[:0] = [sys.argv[3], os.path.dirname(sys.argv[3])]  # this file, program_runs
    import test_best_and_early_stopping as test

    class KillAt(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == test.KILLED_AT:
                os.kill(os.getpid(), signal.SIGKILL)

    test.train(sys.argv[1], sys.argv[2], test.config(save_every=4), [KillAt()])
""")


def test_a_kill_between_evaluations_and_a_resume_change_nothing(straight, data_dir, tmp_path):
    output_dir = tmp_path / "killed"
    tests_dir = str(pathlib.Path(__file__).parent)
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, data_dir, str(output_dir),
                             tests_dir], capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-3000:]
    # Killed after best and the record took step 10, before the checkpoint of step 12.
    assert best_record(output_dir)["step"] == PEAK
    assert checkpoints.latest(str(output_dir)) == f"{output_dir}/model.ckpt-8"

    train(data_dir, output_dir, config(save_every=4))
    expected, record = best_record(straight[0]), best_record(output_dir)
    assert ({key: record[key] for key in ("metric", "step", "score", "checkpoint")} ==
            {key: expected[key] for key in ("metric", "step", "score", "checkpoint")})
    assert [(entry["step"], entry["val_bleu"]) for entry in record["evaluations"]] == [
        (entry["step"], entry["val_bleu"]) for entry in expected["evaluations"]]
    assert [entry["val_loss"] for entry in record["evaluations"]] == pytest.approx(
        [entry["val_loss"] for entry in expected["evaluations"]], rel=1e-5)
    weights = model_weights(f"{output_dir}/best/model.ckpt-{PEAK}")
    reference = model_weights(f"{straight[0]}/best/model.ckpt-{PEAK}")
    assert weights.keys() == reference.keys()
    for key in reference:
        np.testing.assert_allclose(weights[key], reference[key], rtol=1e-5, atol=1e-6,
                                   err_msg=key)
    assert checkpoints.latest(str(output_dir)) == f"{output_dir}/model.ckpt-{STOP}"
    recorded = json.loads((output_dir / "evaluations.json").read_text())["evaluations"]
    assert [entry["step"] for entry in recorded] == list(range(2, STOP + 1, 2))


@pytest.mark.parametrize("settings, flags", [
    (dict(keep_best="bleu"), "--keep_best=bleu follows the dev BLEU, which no evaluation "
                             "measures: set --eval_bleu_sentences > 0"),
    (dict(keep_best="loss", eval_steps=0), "--keep_best=loss follows the dev loss, which no "
                                           "evaluation measures with --eval_steps=0: set "
                                           "--eval_steps > 0"),
    (dict(early_stopping_patience=2, eval_steps=0),
     "--early_stopping_patience=2 follows the dev loss, which no evaluation measures with "
     "--eval_steps=0: set --eval_steps > 0 (or --keep_best=bleu)")])
def test_a_measure_no_evaluation_takes_is_refused_before_anything_is_written(
        data_dir, tmp_path, settings, flags):
    output_dir = tmp_path / "refused"
    with pytest.raises(best.EvaluationSettingsError) as error:
        trainer.train("algorithmic_copy", "transformer", hparams_of(TINY), data_dir,
                      str(output_dir), trainer.RunConfig(train_steps=2, **settings))
    assert str(error.value) == flags
    assert not output_dir.exists()


@pytest.mark.parametrize("settings", [dict(keep_best="BLEU"), dict(early_stopping_patience=-1),
                                      dict(early_stopping_min_delta=-0.5)])
def test_run_config_refuses_unknown_settings(settings):
    with pytest.raises(ValueError):
        trainer.RunConfig(**settings)


def test_the_trainer_keeps_the_best_by_bleu_and_the_decoder_takes_it(data_dir, tmp_path):
    output_dir = tmp_path / "program"
    code, out = run("trainer", "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
                    f"--hparams={TINY}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                    "--train_steps=4", "--eval_every=2", "--eval_steps=1",
                    "--eval_bleu_sentences=4", "--save_checkpoints_steps=4",
                    "--keep_checkpoint_max=1", "--keep_best=bleu")
    assert code == 0, out
    record = best_record(output_dir)
    bleu = {int(step): float(score) for step, score in
            re.findall(r"step (\d+)  dev BLEU = ([\d.]+)", out)}
    assert sorted(bleu) == [2, 4]
    assert record["step"] == min(bleu, key=lambda step: (-bleu[step], step))
    assert record["score"] == pytest.approx(bleu[record["step"]], abs=0.01)
    assert "new best dev bleu" in out
    decoded = tmp_path / "decoded.txt"
    code, out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                    f"--checkpoint_path={output_dir}/best",
                    f"--decode_from_file={data_dir}/algorithmic_copy-test.inputs.txt",
                    f"--decode_to_file={decoded}")
    assert code == 0, out
    assert f"best/model.ckpt-{record['step']}" in out
    assert len(decoded.read_text().splitlines()) == 10


class StopAtOnce(keras.callbacks.Callback):
    """A SIGINT during the update that reaches `step` (given to the trainer's SignalWatch
    `watch`): training stops there, without the epoch's evaluation, the trainer's checkpoint
    of that step saved as training ends."""

    def __init__(self, step: int, watch):
        super().__init__()
        self.step, self.watch = step, watch

    def on_train_batch_begin(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step - 1:
            self.watch._received(signal.SIGINT, None)


def test_a_run_stopped_before_an_evaluation_evaluates_it_when_resumed(straight, data_dir,
                                                                       tmp_path):
    output_dir = tmp_path / "signalled"
    watch = SignalWatch()
    with pytest.raises(StoppedBySignal):
        train(data_dir, output_dir, config(), [StopAtOnce(PEAK, watch)], watch)
    assert checkpoints.latest(str(output_dir)) == f"{output_dir}/model.ckpt-{PEAK}"
    steps = [entry["step"] for entry in
             json.loads((output_dir / "evaluations.json").read_text())["evaluations"]]
    assert steps == list(range(2, PEAK, 2))  # the peak's evaluation did not run

    train(data_dir, output_dir, config())
    expected, record = best_record(straight[0]), best_record(output_dir)
    assert (record["step"], record["score"]) == (expected["step"], expected["score"]) == (
        PEAK, BLEU[PEAK])
    assert [entry["step"] for entry in record["evaluations"]] == list(range(2, PEAK + 1, 2))
    assert checkpoints.latest(str(output_dir)) == f"{output_dir}/model.ckpt-{STOP}"


def test_a_resume_with_another_keep_best_metric_is_refused(straight, tmp_path, data_dir):
    output_dir = tmp_path / "other_metric"
    shutil.copytree(straight[0], output_dir)
    other = dataclasses.replace(config(), keep_best="loss")
    with pytest.raises(best.EvaluationSettingsError, match=r"--keep_best=loss, but .*best "
                                                           r"holds the best by dev bleu"):
        train(data_dir, output_dir, other)
    assert best_record(output_dir) == best_record(straight[0])
