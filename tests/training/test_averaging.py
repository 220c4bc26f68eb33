"""Checkpoint averaging (paper §6.1): the model variables of the last k checkpoints, averaged
element by element, restore into a fresh model and load in the decoder."""
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import checkpoints
from t2t_lite.checkpoints import CheckpointError
from t2t_lite.models import restoring
from t2t_lite.models.building import build_model
from t2t_lite.storage.run_description import save_run_description, saved_run
from t2t_lite.training import averaging, trainer

from program_runs import TINY_MODEL, error_lines, hparams_of, run, run_program, trainer_flags

VOCAB_SIZE = 12


def tiny_hparams():
    return hparams_of(TINY_MODEL)


def fresh_model():
    return build_model("transformer", tiny_hparams(), VOCAB_SIZE)


def model_values(model):
    return {path: weight.numpy() for path, weight in checkpoints.model_variables(model).items()}


@pytest.fixture(scope="module")
def output_dir(tmp_path_factory):
    """Three checkpoints (steps 10, 20, 30) whose every weight is all 1, 2 and 6."""
    output_dir = str(tmp_path_factory.mktemp("train"))
    model = fresh_model()
    optimizer = trainer.make_optimizer(tiny_hparams())
    optimizer.build(model.trainable_variables)
    manager = checkpoints.make_manager(output_dir, model, optimizer)
    for step, value in ((10, 1.0), (20, 2.0), (30, 6.0)):
        for weight in model.weights:
            weight.assign(np.full(weight.shape, value, weight.dtype))
        manager.save(checkpoint_number=step)
    save_run_description(output_dir, "algorithmic_copy", "transformer", tiny_hparams(),
                         {"data_dir": "", "vocab_size": 12, "files": []})
    return output_dir


@pytest.mark.parametrize("num_last, mean", [(2, 4.0), (3, 3.0)])  # (2+6)/2, (1+2+6)/3
def test_average_restores_the_mean(output_dir, tmp_path, num_last, mean):
    out = averaging.average_checkpoints(output_dir, num_last, str(tmp_path / "avg" / "model.ckpt"))
    model = fresh_model()
    checkpoints.restore(out, model)
    values = model_values(model)
    assert len(values) == 35
    for path, value in values.items():
        np.testing.assert_allclose(value, np.full(value.shape, mean), err_msg=path)


def test_average_holds_only_the_model(output_dir, tmp_path):
    out = averaging.average_checkpoints(output_dir, 2, str(tmp_path / "model.ckpt"))
    keys = tf.train.load_checkpoint(out).get_variable_to_shape_map()
    stored = {checkpoints.variable_path(key) for key in keys
              if checkpoints.is_model_key(key)}
    assert stored == set(model_values(fresh_model()))
    assert not any(key.startswith("optimizer/") for key in keys)
    assert not [name for name in os.listdir(tmp_path) if ".incomplete" in name]
    assert os.path.exists(tmp_path / "hparams.json")  # the decoder's --output_dir works here


def test_variable_path_unescapes_the_key():
    key = "model/transformer.Sencoder_layer_0.Sa..b/.ATTRIBUTES/VARIABLE_VALUE"
    assert checkpoints.variable_path(key) == "transformer/encoder_layer_0/a.b"
    assert checkpoints.checkpoint_key("transformer/encoder_layer_0/a.b") == key


def test_too_few_or_no_checkpoints(output_dir, tmp_path):
    with pytest.raises(CheckpointError, match=rf"{output_dir} has 3 checkpoints, fewer than "
                                              rf"the 4 to average: model.ckpt-10"):
        averaging.average_checkpoints(output_dir, 4, str(tmp_path / "model.ckpt"))
    with pytest.raises(CheckpointError, match=f"no checkpoints in {tmp_path}"):
        averaging.average_checkpoints(str(tmp_path), 1, str(tmp_path / "model.ckpt"))
    assert not os.path.exists(tmp_path / "model.ckpt.index")


def test_cli_result_loads_in_the_decoder(output_dir, tmp_path):
    out = str(tmp_path / "averaged.ckpt")
    result = run_program("avg_checkpoints", f"--output_dir={output_dir}", "--num_last=2",
                         f"--out={out}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "averaged 2 checkpoints" in result.stdout
    assert "model.ckpt-20" in result.stdout and "model.ckpt-30" in result.stdout
    assert f"into {out}" in result.stdout

    run = saved_run(output_dir)
    keras.backend.clear_session()
    model = restoring.load_model(run["model"], run["hparams"], VOCAB_SIZE, output_dir,
                                 checkpoint_path=out)
    for path, value in model_values(model).items():
        np.testing.assert_allclose(value, np.full(value.shape, 4.0), err_msg=path)

    failed = run_program("avg_checkpoints", f"--output_dir={output_dir}", "--num_last=9",
                         f"--out={out}")
    assert failed.returncode == 2
    assert f"error: {output_dir} has 3 checkpoints, fewer than the 9" in failed.stderr


def test_checkpoints_of_two_runs_are_not_averaged(data_dir, trained_dir, tmp_path):
    """Two runs with the same hparams: model.ckpt-1 of one and model.ckpt-2 of the other in
    one folder are refused with one error naming each run's checkpoints, nothing written."""
    other_run = tmp_path / "other"
    code, out = run("trainer", *trainer_flags(data_dir, other_run, 2))
    assert code == 0, out
    mixed = tmp_path / "mixed"
    shutil.copytree(trained_dir, mixed)
    for path in other_run.glob("model.ckpt-2.*"):
        shutil.copy(path, mixed / path.name)
    out_path = tmp_path / "averaged" / "model.ckpt"
    result = run_program("avg_checkpoints", f"--output_dir={mixed}", "--num_last=2",
                         f"--out={out_path}")
    assert result.returncode == 2, result.stdout + result.stderr
    ids = [checkpoints.run_id_of(str(path)) for path in (trained_dir / "model.ckpt-1",
                                                         other_run / "model.ckpt-2")]
    assert error_lines(result.stderr) == [
        f"error: the checkpoints to average are of different runs ({mixed}/model.ckpt-1 of run "
        f"{ids[0]}; {mixed}/model.ckpt-2 of run {ids[1]}): the weights of two runs do not "
        f"average into a model; average the checkpoints of one run"], result.stderr
    assert not (tmp_path / "averaged").exists()


def test_a_resumed_run_keeps_its_run_id(data_dir, trained_dir, tmp_path):
    resumed = tmp_path / "run"
    shutil.copytree(trained_dir, resumed)
    code, out = run("trainer", *trainer_flags(data_dir, resumed, 3))
    assert code == 0, out
    run_ids = {checkpoints.run_id_of(str(resumed / f"model.ckpt-{step}")) for step in (1, 2, 3)}
    assert len(run_ids) == 1 and None not in run_ids
