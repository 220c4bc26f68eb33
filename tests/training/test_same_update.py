"""The same global batch gives the same update: on 1 replica and on 2 (MirroredStrategy over two
logical CPUs, loss normalised by the global token count; with XLA and without it), and as one
batch or as two halves with gradient accumulation."""
import functools
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    if sys.argv[1] != "worker":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from t2t_lite import checkpoints, registry
    from t2t_lite.models.building import build_model
    from t2t_lite.training import trainer
    from t2t_lite.training.step import TrainingSteps

    HPARAMS = ("hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1,"
               "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0,"
               "learning_rate_warmup_steps=10")
    rng = np.random.default_rng(0)
    # Real tokens differ between the halves: the loss must be divided by the global count.
    inputs = rng.integers(2, 12, size=(4, 7)).astype(np.int32)
    targets = rng.integers(2, 12, size=(4, 7)).astype(np.int32)
    targets[0, 3:] = 0
    targets[1, 5:] = 0

    def one_update(strategy, accumulate, batches):
        hparams = registry.hparams("transformer_tiny").override_from_string(
            HPARAMS + f",optimizer_multistep_accumulate_steps={accumulate}")
        keras.utils.set_random_seed(7)
        with strategy.scope():
            model = build_model("transformer", hparams, 12)
            optimizer = trainer.make_optimizer(hparams)
        steps = TrainingSteps(model, optimizer, hparams, strategy,
                              jit_compile=os.environ.get("XLA", "1") == "1")
        data = tf.data.Dataset.from_tensor_slices(
            {"inputs": np.stack([b[0] for b in batches]),
             "targets": np.stack([b[1] for b in batches])})
        counts = [steps.train_step(batch) for batch in steps.distribute(data)]
        weights = {path: v.numpy().tolist()
                   for path, v in checkpoints.model_variables(model).items()}
        return {"loss": float(counts[-1]["loss_sum"] / counts[-1]["target_tokens"]),
                "weights": weights, "updates": int(optimizer.iterations.numpy())}

    case = sys.argv[1]
    if case == "one_replica":
        result = one_update(tf.distribute.OneDeviceStrategy("/cpu:0"), 1, [(inputs, targets)])
    elif case == "worker":  # one of two processes named by TF_CONFIG, one replica each
        result = one_update(tf.distribute.MultiWorkerMirroredStrategy(), 1, [(inputs, targets)])
    elif case == "two_replicas":
        result = one_update(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), 1,
                            [(inputs, targets)])
    else:  # two halves of equal token counts, accumulated
        full = targets.copy(); full[full == 0] = 5
        halves = [(inputs[:2], full[:2]), (inputs[2:], full[2:])]
        result = {"accumulated": one_update(tf.distribute.OneDeviceStrategy("/cpu:0"), 2,
                                            halves),
                  "whole": one_update(tf.distribute.OneDeviceStrategy("/cpu:0"), 1,
                                      [(inputs, full)])}
    print("RESULT" + json.dumps(result))
""")


def parse_result(returncode, stdout, stderr):
    assert returncode == 0, stdout + stderr
    line = [l for l in stdout.splitlines() if l.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


@functools.cache  # one_replica's update, run once for the tests that compare with it
def run_case(case, jit_compile=True):
    result = subprocess.run([sys.executable, "-c", SCRIPT, case], capture_output=True,
                            text=True, timeout=600,
                            env=dict(os.environ, XLA="1" if jit_compile else "0"))
    return parse_result(result.returncode, result.stdout, result.stderr)


def run_two_workers(ports):
    """The "worker" case in two processes on 127.0.0.1, one TF_CONFIG task each."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    workers = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        workers.append(subprocess.Popen([sys.executable, "-c", SCRIPT, "worker"], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True))
    results = []
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=600)
        results.append(parse_result(worker.returncode, stdout, stderr))
    return results


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for path in a:
        np.testing.assert_allclose(a[path], b[path], rtol=1e-5, atol=1e-6, err_msg=path)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_one_step_on_one_and_two_replicas_is_the_same(jit_compile):
    one, two = run_case("one_replica", jit_compile), run_case("two_replicas", jit_compile)
    assert one["updates"] == two["updates"] == 1
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)
    assert_same_weights(one["weights"], two["weights"])


def test_one_step_on_two_worker_processes_is_the_same_as_on_one_replica(free_ports):
    one = run_case("one_replica")
    for worker in run_two_workers(free_ports(2)):
        assert worker["updates"] == 1
        assert worker["loss"] == pytest.approx(one["loss"], rel=1e-5)
        assert_same_weights(one["weights"], worker["weights"])


def test_accumulating_two_halves_equals_one_batch_twice_as_large():
    result = run_case("accumulation")
    accumulated, whole = result["accumulated"], result["whole"]
    assert accumulated["updates"] == whole["updates"] == 1
    assert_same_weights(accumulated["weights"], whole["weights"])
