"""The pre-softmax projection, log-softmax and label-smoothed cross entropy as one fused
computation over chunks of target positions, with its own gradient.

The unfused path (`losses.loss_sum_and_tokens` on `Transformer(...)` logits) holds the full
[batch, length, vocab] float32 logits, their softmax and their gradient at once, and reads and
writes them several times. Here the decoder's last activations are projected to the vocabulary
`chunk_rows` positions at a time (the idea of Liger Kernel's fused linear cross entropy and of
"Cut Your Losses in Large-Vocabulary Language Models", Wijmans et al., 2024): each chunk's
logits give its loss, its count of targets predicted right and, while they are at hand, the
gradients of the loss sum with respect to the chunk's activations and to the projection
matrix, so no more than one chunk of logits exists at a time. Only real (non-pad) target
positions are projected: they are moved to the front and the loop stops after the last chunk
that holds one.

With confidence c = 1 - eps and low = eps / (V - 1) (t2t's label smoothing, losses.py), the
cross entropy of logits z against the smoothed targets q is
    CE = logsumexp(z) - c * z_y - low * (sum_j z_j - z_y),
and its gradient with respect to z is softmax(z) - q. Both match `losses.smoothed_cross_entropy`
to float32 rounding (tests/training/test_output_layer_loss.py). The projection runs in float32
as `TokenEmbedding(reverse=True)` does, also under mixed precision.
"""
import tensorflow as tf

from t2t_lite.data.vocab import PAD_ID
from t2t_lite.training import losses


def loss_sum_tokens_and_correct(hidden, softmax_weights, targets, label_smoothing: float,
                                chunk_rows: int, with_gradients: bool = True,
                                fixed_chunk_shape: bool = True):
    """(sum of the label-smoothed loss over real target tokens, number of real target tokens,
    number of real target tokens predicted right), as `losses.loss_sum_and_tokens` and
    `losses.correct_tokens` compute them from `hidden @ softmax_weights^T`.

    Args:
        hidden: the decoder's final activations [batch, length, d] (any float dtype).
        softmax_weights: the pre-softmax projection [vocab, d] (the shared embedding matrix).
        targets: int target ids [batch, length]; PAD_ID (0) marks padding.
        label_smoothing: eps of t2t's label smoothing.
        chunk_rows: target positions projected at a time.
        with_gradients: False for evaluation: the loss sum then has no gradient, and no
            gradient work is done.
        fixed_chunk_shape: every chunk has `chunk_rows` rows, the last one filled up with
            padding rows whose results are dropped: one static shape, which XLA needs. False
            (without XLA): the last chunk has just the real rows left, so no logits or
            gradient products are computed for padding (a batch of 3,812 target tokens in
            one chunk of 4,096 rows computed 7% more than it needed).
    """
    depth = tf.shape(hidden)[-1]
    rows = tf.reshape(hidden, [-1, depth])
    row_targets = tf.reshape(tf.cast(targets, tf.int32), [-1])
    is_pad = tf.cast(tf.equal(row_targets, PAD_ID), tf.int32)
    real_rows = tf.reduce_sum(1 - is_pad)
    real_first = tf.argsort(is_pad, stable=True)
    rows, row_targets = tf.gather(rows, real_first), tf.gather(row_targets, real_first)
    if fixed_chunk_shape:  # whole chunks: padded with rows the loop never reaches
        padding = -tf.shape(rows)[0] % chunk_rows
        rows = tf.pad(rows, [[0, padding], [0, 0]])
        row_targets = tf.pad(row_targets, [[0, padding]])
    loss_sum, correct = _chunked_loss(rows, tf.convert_to_tensor(softmax_weights), row_targets,
                                      real_rows, label_smoothing, chunk_rows, with_gradients,
                                      fixed_chunk_shape)
    return loss_sum, tf.cast(real_rows, tf.float32), correct


def _chunk_loop(rows, weights, row_targets, real_rows, label_smoothing, chunk_rows,
                with_gradients, fixed_chunk_shape):
    """Loss sum, correct count and (with_gradients) d loss_sum / d rows and / d weights."""
    vocab_size = weights.shape[0]
    confidence, low = losses.smoothed_target_values(vocab_size, label_smoothing)
    floor = losses.smoothed_distribution_entropy(vocab_size, label_smoothing)
    weights = tf.cast(weights, tf.float32)
    chunks = (real_rows + chunk_rows - 1) // chunk_rows
    # sum_j z_j = h . colsum(W): the logits' row sums from a [d] vector instead of a pass
    # over [chunk_rows, vocab]; the gradient uses colsum(W) too.
    weight_column_sums = tf.reduce_sum(weights, axis=0)  # [d]

    def body(chunk, loss_sum, correct, row_gradients, weight_gradients):
        start = chunk * chunk_rows
        # A constant size: one static shape under XLA; else no more than the real rows left.
        size = chunk_rows if fixed_chunk_shape else tf.minimum(chunk_rows, real_rows - start)
        offsets = tf.range(size)
        h = tf.cast(tf.slice(rows, [start, 0], [size, -1]), tf.float32)
        y = tf.slice(row_targets, [start], [size])
        real = tf.cast(start + offsets < real_rows, tf.float32)  # all 1 unless fixed
        logits = tf.matmul(h, weights, transpose_b=True)  # [size, vocab], float32
        # logsumexp by hand, keeping exp(logits - max) for the gradient's softmax: one Exp
        # over the chunk's logits instead of two.
        row_max = tf.reduce_max(logits, axis=-1)
        exp_shifted = tf.exp(logits - row_max[:, None])
        exp_sum = tf.reduce_sum(exp_shifted, axis=-1)
        log_normalizer = tf.math.log(exp_sum) + row_max
        target_logit = tf.gather(logits, y[:, None], batch_dims=1)[:, 0]
        logit_sums = tf.linalg.matvec(h, weight_column_sums)
        cross_entropy = (log_normalizer - confidence * target_logit
                         - low * (logit_sums - target_logit))
        loss_sum += tf.reduce_sum((cross_entropy - floor) * real)
        # Right when the target's logit is the row's largest (losses.correct_tokens): the
        # row maximum is at hand, so no argmax pass over the logits.
        correct += tf.reduce_sum(tf.cast(target_logit >= row_max, tf.float32) * real)
        if with_gradients:
            chunk_row_gradients, chunk_weight_gradients = _chunk_gradients(
                h, y, real, (exp_shifted, exp_sum), weights,
                (confidence, low, weight_column_sums))
            row_gradients = tf.tensor_scatter_nd_update(
                row_gradients, (start + offsets)[:, None], chunk_row_gradients)
            weight_gradients += chunk_weight_gradients
        return chunk + 1, loss_sum, correct, row_gradients, weight_gradients

    gradients = ((tf.zeros_like(rows, dtype=tf.float32), tf.zeros_like(weights))
                 if with_gradients else (tf.zeros([0, 0]), tf.zeros([0, 0])))  # else untouched
    state = (tf.constant(0), tf.constant(0.0), tf.constant(0.0)) + gradients
    _, loss_sum, correct, row_gradients, weight_gradients = tf.while_loop(
        lambda chunk, *unused: chunk < chunks, body, state)
    return loss_sum, correct, row_gradients, weight_gradients


def _chunk_gradients(h, y, real, softmax, weights, smoothing):
    """d CE / d h and d CE / d weights of one chunk's real rows (`real`: 1 or 0 per row), from
    `softmax` = (e = exp(logits - max) [rows, vocab], its row sums) and `smoothing` =
    (confidence, low, colsum(weights)).

    d CE / d logits = G = softmax - q on real rows, i.e. with per row s = real / sum(e):
    G = s * e - low * real - (confidence - low) * real at the target. G is never formed: its
    three terms go through the two products separately, so that no pass over [rows, vocab] is
    added to e:
      G W   = s * (e W) - low * real * colsum(W) - (c - low) * real * W[y]
      G^T h = e^T (s * h) - low * sum_rows(real * h) - (c - low) * (real * h) at y"""
    exp_shifted, exp_sum = softmax
    confidence, low, weight_column_sums = smoothing
    row_scale = real / exp_sum
    target_weight = (confidence - low) * real
    row_gradients = (row_scale[:, None] * tf.matmul(exp_shifted, weights)
                     - (low * real)[:, None] * weight_column_sums[None, :]
                     - target_weight[:, None] * tf.gather(weights, y))
    real_h = real[:, None] * h
    weight_gradients = (
        tf.matmul(exp_shifted, row_scale[:, None] * h, transpose_a=True)
        - low * tf.reduce_sum(real_h, axis=0)[None, :]
        - tf.math.unsorted_segment_sum(target_weight[:, None] * h, y, weights.shape[0]))
    return row_gradients, weight_gradients


def _chunked_loss(rows, weights, row_targets, real_rows, label_smoothing, chunk_rows,
                  with_gradients, fixed_chunk_shape):
    if not with_gradients:
        loss_sum, correct, _, _ = _chunk_loop(tf.stop_gradient(rows), tf.stop_gradient(weights),
                                              row_targets, real_rows, label_smoothing,
                                              chunk_rows, False, fixed_chunk_shape)
        return loss_sum, correct

    @tf.custom_gradient
    def fused(rows, weights):
        loss_sum, correct, row_gradients, weight_gradients = _chunk_loop(
            rows, weights, row_targets, real_rows, label_smoothing, chunk_rows, True,
            fixed_chunk_shape)

        def gradient(loss_sum_upstream, unused_correct_upstream):
            return (tf.cast(loss_sum_upstream * row_gradients, rows.dtype),
                    tf.cast(loss_sum_upstream * weight_gradients, weights.dtype))

        return (loss_sum, tf.stop_gradient(correct)), gradient

    return fused(rows, weights)
