"""Decoding steps' weight matrices laid out for their rows: the same values, in the layout chosen
for square and widening matrices only, and for rank-2 inputs only."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers.decoding_layout import transposed, transposed_for_decoding, weight_matrices
from t2t_lite.layers.dense import Dense
from t2t_lite.layers.feed_forward import FeedForward


def matmul_transposes(function, *args):
    """[(transpose_a, transpose_b)] of the MatMul ops traced."""
    graph = function.get_concrete_function(*args).graph
    return [(op.get_attr("transpose_a"), op.get_attr("transpose_b"))
            for op in graph.get_operations() if op.type == "MatMul"]


@pytest.mark.parametrize("units, activation", [(6, "relu"), (8, None), (4, None)])
def test_transposed_kernels_give_the_same_rows_for_square_and_widening_kernels(units,
                                                                            activation):
    layer = Dense(units, activation=activation)
    layer.build((None, 8))
    rows = tf.constant(np.random.default_rng(3).normal(size=(5, 8)).astype(np.float32))
    sequence = tf.reshape(rows, [1, 5, 8])

    @tf.function
    def steps(rows, sequence):
        with transposed_for_decoding([layer.kernel]):
            return layer(rows), layer(sequence)

    got_rows, got_sequence = steps(rows, sequence)
    np.testing.assert_allclose(got_rows.numpy(), layer(rows).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_sequence.numpy(), layer(sequence).numpy(), rtol=1e-6,
                               atol=1e-6)
    transposes = matmul_transposes(steps, rows, sequence)
    widening = units >= 8
    assert ((False, True) in transposes) == widening  # the rank-2 call, square or widening
    assert (False, False) in transposes  # the rank-3 call (and a narrowing kernel's rows)


def test_copies_exist_only_inside_the_block():
    square, narrowing = tf.Variable(tf.zeros([4, 4])), tf.Variable(tf.zeros([4, 2]))
    with transposed_for_decoding([square, narrowing]):
        assert transposed(square) is not None and transposed(narrowing) is None
        with transposed_for_decoding([]):  # nested blocks keep the outer copies
            assert transposed(square) is not None
    assert transposed(square) is None


def test_the_weight_matrices_are_the_dense_kernels_of_the_layers():
    """Derived, not listed: a layer's every Dense projection, biases and norms left out."""
    feed_forward, norm = FeedForward(16), keras.layers.LayerNormalization()
    feed_forward.build((None, 4))
    norm.build((None, 4))
    matrices = weight_matrices([feed_forward, norm])
    assert [id(matrix) for matrix in matrices] == [
        id(feed_forward.filter_dense.kernel), id(feed_forward.output_dense.kernel)]
