"""block_top_k gives tf.math.top_k's values, indices and order, ties included."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decoding.block_top_k import block_top_k


@pytest.mark.parametrize("width,k,block_size", [(8192, 8, 64), (1000, 5, 16), (37, 3, 4),
                                                (50, 8, 8)])
@pytest.mark.parametrize("ties", [False, True])
def test_equals_top_k(width, k, block_size, ties):
    values = np.random.default_rng(width + k).normal(size=(16, width)).astype(np.float32) * 3
    if ties:  # few distinct values: many ties, and equal maxima in different blocks
        values = np.round(values)
    expected_values, expected_indices = tf.math.top_k(values, k)
    for run in (block_top_k, tf.function(block_top_k, jit_compile=True)):
        top_values, top_indices = run(tf.constant(values), k, block_size)
        np.testing.assert_array_equal(top_values.numpy(), expected_values.numpy())
        np.testing.assert_array_equal(top_indices.numpy(), expected_indices.numpy())


def test_the_largest_entries_of_a_row_in_one_block():
    values = np.zeros((2, 64), np.float32)
    values[0, 8:12] = [4, 3, 2, 1]  # all in block 1 of 8
    values[1, [63, 0, 9]] = [5, 5, 5]
    top_values, top_indices = block_top_k(values, 3, block_size=8)
    assert top_indices.numpy().tolist() == [[8, 9, 10], [0, 9, 63]]
    assert top_values.numpy().tolist() == [[4, 3, 2], [5, 5, 5]]
