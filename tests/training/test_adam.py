"""t2t_lite's Adam (one ResourceApplyAdam per variable) updates as keras.optimizers.Adam does,
with the same variables, config and checkpoints."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.training.adam import Adam

SETTINGS = dict(learning_rate=0.01, beta_1=0.9, beta_2=0.997, epsilon=1e-6)


def variables(seed=0):
    rng = np.random.default_rng(seed)
    return [keras.Variable(rng.normal(size=shape).astype(np.float32), name=f"v{index}")
            for index, shape in enumerate([(5, 3), (3,), (7, 4)])]


def gradients(step, model_variables, dense_rows=False):
    """Dense gradients of the first two variables, and rows of the third as IndexedSlices
    (an embedding's gradient; one row twice), or with `dense_rows` as their dense sum,
    different at each step."""
    rng = np.random.default_rng(100 + step)
    dense = [tf.constant(rng.normal(size=v.shape).astype(np.float32))
             for v in model_variables[:2]]
    rows = tf.IndexedSlices(tf.constant(rng.normal(size=(3, 4)).astype(np.float32)),
                            tf.constant([0, 5, 5]), dense_shape=tf.constant([7, 4]))
    return dense + [tf.convert_to_tensor(rows) if dense_rows else rows]


@pytest.mark.parametrize("traced", [False, True])
def test_the_same_updates_as_keras_adam(traced):
    results = []
    # Keras's Adam squares an IndexedSlices gradient slice by slice (a row given twice gets
    # g1^2 + g2^2); Adam's v takes the square of the whole gradient, (g1 + g2)^2, which is
    # what ResourceApplyAdam computes: Keras's is given the dense sum.
    for optimizer_class, dense_rows in ((keras.optimizers.Adam, True), (Adam, False)):
        model_variables = variables()
        optimizer = optimizer_class(**SETTINGS)
        apply = optimizer.apply
        if traced:
            apply = tf.function(lambda grads: optimizer.apply(grads, model_variables))
        for step in range(5):
            grads = gradients(step, model_variables, dense_rows)
            apply(grads) if traced else apply(grads, model_variables)
        results.append([v.numpy() for v in model_variables + optimizer.variables])
    for want, got in zip(*results):
        # 1 - beta_2 is rounded in float32 by the op, in float64 by Keras: 1e-5 apart.
        np.testing.assert_allclose(got, want, rtol=3e-5, atol=1e-7)
    assert not np.allclose(results[1][0], variables()[0].numpy())  # it did update


def test_config_and_checkpoints_are_keras_adams(tmp_path):
    optimizer = Adam(**SETTINGS)
    assert Adam.from_config(optimizer.get_config()).get_config() == optimizer.get_config()
    model_variables = variables()
    optimizer.apply(gradients(0, model_variables), model_variables)
    path = tf.train.Checkpoint(optimizer=optimizer).write(str(tmp_path / "ckpt"))
    restored = keras.optimizers.Adam(**SETTINGS)
    restored.build(variables())
    tf.train.Checkpoint(optimizer=restored).read(path).assert_consumed()
    for want, got in zip(optimizer.variables, restored.variables):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
