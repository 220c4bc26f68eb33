"""The fused output layer gives the loss, the counts and the gradients of the unfused path:
the full logits `hidden @ weights^T` through losses.loss_sum_and_tokens."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.training import losses, output_layer_loss

VOCAB, DEPTH, EPS = 37, 16, 0.1


def batch(seed=0, batch_size=5, length=9):
    """Random activations, projection and targets, with trailing padding of varied lengths
    (one sentence all padding)."""
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=[batch_size, length, DEPTH]).astype(np.float32)
    weights = rng.normal(scale=DEPTH**-0.5, size=[VOCAB, DEPTH]).astype(np.float32)
    targets = rng.integers(1, VOCAB, size=[batch_size, length])
    for row, real in enumerate(rng.integers(0, length + 1, size=batch_size)):
        targets[row, real:] = 0
    targets[0, :] = 0
    return tf.constant(hidden), tf.Variable(weights), tf.constant(targets, tf.int32)


def unfused(hidden, weights, targets):
    logits = tf.matmul(hidden, weights, transpose_b=True)
    loss_sum, tokens = losses.loss_sum_and_tokens(logits, targets, EPS)
    return loss_sum, tokens, losses.correct_tokens(logits, targets)


def fused(chunk_rows, with_gradients=True, fixed_chunk_shape=True):
    return lambda hidden, weights, targets: output_layer_loss.loss_sum_tokens_and_correct(
        hidden, weights, targets, EPS, chunk_rows, with_gradients, fixed_chunk_shape)


def values_and_gradients(loss_function, hidden, weights, targets, jit_compile=False):
    """(loss sum, tokens, correct), gradients."""
    @tf.function(jit_compile=jit_compile)
    def run(hidden):
        with tf.GradientTape() as tape:
            tape.watch(hidden)
            loss_sum, tokens, correct = loss_function(hidden, weights, targets)
            scaled = 3.0 * loss_sum  # a loss scale or 1 / tokens upstream of the loss sum
        return (loss_sum, tokens, correct), tape.gradient(scaled, [hidden, weights])
    return run(hidden)


@pytest.mark.parametrize("chunk_rows", [1, 7, 16, 45, 1024])
@pytest.mark.parametrize("jit_compile, fixed_chunk_shape", [
    (False, True), (True, True), (False, False)])  # False: a last chunk of the real rows left
def test_loss_counts_and_gradients_equal_the_full_logits(chunk_rows, jit_compile,
                                                        fixed_chunk_shape):
    hidden, weights, targets = batch()
    (want, want_gradients) = values_and_gradients(unfused, hidden, weights, targets)
    (got, got_gradients) = values_and_gradients(fused(chunk_rows, True, fixed_chunk_shape),
                                                hidden, weights, targets, jit_compile)
    assert float(got[1]) == float(want[1]) > 0  # real target tokens
    assert float(got[2]) == float(want[2])  # targets predicted right
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-5)
    for got_gradient, want_gradient in zip(got_gradients, want_gradients):
        np.testing.assert_allclose(tf.convert_to_tensor(got_gradient).numpy(),
                                   tf.convert_to_tensor(want_gradient).numpy(),
                                   rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("fixed_chunk_shape", [True, False])
def test_padding_positions_get_no_gradient_and_change_nothing(fixed_chunk_shape):
    hidden, weights, targets = batch(seed=1)
    loss_function = fused(4, True, fixed_chunk_shape)
    (loss, _, _), (hidden_gradient, _) = values_and_gradients(loss_function, hidden, weights,
                                                              targets)
    pad = (targets.numpy() == 0)
    assert np.all(hidden_gradient.numpy()[pad] == 0.0)
    noisy = tf.where(tf.constant(pad)[..., None], hidden * 100.0 + 5.0, hidden)
    (noisy_loss, _, _), _ = values_and_gradients(loss_function, noisy, weights, targets)
    assert float(noisy_loss) == pytest.approx(float(loss), rel=1e-6)


def test_chunks_of_the_real_rows_never_read_a_padding_position():
    """Without fixed chunk shapes the last chunk holds only the real rows left, so even NaN
    activations at padding positions leave the loss and the gradients as they were (a chunk
    filled up to its fixed size computes padding rows and drops their results after)."""
    hidden, weights, targets = batch(seed=1)
    pad = tf.constant(targets.numpy() == 0)[..., None]
    poisoned = tf.where(pad, float("nan"), hidden)
    for chunk_rows in (4, 7, 1024):
        (want, want_gradients) = values_and_gradients(fused(chunk_rows, True, False), hidden,
                                                      weights, targets)
        (got, got_gradients) = values_and_gradients(fused(chunk_rows, True, False), poisoned,
                                                    weights, targets)
        assert [float(v) for v in got] == [float(v) for v in want]
        for got_gradient, want_gradient in zip(got_gradients, want_gradients):
            np.testing.assert_array_equal(tf.convert_to_tensor(got_gradient).numpy(),
                                          tf.convert_to_tensor(want_gradient).numpy())


@pytest.mark.parametrize("fixed_chunk_shape", [True, False])
def test_evaluation_without_gradients_gives_the_same_counts(fixed_chunk_shape):
    hidden, weights, targets = batch(seed=2)
    want = unfused(hidden, weights, targets)
    got = fused(8, False, fixed_chunk_shape)(hidden, weights, targets)
    np.testing.assert_allclose([float(v) for v in got], [float(v) for v in want], rtol=1e-5)


def test_mixed_precision_activations_project_in_float32():
    """As TokenEmbedding(reverse=True): bfloat16 activations, float32 logits and loss, and an
    activation gradient in the activations' dtype."""
    hidden, weights, targets = batch(seed=3)
    low_precision = tf.cast(hidden, tf.bfloat16)
    (want, want_gradients) = values_and_gradients(
        lambda h, w, t: unfused(tf.cast(h, tf.float32), w, t), low_precision, weights, targets)
    (got, got_gradients) = values_and_gradients(fused(16), low_precision, weights, targets)
    assert got[0].dtype == tf.float32 and got_gradients[0].dtype == tf.bfloat16
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-5)
    np.testing.assert_allclose(got_gradients[1].numpy(), want_gradients[1].numpy(),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(tf.cast(got_gradients[0], tf.float32).numpy(),
                               tf.cast(want_gradients[0], tf.float32).numpy(), rtol=1e-2,
                               atol=1e-3)


@pytest.mark.parametrize("with_gradients", [True, False])
def test_a_target_tied_for_the_largest_logit_counts_as_right(with_gradients):
    hidden, weights, targets = batch(seed=4)
    hidden = tf.abs(hidden)
    tied = weights.numpy()
    tied[3] = tied[5] = 100.0 * DEPTH**-0.5  # tokens 3 and 5: the largest logits, equal
    weights = tf.Variable(tied)
    real = targets.numpy() != 0
    # Real positions alternate between the tied token 5 (argmax would say 3) and token 7.
    alternating = np.where(np.arange(targets.shape[1]) % 2 == 0, 5, 7)[None, :]
    targets = tf.constant(np.where(real, alternating, 0), tf.int32)
    want = int(np.sum(targets.numpy() == 5))
    assert want > 0
    assert float(unfused(hidden, weights, targets)[2]) == want
    assert float(fused(4, with_gradients)(hidden, weights, targets)[2]) == want
