"""Search for the most probable output sequence, one token per step (paper §6.1).

Greedy search: the encoder runs once; each step runs the decoder over the tokens chosen so far
and appends the most probable next token, until every sequence has produced EOS or the maximum
length (input length + `extra_length`, 50 in the paper) is reached.
"""
import tensorflow as tf

from t2t_lite.data.vocab import EOS_ID, PAD_ID


def greedy_search(model, inputs, extra_length: int = 50):
    """Greedy decoding of a batch of padded `inputs` [B, S]; returns ids [B, S + extra_length],
    padded with 0 after each sequence's EOS."""
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    batch_size = tf.shape(inputs)[0]
    max_length = tf.shape(inputs)[1] + extra_length
    encoder_output, inputs_padding = model.encode(inputs, training=False)
    # decoded[:, 0] is the start position (PAD, as t2t's shift_right); token t lands at t + 1.
    decoded = tf.zeros([batch_size, max_length + 1], tf.int32)
    finished = tf.zeros([batch_size], tf.bool)
    positions = tf.range(max_length + 1)[tf.newaxis, :]

    def step(t, decoded, finished):
        logits = model.decode(decoded[:, :-1], encoder_output, inputs_padding, training=False)
        next_ids = tf.argmax(logits[:, t, :], axis=-1, output_type=tf.int32)
        next_ids = tf.where(finished, PAD_ID, next_ids)
        decoded = tf.where(positions == t + 1, next_ids[:, tf.newaxis], decoded)
        return t + 1, decoded, finished | tf.equal(next_ids, EOS_ID)

    def not_done(t, decoded, finished):
        return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(finished)))

    _, decoded, _ = tf.while_loop(not_done, step, (tf.constant(0), decoded, finished))
    return decoded[:, 1:]
