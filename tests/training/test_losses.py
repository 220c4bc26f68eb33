import math

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.training import losses


def test_smoothed_cross_entropy_matches_a_hand_computation():
    # V = 4, eps = 0.1: the correct class gets 0.9, each other class 0.1 / 3.
    logits = np.array([[[2.0, 0.5, -1.0, 0.0]]], np.float32)
    targets = np.array([[0]], np.int32)
    log_probs = logits[0, 0] - math.log(sum(math.exp(x) for x in logits[0, 0]))
    soft = [0.9, 0.1 / 3, 0.1 / 3, 0.1 / 3]
    cross_entropy = -sum(p * lp for p, lp in zip(soft, log_probs))
    floor = -(0.9 * math.log(0.9) + 3 * (0.1 / 3) * math.log(0.1 / 3))
    got = losses.smoothed_cross_entropy(tf.constant(logits), tf.constant(targets), 0.1)
    assert float(got[0, 0]) == pytest.approx(cross_entropy - floor, rel=1e-5)


def test_a_perfect_model_has_zero_loss():
    vocab, eps = 6, 0.1
    confidence, low = 1 - eps, eps / (vocab - 1)
    # logits whose softmax is exactly the smoothed distribution of class 2
    probs = np.full(vocab, low)
    probs[2] = confidence
    logits = np.log(probs).astype(np.float32)[None, None, :]
    got = losses.smoothed_cross_entropy(tf.constant(logits), tf.constant([[2]]), eps)
    assert float(got[0, 0]) == pytest.approx(0.0, abs=1e-5)


def test_pad_targets_do_not_count():
    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(size=(2, 3, 5)).astype(np.float32))
    targets = tf.constant([[3, 1, 0], [2, 0, 0]])
    loss_sum, tokens = losses.loss_sum_and_tokens(logits, targets, 0.1)
    per_token = losses.smoothed_cross_entropy(logits, targets, 0.1).numpy()
    assert float(tokens) == 3.0
    assert float(loss_sum) == pytest.approx(per_token[0, 0] + per_token[0, 1] + per_token[1, 0],
                                            rel=1e-5)
    changed = tf.tensor_scatter_nd_update(logits, [[1, 2]], [tf.ones(5) * 9.0])
    assert float(losses.loss_sum_and_tokens(changed, targets, 0.1)[0]) == pytest.approx(
        float(loss_sum), rel=1e-6)


def test_correct_tokens_counts_only_real_targets():
    logits = tf.one_hot([[3, 1, 4], [2, 2, 2]], 5)
    targets = tf.constant([[3, 2, 0], [2, 0, 0]])
    assert float(losses.correct_tokens(logits, targets)) == 2.0


def test_a_target_tied_for_the_largest_logit_counts_as_right():
    # Position 0: tokens 1 and 3 tie for the largest (argmax would say 1); position 1: the
    # target 2 is below the largest.
    logits = tf.constant([[[0.0, 5.0, 1.0, 5.0], [0.0, 5.0, 4.0, 1.0]]])
    targets = tf.constant([[3, 2]])
    assert float(losses.correct_tokens(logits, targets)) == 1.0
