"""The NaN guard judges the weights it keeps: with a checkpoint every step, the weights of an
update whose own loss (computed before it) was finite but after which the loss is NaN are not
saved, and the checkpoint before it stays the latest."""
import shutil

import tensorflow as tf

from program_runs import SMALL, error_lines, file_hashes, run, trainer_flags


def test_weights_whose_loss_is_not_finite_are_never_saved(data_dir, trained_dir,
                                                                 tmp_path):
    output_dir = tmp_path / "run"
    shutil.copytree(trained_dir, output_dir)
    hashes = file_hashes(output_dir)
    # Step 3's loss, computed before its update, is finite; the loss after it is not.
    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 4,
                                              SMALL + ",learning_rate_constant=1e30",
                                              checkpoint_every=1))
    assert code == 2, out
    assert error_lines(out) == [
        f"error: the loss after the update became NaN or infinite at step 3; "
        f"stopped. The last good checkpoint is {output_dir}/model.ckpt-2. Lower the learning "
        f"rate (learning_rate_constant) or lengthen the warmup, then run again."], out
    assert tf.train.latest_checkpoint(str(output_dir)) == f"{output_dir}/model.ckpt-2"
    written = [path for path, digest in file_hashes(output_dir).items()
               if hashes.get(path) != digest]
    assert all(path.startswith(("train/", "eval/")) for path in written), written
