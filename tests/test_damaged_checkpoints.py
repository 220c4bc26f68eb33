"""A damaged checkpoint (its .data or .index file cut to half, or a byte of its values changed)
is one error in every program that reads it: it names the damaged file and the latest
checkpoint that restores, with the flag that uses it, and changes nothing. The trainer's says
which files to move away; once they are, the same command resumes from the earlier one."""
import shutil

import pytest

from program_runs import error_lines, file_hashes, run, trainer_flags


def cut_to_half(path):
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def change_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 10] ^= 0xFF  # inside a model variable
    path.write_bytes(bytes(data))


# The latest of trained_dir's two checkpoints, damaged.
DAMAGES = {
    "data cut": ("model.ckpt-2.data-00000-of-00001", cut_to_half),
    "index cut": ("model.ckpt-2.index", cut_to_half),
    "data changed": ("model.ckpt-2.data-00000-of-00001", change_a_byte),
}


def damaged_copy(trained_dir, tmp_path, kind: str) -> tuple:
    """(a copy of conftest's trained_dir with the damage `kind`, the damaged file)."""
    copy = tmp_path / "run"
    shutil.copytree(trained_dir, copy)
    name, damage = DAMAGES[kind]
    damage(copy / name)
    return copy, copy / name


@pytest.fixture(params=sorted(DAMAGES))
def damaged(request, trained_dir, tmp_path):
    return damaged_copy(trained_dir, tmp_path, request.param)


def trainer_advice(output_dir) -> str:
    """The end of the trainer's error line for a damaged model.ckpt-2 of output_dir."""
    return (f"the checkpoint {output_dir}/model.ckpt-2 cannot be restored. The latest checkpoint "
            f"that restores is {output_dir}/model.ckpt-1: move {output_dir}/model.ckpt-2.index "
            f"and {output_dir}/model.ckpt-2.data-* out of {output_dir}, and the same command "
            f"resumes from {output_dir}/model.ckpt-1")


@pytest.mark.parametrize("program", ["decoder", "decoder in float32", "exporter", "averager"])
def test_each_reader_names_the_damaged_file_and_the_checkpoint_that_restores(
        data_dir, damaged, program, tmp_path):
    output_dir, damaged_file = damaged
    before = file_hashes(output_dir)
    flags = {
        "decoder": ["--decode_from_file=/dev/null"],
        "decoder in float32": ["--decode_from_file=/dev/null", "--hparams=mixed_precision=float32"],
        "exporter": [f"--export_dir={tmp_path}/export"],
        "averager": ["--num_last=2", f"--out={tmp_path}/averaged/model.ckpt"],
    }[program]
    name = {"averager": "avg_checkpoints"}.get(program, program.split()[0])
    data_flag = [] if name == "avg_checkpoints" else [f"--data_dir={data_dir}"]
    code, out = run(name, *data_flag, f"--output_dir={output_dir}", *flags)
    assert code == 2, out
    assert len(error_lines(out)) == 1 and "Traceback" not in out, out
    line = error_lines(out)[0]
    assert line.startswith(f"error: {damaged_file} is damaged (")
    assert (f"the checkpoint {output_dir}/model.ckpt-2 cannot be restored. The latest checkpoint "
            f"that restores is {output_dir}/model.ckpt-1: "
            f"--checkpoint_path={output_dir}/model.ckpt-1 decodes or exports it") in line
    assert file_hashes(output_dir) == before
    assert not (tmp_path / "export").exists() and not (tmp_path / "averaged").exists()


def test_the_trainer_says_what_to_move(data_dir, damaged):
    output_dir, damaged_file = damaged
    before = file_hashes(output_dir)
    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 3))
    assert code == 2, out
    assert len(error_lines(out)) == 1 and "Traceback" not in out, out
    assert error_lines(out)[0].startswith(f"error: {damaged_file} is damaged (")
    assert error_lines(out)[0].endswith(trainer_advice(output_dir))
    assert file_hashes(output_dir) == before
    assert not (output_dir / "t2t_lite.lock").exists()


def test_once_they_are_moved_the_same_command_resumes_from_the_earlier_one(
        data_dir, trained_dir, tmp_path):
    """What trainer_advice says, for one damage: once its files are moved away, the folder is
    the same whatever the damage."""
    output_dir, _ = damaged_copy(trained_dir, tmp_path, "data changed")
    moved = tmp_path / "moved"
    moved.mkdir()
    for path in output_dir.glob("model.ckpt-2.*"):
        path.rename(moved / path.name)
    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 3))
    assert code == 0, out
    assert f"resuming from {output_dir}/model.ckpt-1" in out and "from step 1 to 3" in out
    assert (output_dir / "model.ckpt-3.index").exists()


@pytest.mark.parametrize("when", ["before the index is read", "before the values are read"])
def test_a_checkpoint_removed_while_it_is_read_is_not_called_damaged(data_dir, trained_dir,
                                                                     tmp_path, monkeypatch,
                                                                     when):
    """The latest checkpoint, found by the decoder's and the exporter's load_model, is removed
    as a trainer with --keep_checkpoint_max removes the oldest, after it was found: the error
    names it as removed and the latest checkpoint there is now."""
    import tensorflow as tf
    from tensorflow.python.checkpoint import checkpoint_management

    from t2t_lite import checkpoints, registry
    from t2t_lite.models.restoring import load_model
    from t2t_lite.storage.run_description import saved_run

    output_dir = tmp_path / "run"
    shutil.copytree(trained_dir, output_dir)
    removed, left = f"{output_dir}/model.ckpt-2", f"{output_dir}/model.ckpt-1"

    def remove_the_latest():
        checkpoint_management.remove_checkpoint(removed)
        checkpoint_management.update_checkpoint_state_internal(str(output_dir), left, [left])

    open_reader = tf.compat.v1.train.NewCheckpointReader

    def removed_first(path):
        if when == "before the index is read":
            remove_the_latest()
            return open_reader(path)
        opened = open_reader(path)
        remove_the_latest()
        return opened

    monkeypatch.setattr(tf.compat.v1.train, "NewCheckpointReader", removed_first)
    run = saved_run(str(output_dir))
    with pytest.raises(checkpoints.CheckpointError) as error:
        load_model(run["model"], run["hparams"].replace(mixed_precision="float32"),
                   registry.problem("algorithmic_copy").vocab_size(data_dir), str(output_dir))
    assert str(error.value) == (
        f"the checkpoint {removed} was removed while it was read (a trainer keeping "
        f"--keep_checkpoint_max checkpoints removes the oldest as it saves); the latest "
        f"checkpoint in {output_dir} is now {left}: the same command reads it "
        f"(or --checkpoint_path={left})")
