"""The k largest entries of each row of a wide matrix (the vocabulary's log probabilities), in
two cheap passes instead of one selection over every entry.

Beam search picks its candidates among beam × vocabulary log probabilities at every step, and
TensorFlow's TopKV2 on CPU costs several times a plain pass over the same entries (its share
of a beam-search step: benchmarks/README.md, profile_decode.py). Cut each row into
blocks; the k largest entries lie in the k blocks of the largest maxima, so a row's maxima per
block (one reduction over every entry), the top k of those maxima, and the top k of the k
chosen blocks' entries give the exact answer. Ties come out as tf.math.top_k orders them, by
lower index: the chosen blocks are taken in index order, and among blocks whose maxima tie the
lower ones are chosen first.
"""
import tensorflow as tf

BLOCK_SIZE = 64


def block_top_k(values, k: int, block_size: int = BLOCK_SIZE):
    """tf.math.top_k(values, k) for float `values` [N, V]: (the k largest values [N, k] in
    decreasing order, their indices [N, k] int32), with the same values, indices and order."""
    values = tf.convert_to_tensor(values)
    width = values.shape[-1]
    if width is None or k * block_size >= width:
        return tf.math.top_k(values, k)
    num_blocks = -(-width // block_size)
    padding = num_blocks * block_size - width
    if padding:  # padded entries are never larger than a real one, and come later in ties
        values = tf.pad(values, [[0, 0], [0, padding]], constant_values=values.dtype.min)
    blocks = tf.reshape(values, [-1, num_blocks, block_size])
    _, chosen = tf.math.top_k(tf.reduce_max(blocks, axis=-1), k)
    chosen = tf.sort(chosen, axis=-1)  # index order, so that ties resolve as top_k's
    candidates = tf.reshape(tf.gather(blocks, chosen, batch_dims=1), [-1, k * block_size])
    top_values, positions = tf.math.top_k(candidates, k)
    block = tf.gather(chosen, positions // block_size, batch_dims=1)
    return top_values, block * block_size + positions % block_size
