"""The model's score of given translations: teacher-forced, nothing searched.

One pass of the model in inference mode over each (input, target) pair, as OpenNMT-tf's
`onmt-main score`, fairseq's --score-reference and Marian's marian-scorer score a reference:
the decoder reads the target shifted right (models.transformer.shift_right) and the
log-softmax of its logits is summed at the target's pieces, EOS included. That sum is what
a search's raw log probability is for its own output (decoding.results.Hypothesis.log_prob);
beam search's score is it over the length penalty (search.length_penalty).
"""
import tensorflow as tf

from t2t_lite.data.vocab import PAD_ID
from t2t_lite.models.transformer import shift_right


def target_log_likelihoods(model, inputs, targets):
    """The log-likelihood of each target given its input (teacher forcing, paper §3: the
    decoder's position j predicts piece j from the pieces before it).

    Args:
        model: a Transformer (models.transformer), in any compute dtype: the log-softmax is
            taken in float32 (as the search's is), bfloat16 models included.
        inputs: int32 [B, S], source ids ending with EOS, 0-padded.
        targets: int32 [B, T], target ids ending with EOS, then 0-padded.

    Returns:
        (log_likelihood float32 [B], the sum of log p(target_j | target_<j, input) over the
        target's pieces and its EOS; pieces int32 [B], how many that is: the non-PAD ids).
    Traceable in tf.function with [None, None] signatures; each row's values depend on that
    row alone and not on how far the batch is padded.
    """
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    targets = tf.convert_to_tensor(targets, tf.int32)
    encoder_output, inputs_padding = model.encode(inputs, training=False)
    logits = tf.cast(model.decode(shift_right(targets), encoder_output, inputs_padding,
                                  training=False), tf.float32)
    # log_softmax at the target ids, without writing the whole [B, T, V] log-softmax.
    target_logits = tf.gather(logits, targets, batch_dims=2)
    log_probs = target_logits - tf.reduce_logsumexp(logits, axis=-1)
    real = tf.not_equal(targets, PAD_ID)
    log_likelihood = tf.reduce_sum(tf.where(real, log_probs, 0.0), axis=1)
    return log_likelihood, tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
