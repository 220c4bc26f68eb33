"""A damaged checkpoint (its .data or .index file cut to half, or a byte of its values changed)
is one error in every program that reads it: it names the damaged file and the latest
checkpoint that restores, with the flag that uses it, and changes nothing. The trainer's says
which files to move away; once they are, the same command resumes from the earlier one."""
import shutil

import pytest

from program_runs import file_hashes, run, trainer_flags


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(300, 20)


@pytest.fixture(scope="module")
def trained_dir(data_dir, tmp_path_factory):
    """Checkpoints at steps 2 and 4; tests damage copies of it."""
    output_dir = tmp_path_factory.mktemp("trained") / "run"
    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 4, checkpoint_every=2))
    assert code == 0, out
    return output_dir


def cut_to_half(path):
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def change_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 10] ^= 0xFF  # inside a model variable
    path.write_bytes(bytes(data))


DAMAGES = {
    "data cut": ("model.ckpt-4.data-00000-of-00001", cut_to_half),
    "index cut": ("model.ckpt-4.index", cut_to_half),
    "data changed": ("model.ckpt-4.data-00000-of-00001", change_a_byte),
}


@pytest.fixture(params=sorted(DAMAGES))
def damaged(request, trained_dir, tmp_path):
    """(the damaged copy of the run, the damaged file)."""
    copy = tmp_path / "run"
    shutil.copytree(trained_dir, copy)
    name, damage = DAMAGES[request.param]
    damage(copy / name)
    return copy, copy / name


def error_lines(out: str) -> list:
    return [line for line in out.splitlines() if line.startswith("error:")]


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
    assert (f"the checkpoint {output_dir}/model.ckpt-4 cannot be restored. The latest checkpoint "
            f"that restores is {output_dir}/model.ckpt-2: "
            f"--checkpoint_path={output_dir}/model.ckpt-2 decodes or exports it") in line
    assert file_hashes(output_dir) == before
    assert not (tmp_path / "export").exists() and not (tmp_path / "averaged").exists()


def test_the_trainer_says_what_to_move_and_then_resumes_from_the_earlier_one(
        data_dir, damaged, tmp_path):
    output_dir, damaged_file = damaged
    before = file_hashes(output_dir)
    flags = trainer_flags(data_dir, output_dir, 6, checkpoint_every=2)
    code, out = run("trainer", *flags)
    assert code == 2, out
    assert len(error_lines(out)) == 1 and "Traceback" not in out, out
    assert error_lines(out)[0].startswith(f"error: {damaged_file} is damaged (")
    assert error_lines(out)[0].endswith(
        f"the checkpoint {output_dir}/model.ckpt-4 cannot be restored. The latest checkpoint "
        f"that restores is {output_dir}/model.ckpt-2: move {output_dir}/model.ckpt-4.index and "
        f"{output_dir}/model.ckpt-4.data-* out of {output_dir}, and the same command resumes "
        f"from {output_dir}/model.ckpt-2")
    assert file_hashes(output_dir) == before
    assert not (output_dir / "t2t_lite.lock").exists()

    moved = tmp_path / "moved"
    moved.mkdir()
    for path in output_dir.glob("model.ckpt-4.*"):
        path.rename(moved / path.name)
    code, out = run("trainer", *flags)
    assert code == 0, out
    assert f"resuming from {output_dir}/model.ckpt-2" in out and "from step 2 to 6" in out
    assert (output_dir / "model.ckpt-6.index").exists()
