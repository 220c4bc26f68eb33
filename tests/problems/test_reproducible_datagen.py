"""Two datagen runs on the same raw data with the same settings, each in its own process,
write byte-identical files. Their own processes matter: protobuf's map order, which decided the
bytes of every record before records were serialized deterministically, changes per process.
The first run is this test's process; the second runs this file as a program."""
import os
import random
import shutil
import subprocess
import sys

import pytest

from t2t_lite import registry

WORDS = "house garden river light stone water city night friend music paper window".split()


def datagen(data_dir, train_source, train_target, dev_source, dev_target):
    """algorithmic_copy with fewer sequences into data_dir/copy, and translate_text_files on
    the given files into data_dir/files."""
    copy = registry.problem("algorithmic_copy")
    copy.num_samples = {"train": 400, "dev": 40, "test": 5}
    copy.generate_data(os.path.join(data_dir, "copy"), os.path.join(data_dir, "tmp"))
    files = registry.problem("translate_text_files").configure(
        (train_source, train_target), (dev_source, dev_target), vocab_size=100)
    files.generate_data(os.path.join(data_dir, "files"), os.path.join(data_dir, "tmp"))


def write_pair(folder, name, count, seed):
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) + f" {n}."
             for n in range(count)]
    paths = (str(folder / f"{name}.en"), str(folder / f"{name}.de"))
    for path, side in zip(paths, (lines, [line.upper() for line in lines])):
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(line + "\n" for line in side)
    return paths


def contents(folder):
    return {name: open(os.path.join(folder, name), "rb").read()
            for name in sorted(os.listdir(folder))}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two data folders from two processes. The second gets the first one's SentencePiece
    vocabulary before it runs, so that the records are compared for one vocabulary whether or
    not training the vocabulary is itself reproducible (vocab.py's concern)."""
    raw = tmp_path_factory.mktemp("raw")
    files = [*write_pair(raw, "train", 300, seed=1), *write_pair(raw, "dev", 20, seed=2)]
    first, second = (str(tmp_path_factory.mktemp(f"run{i}")) for i in (1, 2))
    datagen(first, *files)
    vocabulary = os.path.join("files", "vocab.translate_text_files.bpe.model")
    os.makedirs(os.path.join(second, "files"))
    shutil.copy(os.path.join(first, vocabulary), os.path.join(second, vocabulary))
    result = subprocess.run([sys.executable, __file__, second, *files], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return first, second


@pytest.mark.parametrize("problem_folder", ["copy", "files"])
def test_datagen_is_byte_identical(two_runs, problem_folder):
    first, second = (contents(os.path.join(folder, problem_folder)) for folder in two_runs)
    assert len([name for name in first if "-train-" in name]) == 10
    assert [name for name in first if name.endswith(".manifest.json")] != []
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []


if __name__ == "__main__":
    datagen(*sys.argv[1:])
