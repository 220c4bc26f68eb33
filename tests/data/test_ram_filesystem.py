"""The data side on a file system other than the local disk: TensorFlow's ram://, which stands for
gs:// and every other `tf.io.gfile` file system. Datagen writes there, the batches are read back
from there, and nothing reaches the working folder."""
import os
import uuid

import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.storage import atomic_files
from t2t_lite.hparams_lib import HParams

HPARAMS = HParams(batch_size=256, max_length=64)


def ram_folder(name: str) -> str:
    """A fresh ram:// folder (ram:// lives as long as the process: each test takes its own)."""
    return f"ram://{name}-{uuid.uuid4().hex}"


def write_lines(path: str, lines: list) -> str:
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write("".join(line + "\n" for line in lines))
    return path


def read_back(problem, data_dir: str, split: str) -> int:
    """The number of examples in the split's batches, read with problem.dataset."""
    batches = problem.dataset(split, data_dir, HPARAMS, training=False)
    return sum(int(batch["targets"].shape[0]) for batch in batches)


def no_temporary_left(folder: str) -> bool:
    return not [name for name in tf.io.gfile.listdir(folder)
                if name.endswith(atomic_files.INCOMPLETE_SUFFIX)]


@pytest.fixture
def empty_working_folder(tmp_path, monkeypatch):
    """The test runs in an empty folder that must stay empty: a ram:// path taken for a local
    one (os.path.abspath("ram://d") is "<cwd>/ram:/d") would be written here."""
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    assert os.listdir(tmp_path) == []


def test_algorithmic_copy_datagen_and_batches_on_ram(empty_working_folder):
    data_dir, tmp_dir = ram_folder("data"), ram_folder("tmp")
    problem = registry.problem("algorithmic_copy")
    problem.num_samples = {"train": 300, "dev": 40, "test": 10}

    written = problem.generate_data(data_dir, tmp_dir)

    assert {split: stats.records for split, stats in written.items()} == {
        "train": 300, "dev": 40, "test": 10}
    problem.check_data(data_dir)  # manifests, sizes and sha256 read through tf.io.gfile
    assert read_back(problem, data_dir, "train") == 300
    assert read_back(problem, data_dir, "dev") == 40
    test_inputs = problem.text_paths(data_dir, "test")["inputs"]
    with tf.io.gfile.GFile(test_inputs) as handle:
        assert len(handle.read().splitlines()) == 10
    assert no_temporary_left(data_dir)
    assert problem.generate_data(data_dir, tmp_dir) == {}  # complete splits are kept


def test_translate_text_files_datagen_and_batches_on_ram(empty_working_folder):
    raw, data_dir, tmp_dir = ram_folder("raw"), ram_folder("data"), ram_folder("tmp")
    words = "house garden river light stone water city night friend music".split()
    lines = {split: [" ".join(words[(i + k) % len(words)] for k in range(2 + i % 5))
                     for i in range(count)] for split, count in (("train", 200), ("dev", 20))}
    pairs = {split: (write_lines(f"{raw}/{split}.en", lines[split]),
                     write_lines(f"{raw}/{split}.de", [line.upper() for line in lines[split]]))
             for split in lines}
    problem = registry.problem("translate_text_files").configure(
        pairs["train"], pairs["dev"], vocab_size=100)

    written = problem.generate_data(data_dir, tmp_dir)

    assert {split: stats.records for split, stats in written.items()} == {
        "train": 200, "dev": 20}
    assert tf.io.gfile.exists(problem.vocab_path(data_dir))
    assert tf.io.gfile.exists(problem.config_path(data_dir))
    # The trainer's view: the problem by name, without the files' flags.
    reader = registry.problem("translate_text_files")
    assert read_back(reader, data_dir, "train") == 200
    assert read_back(reader, data_dir, "dev") == 20
    assert reader.vocab_size(data_dir) == problem.vocab_size(data_dir)
    assert no_temporary_left(data_dir)
    assert problem.generated_files(data_dir)


def test_gzip_text_is_read_through_gfile():
    from t2t_lite.data.text_files import read_lines
    import gzip
    path = f"{ram_folder('raw')}/lines.en.gz"
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(gzip.compress("eins\nzwei\n".encode("utf-8")))
    assert list(read_lines(path)) == ["eins", "zwei"]


def test_a_download_is_written_whole_through_gfile(tmp_path):
    from t2t_lite.data.text_files import maybe_download
    from t2t_lite.errors import DataError
    served = tmp_path / "served.txt"
    served.write_bytes(b"x" * 3_000_000)  # more than one chunk
    folder = ram_folder("download")
    path = maybe_download(folder, "raw.txt", served.as_uri())
    assert path == f"{folder}/raw.txt"
    with tf.io.gfile.GFile(path, "rb") as handle:
        assert handle.read() == served.read_bytes()
    served.unlink()
    assert maybe_download(folder, "raw.txt", served.as_uri()) == path  # kept, not fetched
    with pytest.raises(DataError, match=f"cannot download {served.as_uri()} to {folder}/gone"):
        maybe_download(folder, "gone.txt", served.as_uri())
    assert sorted(tf.io.gfile.listdir(folder)) == ["raw.txt"]  # nothing half-written
