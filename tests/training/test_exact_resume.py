"""A run stopped at a checkpoint and resumed trains as the run that went on, dropout on: the
same loss at every step after the resume and the same weights at the end, with batches
accumulated into each update and on two replicas (MirroredStrategy over two logical CPUs). (On
one replica: tests/training/test_resume_after_kill.py.) transformer_tiny's dropouts (0.1) are
left on. The stopped run is the folder of the run that went on as it was when its checkpoint
STOP was saved (what a kill then leaves)."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from program_runs import SMALL, joined

HPARAMS = joined(SMALL, "learning_rate_warmup_steps=20")
STEPS, STOP = 6, 3

SCRIPT = textwrap.dedent("""
    import json
    import os
    import shutil
    import sys
    import keras
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from t2t_lite import checkpoints, registry
    from t2t_lite.training import trainer

    data_dir, output_dir, hparams, steps, stop = sys.argv[1:6]
    steps, stop = int(steps), int(stop)

    class Losses(keras.callbacks.Callback):
        # {step: the loss summed over that update's tokens}; logs sum over an epoch.

        def __init__(self, into):
            super().__init__()
            self.into = into
            self.summed = 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self.summed = 0.0

        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            self.into[step] = float(logs["loss_sum"]) - self.summed
            self.summed = float(logs["loss_sum"])

    class CopyAt(keras.callbacks.Callback):
        # Copies the run's folder before update `step` + 1: checkpoint `step` saved, no more.

        def __init__(self, folder, step, into):
            super().__init__()
            self.folder, self.step, self.into = folder, step, into

        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == self.step:
                shutil.copytree(self.folder, self.into)
                # This process is alive: its lock would refuse the resume (a killed run's is
                # taken over, tests/training/test_resume_after_kill.py).
                os.remove(os.path.join(self.into, "t2t_lite.lock"))

    def train(folder, train_steps, devices, accumulate, callbacks):
        overrides = hparams + f",optimizer_multistep_accumulate_steps={accumulate}"
        config = trainer.RunConfig(train_steps=train_steps, eval_every=1, eval_steps=0,
                                   save_checkpoints_steps=1, log_every_steps=100,
                                   devices=devices)
        keras.backend.clear_session()  # the names of a first run's variables, as in a new process
        trainer.train("algorithmic_copy", "transformer",
                      registry.hparams("transformer_tiny").override_from_string(overrides),
                      data_dir, folder, config, callbacks)

    def weights(folder):
        reader = checkpoints.reader(f"{folder}/model.ckpt-{steps}")
        return {key: reader.get_tensor(key).tolist()
                for key in reader.get_variable_to_shape_map() if checkpoints.is_model_key(key)}

    results = {}
    for name, devices, accumulate in (("two batches per update", ("CPU:0",), 2),
                                      ("two replicas", ("CPU:0", "CPU:1"), 1)):
        straight, resumed = {}, {}
        folders = {run: f"{output_dir}/{name}/{run}" for run in ("straight", "resumed")}
        train(folders["straight"], steps, devices, accumulate,
              [Losses(straight), CopyAt(folders["straight"], stop, folders["resumed"])])
        train(folders["resumed"], steps, devices, accumulate, [Losses(resumed)])
        results[name] = {"straight": straight, "resumed": resumed,
                         "weights": [weights(f"{output_dir}/{name}/{run}")
                                     for run in ("straight", "resumed")]}
    print("RESULT " + json.dumps(results))
""")


@pytest.fixture(scope="module")
def runs(data_dir, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("exact_resume")
    done = subprocess.run([sys.executable, "-c", SCRIPT, data_dir, str(output_dir), HPARAMS,
                           str(STEPS), str(STOP)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("RESULT ", 1)[1])


@pytest.mark.parametrize("name", ["two batches per update", "two replicas"])
def test_a_resumed_run_with_dropout_trains_as_the_uninterrupted_one(runs, name):
    straight, resumed = runs[name]["straight"], runs[name]["resumed"]
    assert sorted(int(step) for step in straight) == list(range(1, STEPS + 1))
    assert sorted(int(step) for step in resumed) == list(range(STOP + 1, STEPS + 1))
    for step in range(STOP + 1, STEPS + 1):
        assert resumed[str(step)] == pytest.approx(straight[str(step)], rel=1e-5), step
    first, second = runs[name]["weights"]
    assert first.keys() == second.keys() and first
    for key in first:
        np.testing.assert_allclose(second[key], first[key], rtol=1e-5, atol=1e-6, err_msg=key)
