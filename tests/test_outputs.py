"""storage.outputs, the one way a program opens what it writes: a path of the wrong kind or
one that cannot be written is one error naming the flag before any work, a second writer of
the same output is refused, and a failure leaves no folder the program made. Each program
goes through it: datagen (--data_dir, --tmp_dir) and the decoder (--decode_to_file) here,
the exporter's --export_dir in tests/serving/test_export.py."""
import contextlib
import gzip
import os
import shutil
import subprocess

import pytest

from program_runs import error_lines, file_hashes, run
from t2t_lite.errors import FlagError
from t2t_lite.storage import outputs
from t2t_lite.storage.output_lock import OutputLockedError


def test_a_failed_block_releases_the_lock_and_removes_the_folders_it_made(tmp_path):
    output = outputs.Output.folder(str(tmp_path / "new" / "run"), "output_dir")
    with pytest.raises(RuntimeError), outputs.opened(output):
        assert (tmp_path / "new" / "run" / "t2t_lite.lock").exists()
        raise RuntimeError("the work failed")
    assert not (tmp_path / "new").exists()


def test_a_second_writer_of_a_file_is_refused_by_check_and_by_opened(tmp_path):
    path = str(tmp_path / "out.txt")
    with outputs.opened(outputs.Output.file(path, "decode_to_file")):
        assert (tmp_path / ".out.txt.lock").exists()
        with pytest.raises(OutputLockedError, match=r"cannot write --decode_to_file="):
            outputs.Output.file(path, "decode_to_file").check()
        with pytest.raises(OutputLockedError), \
                outputs.opened(outputs.Output.file(path, "decode_to_file")):
            pass
    assert not (tmp_path / ".out.txt.lock").exists()


def test_an_output_that_is_an_input_is_refused_by_any_spelling(tmp_path, monkeypatch):
    """The same file by its name, ./name, a symlink or a hard link; another file, or an input
    not given, is no refusal."""
    source = tmp_path / "source.txt"
    source.write_text("3 7 1\n")
    os.symlink(source, tmp_path / "link.txt")
    os.link(source, tmp_path / "hard.txt")
    monkeypatch.chdir(tmp_path)
    inputs = {"decode_from_file": "source.txt", "score_reference": None}
    for spelling in ("source.txt", "./source.txt", str(source), "link.txt", "hard.txt"):
        with pytest.raises(FlagError) as refused:
            outputs.Output.file(spelling, "decode_to_file").check(inputs)
        assert str(refused.value) == (
            f"--decode_to_file={spelling} is the file --decode_from_file=source.txt reads: "
            f"writing it would lose it; choose another file for --decode_to_file")
    outputs.Output.file("other.txt", "decode_to_file").check(inputs)
    assert source.read_text() == "3 7 1\n" and not (tmp_path / "other.txt").exists()


@pytest.mark.parametrize("form, in_the_way, message", [
    (outputs.Output.folder, "file", "is a file, not a folder"),
    (outputs.Output.whole_folder, "file", "is a file: give the name of a folder"),
    (outputs.Output.file, "folder", "is a folder: give a file name")])
def test_a_path_of_the_wrong_kind_is_refused_naming_the_flag(tmp_path, form, in_the_way,
                                                             message):
    path = tmp_path / "there"
    if in_the_way == "file":
        path.write_text("kept")
    else:
        path.mkdir()
    output = form(str(path), "flag")
    with pytest.raises(FlagError, match=f"--flag={path} {message}"):
        output.check()
    with pytest.raises(FlagError, match=message), outputs.opened(output):
        pass
    assert (path.read_text() == "kept") if in_the_way == "file" else path.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["there"]  # no lock, no temporary


@pytest.mark.parametrize("flag", ["data_dir", "tmp_dir"])
def test_datagen_into_a_file_is_one_error_line(tmp_path, flag):
    folders = {"data_dir": tmp_path / "data", "tmp_dir": tmp_path / "tmp"}
    folders[flag].write_text("a file")
    code, out = run("datagen", "--problem=algorithmic_copy",
                    *(f"--{name}={path}" for name, path in folders.items()))
    assert code == 2 and error_lines(out) == [
        f"error: --{flag}={folders[flag]} is a file, not a folder: choose a folder"], out
    assert "Traceback" not in out and folders[flag].read_text() == "a file"


@contextlib.contextmanager
def immutable(folder):
    """The folder made read-only even for root (chattr +i), for the block; skips the test
    where the file system has no such attribute."""
    if shutil.which("chattr") is None or subprocess.run(
            ["chattr", "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_datagen_into_a_read_only_data_folder_is_one_error_line(data_dir, tmp_path):
    """Even a complete one: datagen locks the folder before it verifies what is there."""
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    before = file_hashes(data)
    with immutable(data):
        code, out = run("datagen", "--problem=algorithmic_copy", f"--data_dir={data}",
                        f"--tmp_dir={tmp_path / 'tmp'}")
    assert code == 2 and len(error_lines(out)) == 1, out
    assert error_lines(out)[0].startswith(f"error: --data_dir={data}: cannot write in {data}")
    assert "Traceback" not in out and file_hashes(data) == before


def test_a_cut_gzip_file_is_one_error_line_naming_it(tmp_path):
    pairs = "".join(f"sentence {i}\n" for i in range(2000)).encode()
    files = {f"{split}_{side}": tmp_path / f"{split}.{side}.gz"
             for split in ("train", "dev") for side in ("source", "target")}
    for path in files.values():
        path.write_bytes(gzip.compress(pairs))
    source = files["train_source"]
    source.write_bytes(source.read_bytes()[:-200])  # a download cut short
    code, out = run("datagen", "--problem=translate_text_files", f"--data_dir={tmp_path / 'd'}",
                    f"--tmp_dir={tmp_path}", *(f"--{flag}={path}" for flag, path in files.items()),
                    "--approx_vocab_size=100")
    assert code == 2 and len(error_lines(out)) == 1, out
    assert error_lines(out)[0].startswith(f"error: cannot read {source}: its gzip data is cut "
                                          f"short or damaged"), out
    assert "Traceback" not in out
    assert not (tmp_path / "d").exists()  # found before the data folder was made


def test_two_decoders_never_write_one_file(trained_dir, data_dir, tmp_path):
    """The decoder holds --decode_to_file's lock while it writes: a second one is refused at
    once, naming the first, and the file stays the first's."""
    output = tmp_path / "out.txt"
    output.write_text("the first decoder's\n")
    with outputs.opened(outputs.Output.file(str(output), "decode_to_file")):
        code, out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={trained_dir}",
                        f"--decode_from_file={data_dir}/algorithmic_copy-test.inputs.txt",
                        f"--decode_to_file={output}")
    assert code == 2 and len(error_lines(out)) == 1, out
    assert error_lines(out)[0].startswith(f"error: cannot write --decode_to_file={output}")
    assert f"pid {os.getpid()}" in out
    assert output.read_text() == "the first decoder's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]

