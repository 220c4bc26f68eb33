"""The learning-rate picture, the progress lines' duration format and their token rates."""
import re

import keras
import matplotlib.image
import numpy as np
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.training import summaries
from t2t_lite.training.summaries import format_duration, write_learning_rate_picture


def test_learning_rate_picture_is_a_png_with_a_curve(tmp_path):
    hparams = registry.hparams("transformer_base")
    path = write_learning_rate_picture(hparams, 20000, str(tmp_path / "learning_rate.png"))
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert np.std(image[..., :3]) > 0.01  # not blank
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learning_rate.png"]


def test_durations_read_like_clocks():
    assert format_duration(59) == "0m59s"
    assert format_duration(3 * 3600 + 61) == "3h01m01s"


class _Optimizer:
    def __init__(self):
        self.iterations = tf.Variable(0, dtype=tf.int64)


def test_progress_line_counts_target_and_source_tokens_per_second(monkeypatch):
    """Source tokens are the real tokens of both features less the target's, over the
    window since the last line: here 2 updates of 300 target and 500 real tokens each, in
    2 seconds, so 300 target and 200 source tokens a second."""
    clock = iter([100.0, 102.0])
    monkeypatch.setattr(summaries.time, "time", lambda: next(clock))
    lines = []
    monkeypatch.setattr(summaries.logging, "info", lambda text, *args: lines.append(text % args))
    monitor = summaries.TrainingMonitor(None, train_steps=10, log_every_steps=2,
                                        learning_rate=lambda step: 1e-3)
    model = keras.Model()
    model.optimizer = _Optimizer()
    monitor.set_model(model)
    monitor.on_epoch_begin(0)
    model.optimizer.iterations.assign(2)
    monitor.on_train_batch_end(1, {"loss_sum": 1200.0, "target_tokens": 600.0,
                                   "real_tokens": 1000.0, "padding_fraction": 0.1})
    assert re.search(r"step 2/10  loss 2\.0000  lr 0\.001  300 target tok/s  200 source tok/s  "
                     r"1\.00 steps/s", lines[0]), lines
