"""XLA only where it pays (GPUs, TPUs), and length_bucketing "auto" following it."""
import types

import tensorflow as tf

from t2t_lite.hparams_lib import HParams
from t2t_lite.training import trainer


def strategy_on(*devices):
    return types.SimpleNamespace(extended=types.SimpleNamespace(worker_devices=devices))


def logical_devices(*names):
    return lambda device_type=None: [types.SimpleNamespace(name=name) for name in names]


def test_the_default_strategy_follows_the_devices_tensorflow_places_on(monkeypatch):
    """The default strategy names no devices: TensorFlow places ops on a GPU if there is one.
    The host's devices are replaced here, so that the test passes on any host."""
    default = tf.distribute.get_strategy()
    monkeypatch.setattr(tf.config, "list_logical_devices",
                        logical_devices("/device:CPU:0"))
    assert not trainer.xla_pays(default)
    monkeypatch.setattr(tf.config, "list_logical_devices",
                        logical_devices("/device:CPU:0", "/device:GPU:0"))
    assert trainer.xla_pays(default)


def test_xla_on_accelerators_only():
    assert not trainer.xla_pays(strategy_on("/job:localhost/replica:0/task:0/device:CPU:0",
                                            "/job:localhost/replica:0/task:0/device:CPU:1"))
    assert trainer.xla_pays(strategy_on("/job:worker/replica:0/task:0/device:GPU:0"))
    assert trainer.xla_pays(strategy_on("/job:worker/replica:0/task:0/device:TPU:0"))


def test_auto_length_bucketing_follows_xla_and_explicit_values_stay():
    assert HParams().length_bucketing == "auto"
    assert trainer.length_bucketing_for(HParams(), jit_compile=False) == "each"
    assert trainer.length_bucketing_for(HParams(), jit_compile=True) == "longer"
    for explicit in ("each", "longer"):
        for jit_compile in (False, True):
            hparams = HParams(length_bucketing=explicit)
            assert trainer.length_bucketing_for(hparams, jit_compile) == explicit
