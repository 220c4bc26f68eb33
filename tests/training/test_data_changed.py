"""A data folder that changes while a trainer reads it (emptied, or generated again with other
data) ends training with one error naming the folder and what changed, and no checkpoint of
the steps that read other data: the last checkpoint before the change stays the latest."""
import shutil

import keras
import pytest
import tensorflow as tf

from t2t_lite.training import trainer
from t2t_lite.training.data_watch import DataChangedError

from program_runs import SMALL, hparams_of


class ChangeAt(keras.callbacks.Callback):
    """Calls `change()` at the end of update `step`, once (before that step's checkpoint)."""

    def __init__(self, step, change):
        super().__init__()
        self.step = step
        self.change = change

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            self.change()


def resume_with(data, output_dir, change, save_every: int):
    """Resumes trained_dir's copy `output_dir` (model.ckpt-2) on `data` for up to 200 steps,
    `change` made after step 3; returns the DataChangedError it ends with."""
    config = trainer.RunConfig(train_steps=200, eval_steps=0, save_checkpoints_steps=save_every)
    keras.backend.clear_session()  # the variables' names of a new process
    with pytest.raises(DataChangedError) as error:
        trainer.train("algorithmic_copy", "transformer", hparams_of(SMALL), str(data),
                      str(output_dir), config, [ChangeAt(3, change)])
    return str(error.value)


def test_a_data_folder_emptied_while_training_reads_it(data_dir, trained_dir, tmp_path):
    """No checkpoint is due before the next pass over the shards opens them again."""
    data, output_dir = tmp_path / "data", tmp_path / "run"
    shutil.copytree(data_dir, data)
    shutil.copytree(trained_dir, output_dir)

    def empty():
        for path in data.iterdir():
            path.unlink()

    message = resume_with(data, output_dir, empty, save_every=1000)
    assert message.startswith(f"--data_dir={data} changed while training read it: a shard is "
                              f"gone ("), message
    assert message.endswith(
        f"stopped without a checkpoint of the updates since, which may have read other data "
        f"(the latest checkpoint, {output_dir}/model.ckpt-2, was trained on the data as it was "
        f"checked). "
        f"Once the data is complete, the same command checks it again and resumes"), message
    assert tf.train.latest_checkpoint(str(output_dir)) == f"{output_dir}/model.ckpt-2"


def test_a_data_folder_generated_again_with_other_data(data_dir, trained_dir, copy_task_data,
                                                       tmp_path):
    """With a checkpoint every step, step 3's is not saved once the shards are others."""
    data, output_dir = tmp_path / "data", tmp_path / "run"
    shutil.copytree(data_dir, data)
    shutil.copytree(trained_dir, output_dir)
    other = copy_task_data(50, 20)

    def generate_again():
        shutil.rmtree(data)
        shutil.copytree(other, data)

    message = resume_with(data, output_dir, generate_again, save_every=1)
    assert message == (
        f"--data_dir={data} changed while training read it: {data}/algorithmic_copy-train."
        f"manifest.json changed; stopped without a checkpoint of the updates since, which may "
        f"have read other data (the latest checkpoint, {output_dir}/model.ckpt-2, was trained "
        f"on the data as it was checked). Once the data is complete, the same command checks "
        f"it again and resumes")
    assert tf.train.latest_checkpoint(str(output_dir)) == f"{output_dir}/model.ckpt-2"
