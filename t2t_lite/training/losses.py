"""The training loss and accuracy over non-pad target tokens, as tensor2tensor computed them.

Label smoothing (paper §5.4, t2t's `smoothing_cross_entropy`): the correct class gets
confidence 1 - eps and every other class eps / (V - 1). t2t subtracts the smallest possible cross
entropy, the entropy of that smoothed distribution, so that a perfect model shows a loss of 0.
Pad targets (id 0) carry weight 0, and the loss is normalised by the number of real tokens.
"""
import math

import tensorflow as tf

from t2t_lite.data.vocab import PAD_ID


def smoothed_target_values(vocab_size: int, label_smoothing: float) -> tuple:
    """(c, l): the smoothed target's probability of the correct class, c = 1 - eps, and of
    each of the V - 1 others, l = eps / (V - 1)."""
    return 1.0 - label_smoothing, label_smoothing / (vocab_size - 1)


def smoothed_distribution_entropy(vocab_size: int, label_smoothing: float) -> float:
    """-(c log c + (V-1) l log l) with c = 1 - eps and l = eps / (V - 1): the loss floor."""
    confidence, low = smoothed_target_values(vocab_size, label_smoothing)
    entropy = -confidence * math.log(confidence) if confidence > 0 else 0.0
    if low > 0:
        entropy -= (vocab_size - 1) * low * math.log(low)
    return entropy


def smoothed_cross_entropy(logits, targets, label_smoothing: float):
    """Per-token cross entropy against the smoothed targets minus its floor, [B, T] float32."""
    vocab_size = logits.shape[-1]
    confidence, low = smoothed_target_values(vocab_size, label_smoothing)
    soft_targets = tf.one_hot(targets, vocab_size, on_value=confidence, off_value=low,
                              dtype=tf.float32)
    cross_entropy = tf.nn.softmax_cross_entropy_with_logits(
        labels=soft_targets, logits=tf.cast(logits, tf.float32))
    return cross_entropy - smoothed_distribution_entropy(vocab_size, label_smoothing)


def target_weights(targets):
    """1.0 for real target tokens, 0.0 for padding."""
    return tf.cast(tf.not_equal(targets, PAD_ID), tf.float32)


def loss_sum_and_tokens(logits, targets, label_smoothing: float):
    """(sum of the per-token loss over real tokens, number of real tokens)."""
    weights = target_weights(targets)
    loss = smoothed_cross_entropy(logits, targets, label_smoothing)
    return tf.reduce_sum(loss * weights), tf.reduce_sum(weights)


def correct_tokens(logits, targets):
    """Number of real target tokens predicted right: whose logit is the largest of its
    position's (t2t's padded_accuracy, an argmax, but for ties: a target tied for the largest
    counts as right, where argmax picks the first of the tied tokens). Comparing with the
    maximum lets the fused output layer (output_layer_loss.py) count without a pass of its
    own over the logits."""
    target_logits = tf.gather(logits, tf.cast(targets, tf.int32)[..., None],
                              batch_dims=len(targets.shape))[..., 0]
    hits = tf.cast(target_logits >= tf.reduce_max(logits, axis=-1), tf.float32)
    return tf.reduce_sum(hits * target_weights(targets))
