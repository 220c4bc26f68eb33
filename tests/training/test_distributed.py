"""Training under tf.distribute with XLA: MirroredStrategy over two logical CPU devices in one
process, and MultiWorkerMirroredStrategy over two trainer processes on 127.0.0.1 (the README's
TF_CONFIG launch). Both see the same global batches, so they end with the same weights."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from program_runs import NO_DROPOUT, TINY, joined, program_command


HPARAMS = joined(TINY, NO_DROPOUT)
STEPS = 4

MIRRORED = textwrap.dedent("""
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from absl import logging
    logging.set_verbosity(logging.INFO)
    from t2t_lite import registry
    from t2t_lite.training import trainer
    data, out, hparams, steps = sys.argv[1:5]
    hparams = registry.hparams("transformer_tiny").override_from_string(hparams)
    trainer.train("algorithmic_copy", "transformer", hparams, data, out,
                  trainer.RunConfig(train_steps=int(steps), eval_every=2, eval_steps=1,
                                    save_checkpoints_steps=2, log_every_steps=2,
                                    jit_compile=True))  # XLA under MirroredStrategy (a GPU's default)
""")


@pytest.fixture(scope="module")
def mirrored_run(data_dir, tmp_path_factory):
    output_dir = str(tmp_path_factory.mktemp("mirrored"))
    result = subprocess.run([sys.executable, "-c", MIRRORED, data_dir, output_dir, HPARAMS,
                             str(STEPS)], capture_output=True, text=True, timeout=600)
    return output_dir, result.returncode, result.stdout + result.stderr


def model_weights(output_dir, step):
    reader = tf.train.load_checkpoint(os.path.join(output_dir, f"model.ckpt-{step}"))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if key.startswith("model/")}


def test_trains_on_two_replicas_with_xla(mirrored_run):
    _, returncode, output = mirrored_run
    assert returncode == 0, output
    assert "2 replicas, XLA on" in output
    assert f"step {STEPS}/{STEPS}" in output and f"model.ckpt-{STEPS}" in output


def test_two_worker_processes_train_like_two_local_replicas(data_dir, mirrored_run, tmp_path,
                                                            free_ports):
    output_dir = str(tmp_path / "workers")
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        workers.append(subprocess.Popen(
            program_command("trainer", "--problem=algorithmic_copy",
                            "--hparams_set=transformer_tiny", f"--hparams={HPARAMS}",
                            f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                            f"--train_steps={STEPS}", "--eval_every=2", "--eval_steps=1",
                            "--save_checkpoints_steps=2", "--log_every_steps=2",
                            "--eval_bleu_sentences=5", "--jit_compile",
                            # The best checkpoint's save is collective too.
                            "--keep_best=bleu", f"--early_stopping_patience={STEPS}"),
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for worker in workers:
        try:
            outputs.append(worker.communicate(timeout=600)[0])
        finally:
            worker.kill()
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output
        assert "2 replicas, XLA on" in output and f"step {STEPS}/{STEPS}" in output
    chief, other = outputs
    assert "dev BLEU" in chief and "dev BLEU" not in other  # callbacks run on the chief only
    # The chief alone writes TensorBoard events and checkpoints into output_dir.
    assert len(os.listdir(os.path.join(output_dir, "train"))) == 1
    with open(os.path.join(output_dir, "best", "best.json")) as handle:
        kept = json.load(handle)
    assert os.path.exists(os.path.join(output_dir, "best", kept["checkpoint"] + ".index"))
    assert [name for name in os.listdir(output_dir) if name.startswith(".")] == []
    mirrored_dir, returncode, output = mirrored_run
    assert returncode == 0, output
    expected = model_weights(mirrored_dir, STEPS)
    weights = model_weights(output_dir, STEPS)
    assert weights.keys() == expected.keys()
    for key in expected:
        np.testing.assert_allclose(weights[key], expected[key], rtol=1e-5, atol=1e-6,
                                   err_msg=key)
