"""A batch that one pass over the training data cannot fill is refused before training, naming
the batch's tokens and the data's: without the check, batch_size=50000000 on the copy task
gathered examples for 10 minutes to 2 GB without a step, and a max_length under every example
ended in a StopIteration traceback.

SMALL's buckets are one, of 22 tokens (max_length=22, min_length_bucket=22), and every copy
example is shorter: one pass over N training examples holds N x 22 tokens as batch_size counts
them (each example padded to its bucket)."""
import logging

import pytest

from program_runs import SMALL, error_lines, hparams_of, run, trainer_flags
from t2t_lite import registry
from t2t_lite.errors import DataError
from t2t_lite.hparams_lib import HParams

TRAIN_EXAMPLES = 20
TOKENS_OF_A_PASS = TRAIN_EXAMPLES * 22


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    """TRAIN_EXAMPLES training examples, where conftest's data_dir has 300."""
    return copy_task_data(TRAIN_EXAMPLES, 5)


def small_with_batch_size(batch_size: int) -> str:
    return SMALL.replace("batch_size=256", f"batch_size={batch_size}")


def test_a_batch_beyond_the_data_is_refused_before_training(data_dir, tmp_path):
    output_dir = tmp_path / "out"
    code, out = run("trainer", *trainer_flags(data_dir, output_dir,
                                              hparams=small_with_batch_size(44_000)))
    assert code == 2, out
    errors = error_lines(out)
    assert errors == [f"error: --hparams=batch_size=44000 asks for 44000 tokens a batch, but one "
                      f"pass over the training data in {data_dir} holds {TOKENS_OF_A_PASS} "
                      f"tokens (its examples of at most max_length=22 tokens, each counted at "
                      f"the length its bucket pads it to, as batch_size counts): use a batch_size "
                      f"of at most {TOKENS_OF_A_PASS}"], out
    assert "Traceback" not in out
    assert not output_dir.exists()  # refused before the output folder, let alone a step


def test_a_batch_of_all_the_data_trains(data_dir, tmp_path):
    code, out = run("trainer", *trainer_flags(data_dir, tmp_path,
                                              hparams=small_with_batch_size(TOKENS_OF_A_PASS)))
    assert code == 0, out
    assert list(tmp_path.glob("model.ckpt-1.*"))


def copy_hparams(**changes) -> HParams:
    return hparams_of(SMALL).replace(**changes)


def test_replicas_and_accumulated_batches_count_into_the_update(data_dir):
    problem = registry.problem("algorithmic_copy")
    problem.check_batch_size(data_dir, copy_hparams(
        batch_size=110, optimizer_multistep_accumulate_steps=2), num_replicas=2)
    with pytest.raises(DataError) as refused:
        problem.check_batch_size(data_dir, copy_hparams(
            batch_size=110, optimizer_multistep_accumulate_steps=3), num_replicas=2)
    message = str(refused.value)
    assert message.startswith("--hparams=batch_size=110 asks for 660 tokens an update (110 a "
                              "replica x 2 replicas x optimizer_multistep_accumulate_steps=3), "
                              f"but one pass over the training data in {data_dir} holds "
                              f"{TOKENS_OF_A_PASS} tokens")
    assert message.endswith(f"use a batch_size of at most {TOKENS_OF_A_PASS // 6}")


def test_a_max_length_under_every_example_is_refused(data_dir):
    with pytest.raises(DataError, match=f"no training example in {data_dir} has at most "
                                        f"--hparams=max_length=1 tokens \\(the shortest has 2\\)"):
        registry.problem("algorithmic_copy").check_batch_size(data_dir, copy_hparams(
            max_length=1))


def test_a_batch_size_under_the_longest_example_trains_with_a_warning(data_dir, caplog):
    """t2t's max(1, batch_size // length): a longer example is a batch of its own."""
    with caplog.at_level(logging.WARNING):
        registry.problem("algorithmic_copy").check_batch_size(data_dir, copy_hparams(
            batch_size=10))
    assert ("--hparams=batch_size=10 is less than the 22 tokens the longest training examples "
            "are padded to" in caplog.text)
