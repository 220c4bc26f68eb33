"""Dropout with a 16-bit mask (§5.4): the rate, the inverted scale, its gradient, seeds, a mask
of each replica's own under tf.distribute, and in training a mask of each batch's own."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers.dropout import Dropout, random_uint16, threshold_and_scale

from program_runs import TINY_MODEL


def test_threshold_and_scale_by_hand():
    # 0.1 * 65536 = 6553.6 -> 6554 dropped values of 65536; kept ones scaled by 65536 / 58982.
    assert threshold_and_scale(0.1) == (6554, 65536 / 58982)
    assert threshold_and_scale(0.5) == (32768, 2.0)


@pytest.mark.parametrize("shape", [(64, 40, 32), (3, 7, 1001)])  # even and odd last axis
def test_drops_at_the_rate_and_keeps_the_expected_value(shape):
    layer = Dropout(0.1, seed=3)
    x = np.random.default_rng(0).uniform(1, 2, size=shape).astype("float32")
    y = np.asarray(layer(x, training=True))
    dropped = y == 0
    # 81,920 and 21,021 Bernoulli(0.1) draws: 5 standard deviations around 0.1.
    sigma = np.sqrt(0.1 * 0.9 / x.size)
    assert abs(dropped.mean() - 0.1) < 5 * sigma
    np.testing.assert_allclose(y[~dropped], x[~dropped] * 65536 / 58982, rtol=1e-6)


def test_sixteen_bit_values_are_uniform():
    bits = np.asarray(random_uint16(tf.constant([200_000, 3]), tf.constant([1, 2], tf.int64)))
    assert bits.shape == (200_000, 3) and bits.min() >= 0 and bits.max() < 65536
    counts = np.bincount(bits.ravel() >> 12, minlength=16)  # 16 bins of the top 4 bits
    expected = bits.size / 16
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))


def test_gradient_is_the_mask_and_inference_is_the_identity():
    layer = Dropout(0.3, seed=1)
    x = tf.constant(np.full((8, 50), 2.0, "float32"))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    gradient = tape.gradient(y, x)
    np.testing.assert_allclose(gradient * 2.0, y)
    np.testing.assert_array_equal(layer(x, training=False), x)


def test_new_mask_each_call_reproducible_from_the_seed():
    x = np.ones((16, 64), "float32")
    first, second = Dropout(0.5, seed=7), Dropout(0.5, seed=7)
    a = np.asarray(first(x, training=True))
    assert not np.array_equal(a, np.asarray(first(x, training=True)))
    np.testing.assert_array_equal(a, second(x, training=True))


def test_same_mask_with_and_without_xla():
    x = tf.ones((4, 9, 33))
    eager = Dropout(0.2, seed=5)(x, training=True)
    layer = Dropout(0.2, seed=5)
    compiled = tf.function(lambda t: layer(t, training=True), jit_compile=True)(x)
    np.testing.assert_array_equal(eager, compiled)


def test_noise_shape_is_refused():
    with pytest.raises(ValueError, match="noise_shape"):
        Dropout(0.1, noise_shape=(1, None))


REPLICAS_SCRIPT = textwrap.dedent("""
    import json
    import sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from t2t_lite import registry
    from t2t_lite.layers.dropout import Dropout
    from t2t_lite.models.building import build_model
    from t2t_lite.training import trainer
    from t2t_lite.training.step import TrainingSteps

    strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
    results = {}
    for jit in (False, True):
        with strategy.scope():
            layer = Dropout(0.5, seed=3)
        inner = tf.function(lambda x: layer(x, training=True), jit_compile=jit)
        masks = strategy.experimental_local_results(
            tf.function(lambda: strategy.run(lambda: inner(tf.ones([4, 64]))))())
        # The same sentence pair on both replicas, the whole model in training mode.
        hparams = registry.hparams("transformer_tiny").override_from_string(sys.argv[1])
        keras.utils.set_random_seed(7)
        with strategy.scope():
            model = build_model("transformer", hparams, 12)
            optimizer = trainer.make_optimizer(hparams)
        steps = TrainingSteps(model, optimizer, hparams, strategy, jit_compile=jit)
        pair = {"inputs": np.array([[3, 4, 5, 6, 1]] * 2, np.int32),
                "targets": np.array([[7, 8, 9, 1, 0]] * 2, np.int32)}
        batch = next(iter(steps.distribute(tf.data.Dataset.from_tensors(pair))))
        losses = strategy.experimental_local_results(tf.function(lambda b: strategy.run(
            lambda f: steps.replica_counts(f, training=True)["loss_sum"], args=(b,)))(batch))
        results[str(jit)] = {"masks": [np.asarray(m).tolist() for m in masks],
                             "losses": [float(l) for l in losses]}
    results["one_replica"] = np.asarray(Dropout(0.5, seed=3)(tf.ones([4, 64]),
                                                             training=True)).tolist()
    print("RESULT " + json.dumps(results))
""")


def test_each_replica_draws_its_own_mask():
    """Keras's SeedGenerator gives every replica the same seed: without the replica's id in it,
    a batch split over replicas would get copies of one mask. Two replicas (MirroredStrategy
    over two logical CPUs), with and without XLA: the layer's masks differ, and the model given
    the same sentence pair on both replicas computes two different training losses. One
    replica keeps Keras's seed: its mask is that of a layer outside any strategy."""
    done = subprocess.run([sys.executable, "-c", REPLICAS_SCRIPT, TINY_MODEL],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.split("RESULT ", 1)[1])
    for jit in ("False", "True"):
        first, second = (np.array(mask) for mask in results[jit]["masks"])
        assert {0.0, 2.0} >= set(np.unique(first)) | set(np.unique(second))
        assert abs((first == 0).mean() - 0.5) < 0.1 and abs((second == 0).mean() - 0.5) < 0.1
        assert not np.array_equal(first == 0, second == 0), jit
        assert abs(results[jit]["losses"][0] - results[jit]["losses"][1]) > 1e-4, jit
    single = np.array(results["one_replica"])
    plain = Dropout(0.5, seed=3)(tf.ones([4, 64]), training=True)
    np.testing.assert_array_equal(single, plain)  # one replica: Keras's seed, unchanged


def test_in_training_a_mask_is_a_function_of_the_seed_and_the_batch_number():
    """Called with the batch's number as its seed (as TrainingSteps trains) the mask of batch 5
    does not depend on the masks drawn before it, as a resumed run draws none before its first
    batch; other batches, and a second call in one batch (a second number), get other masks."""
    x = np.ones((16, 64), "float32")

    def mask(layer, batch, calls=1):
        number = tf.constant(batch, tf.int64)
        seeds = [number, (number, tf.constant(1))]
        return [np.asarray(layer(x, training=True, seed=seed)) == 0 for seed in seeds[:calls]]

    went_on = Dropout(0.5, seed=7)
    for batch in range(5):
        mask(went_on, batch)
    went_on(x, training=True)  # outside: Keras's SeedGenerator advances
    resumed = Dropout(0.5, seed=7)
    np.testing.assert_array_equal(mask(went_on, 5)[0], mask(resumed, 5)[0])
    assert not np.array_equal(mask(resumed, 5)[0], mask(resumed, 6)[0])
    first, second = mask(resumed, 5, calls=2)
    assert not np.array_equal(first, second)
    assert not np.array_equal(mask(Dropout(0.5, seed=8), 5)[0], mask(resumed, 5)[0])
