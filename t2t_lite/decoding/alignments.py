"""Word alignments from the encoder-decoder attention (paper §3.2.3), as OpenNMT-tf's
`with_alignments: hard` and fairseq's --print-alignment give them: for each target piece, the
source piece its decoder position attends to most.

    attention_to_source: a teacher-forced pass -> one decoder layer's weights over the source,
        averaged over its heads, float32 [B, T, S]
    hard_alignment: one sentence's weights -> ((source piece, target piece), ...), EOS of
        neither side aligned
    alignment_text: those pairs as "0-0 1-2 ...", source first (fairseq's and Pharaoh's form)
"""
import numpy as np
import tensorflow as tf


def attention_to_source(model, inputs, targets, layer: int = -1):
    """The encoder-decoder attention of decoder layer `layer` (default the last, OpenNMT-tf's
    choice), averaged over its heads, from a teacher-forced pass in inference mode.

    Args:
        model: a Transformer (models.transformer); its `attention_weights` gives every layer's.
        inputs: int32 [B, S], source ids ending with EOS, 0-padded.
        targets: int32 [B, T], target ids ending with EOS, 0-padded.
        layer: the decoder layer, indexed as a Python list (-1: the last).

    Returns float32 [B, T, S]: row j is where target position j (which predicts targets[:, j])
    looks; each row sums to 1 over the real source positions and is 0 at the source's PAD.
    """
    features = {"inputs": tf.convert_to_tensor(inputs, tf.int32),
                "targets": tf.convert_to_tensor(targets, tf.int32)}
    weights = model.attention_weights(features)["decoder"][layer]["encoder_decoder"]
    return tf.reduce_mean(tf.cast(weights, tf.float32), axis=1)


def hard_alignment(weights, source_pieces: int, target_pieces: int) -> tuple:
    """One sentence's hard alignment: each target piece j with the source piece i it attends
    to most (fairseq's extract_hard_alignment, which also leaves both sides' EOS out).

    Args:
        weights: float [T, S] (a row of attention_to_source, padded or not).
        source_pieces: the source's piece count with its EOS (the non-PAD ids of its row).
        target_pieces: the target's, with its EOS (TargetScore.pieces, len(Hypothesis.ids)).

    Returns ((i, j), ...) 0-based, j = 0 .. target_pieces - 2 in order, i < source_pieces - 1
    (the argmax over the source's pieces without EOS); () when a side has only its EOS.
    """
    weights = np.asarray(weights)
    source, target = source_pieces - 1, target_pieces - 1
    if source < 1 or target < 1:
        return ()
    best = np.argmax(weights[:target, :source], axis=1)
    return tuple((int(i), j) for j, i in enumerate(best))


def alignment_text(pairs) -> str:
    """((i, j), ...) -> "i-j i-j ..." (source index first, 0-based, space-separated; "" for
    none), the line fairseq prints after "A-" and Moses' and fast_align's files hold."""
    return " ".join(f"{i}-{j}" for i, j in pairs)
