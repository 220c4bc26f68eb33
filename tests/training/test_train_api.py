"""t2t_lite.train, the Python API of the trainer: stock Keras callbacks in the loop (one that
reads the weights at every epoch end, and CSVLogger) beside --keep_best=bleu and early stopping
change nothing: the same O/best (weights and best.json) and the same stop step as the run
without them (its hparams given as a dict, the other's as a string). An unknown setting is one
error naming it, with a did-you-mean."""
import csv
import json

import keras
import numpy as np
import pytest

import t2t_lite
from t2t_lite import checkpoints
from t2t_lite.training.loop import DevMetric

from program_runs import TINY

# Dev BLEU by step (an evaluation every 10 updates): the peak at 30, then 2 evaluations
# without an improvement (patience 2) stop training at 50.
BLEU = {10: 10.0, 20: 20.0, 30: 30.0, 40: 25.0, 50: 24.0, 60: 40.0}
PEAK, STOP = 30, 50


class ScriptedBleu(DevMetric):
    names = ("val_bleu",)

    def measure(self, model, step):
        return {"val_bleu": BLEU[step]}


class ReadsWeights(keras.callbacks.Callback):
    """A user's callback: the model's weights (keras.Model.get_weights) at every epoch end."""

    def __init__(self):
        super().__init__()
        self.read = []

    def on_epoch_end(self, epoch, logs=None):
        self.read.append((int(self.model.optimizer.iterations.numpy()),
                          sum(float(np.abs(weight).sum()) for weight in self.model.get_weights())))


def train(data_dir, output_dir, *callbacks, hparams=TINY):
    keras.backend.clear_session()  # the variables' names of a new process
    return t2t_lite.train("algorithmic_copy", data_dir, str(output_dir),
                          hparams_set="transformer_tiny", hparams=hparams,
                          callbacks=[ScriptedBleu(), *callbacks], train_steps=100, eval_every=10,
                          eval_steps=1, eval_bleu_sentences=0, save_checkpoints_steps=10,
                          log_every_steps=100, keep_best="bleu", early_stopping_patience=2)


def model_weights(checkpoint: str) -> dict:
    reader = checkpoints.reader(checkpoint)
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if checkpoints.is_model_key(key)}


def test_stock_keras_callbacks_change_neither_the_best_nor_the_stop(data_dir, tmp_path):
    plain = train(data_dir, tmp_path / "plain")
    reads, log = ReadsWeights(), tmp_path / "log.csv"
    as_dict = dict(override.split("=") for override in TINY.split(","))  # the same hparams
    watched = train(data_dir, tmp_path / "watched", reads, keras.callbacks.CSVLogger(str(log)),
                    hparams=as_dict)
    assert plain.step == watched.step == STOP
    assert [entry["step"] for entry in watched.evaluations] == list(range(10, STOP + 1, 10))
    assert [entry["val_bleu"] for entry in watched.evaluations] == [
        BLEU[step] for step in range(10, STOP + 1, 10)]
    records = [json.loads((tmp_path / run / "best" / "best.json").read_text())
               for run in ("plain", "watched")]
    assert records[0]["step"] == records[1]["step"] == PEAK
    kept = [model_weights(str(tmp_path / run / "best" / f"model.ckpt-{PEAK}"))
            for run in ("plain", "watched")]
    assert kept[0].keys() == kept[1].keys() and kept[0]
    assert all(np.array_equal(kept[0][key], kept[1][key]) for key in kept[0])
    assert [step for step, _ in reads.read] == list(range(10, STOP + 1, 10))
    assert len({total for _, total in reads.read}) == len(reads.read)  # the weights trained
    with open(log, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(row["val_bleu"]) for row in rows] == [BLEU[step]
                                                        for step in range(10, STOP + 1, 10)]


def test_an_unknown_setting_is_named_with_a_did_you_mean(data_dir, tmp_path):
    with pytest.raises(TypeError, match=r"unknown setting 'train_step'\. Did you mean "
                                        r"'train_steps'\?"):
        t2t_lite.train("algorithmic_copy", data_dir, str(tmp_path / "out"), train_step=10)
    assert not (tmp_path / "out").exists()
