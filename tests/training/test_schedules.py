import math

import pytest

from t2t_lite import registry
from t2t_lite.hparams_lib import HParams
from t2t_lite.learning_rate_factors import LEARNING_RATE_FACTORS
from t2t_lite.training.schedules import LearningRateSchedule, learning_rate


def paper_rate(step, d=512, warmup=4000):
    """Paper §5.3, eq. 3."""
    return d ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def t2t_v3_rate(step, d=512, warmup=8000, constant=2.0):
    return constant * min(1.0, step / warmup) * max(step, warmup) ** -0.5 * d ** -0.5


@pytest.mark.parametrize("name, expected", [
    ("constant", 2.0),
    ("linear_warmup", 0.025),                      # 100 / 4000
    ("rsqrt_decay", 0.0158114),                    # max(100, 4000)^-0.5
    ("rsqrt_hidden_size", 0.0441942),              # 512^-0.5
    ("noam", 1.74693e-5),                          # 512^-0.5 * min(100^-0.5, 100 * 4000^-1.5)
])
def test_each_factor_by_hand_at_step_100(name, expected):
    hparams = HParams(hidden_size=512, learning_rate_warmup_steps=4000,
                      learning_rate_constant=2.0)
    assert float(LEARNING_RATE_FACTORS[name](100.0, hparams)) == pytest.approx(expected,
                                                                                rel=1e-5)
    assert float(learning_rate(100, hparams.replace(learning_rate_schedule=(name,)))) == (
        pytest.approx(expected, rel=1e-5))


@pytest.mark.parametrize("step", [1, 100, 3999, 4000, 4001, 10000, 100000])
def test_transformer_base_v1_follows_the_paper(step):
    hparams = registry.hparams("transformer_base_v1")
    assert float(learning_rate(step, hparams)) == pytest.approx(paper_rate(step), rel=1e-5)


@pytest.mark.parametrize("step", [1, 100, 7999, 8000, 8001, 20000, 100000])
def test_transformer_base_follows_t2t_v3(step):
    hparams = registry.hparams("transformer_base")
    assert float(learning_rate(step, hparams)) == pytest.approx(t2t_v3_rate(step), rel=1e-5)


def test_peak_rates():
    # 512^-0.5 * 4000^-0.5 = 0.044194 * 0.015811 = 6.988e-4
    assert float(learning_rate(4000, registry.hparams("transformer_base_v1"))) == pytest.approx(
        6.988e-4, rel=1e-3)
    # 2.0 * 8000^-0.5 * 512^-0.5 = 2 * 0.011180 * 0.044194 = 9.882e-4
    assert float(learning_rate(8000, registry.hparams("transformer_base"))) == pytest.approx(
        9.882e-4, rel=1e-3)


def test_single_gpu_schedule_has_no_hidden_size_factor():
    hparams = registry.hparams("transformer_base_single_gpu")
    assert float(learning_rate(16000, hparams)) == pytest.approx(0.1 / math.sqrt(16000), rel=1e-5)


def test_keras_schedule_uses_step_one_for_the_first_update():
    hparams = registry.hparams("transformer_base")
    schedule = LearningRateSchedule(hparams)
    assert float(schedule(0)) == pytest.approx(t2t_v3_rate(1), rel=1e-5)
    assert float(schedule(0)) > 0
    restored = LearningRateSchedule.from_config(schedule.get_config())
    assert float(restored(500)) == pytest.approx(float(schedule(500)))
