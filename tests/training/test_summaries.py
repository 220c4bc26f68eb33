"""The learning-rate picture and the progress lines' duration format."""
import matplotlib.image
import numpy as np

from t2t_lite import registry
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
