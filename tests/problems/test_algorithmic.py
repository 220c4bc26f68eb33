import os

import pytest

from t2t_lite import registry
from t2t_lite.data import pipeline
from t2t_lite.data.vocab import EOS_ID


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory):
    problem = registry.problem("algorithmic_copy")
    problem.num_samples = {"train": 2000, "dev": 200, "test": 100}
    data_dir = str(tmp_path_factory.mktemp("data"))
    problem.generate_data(data_dir, str(tmp_path_factory.mktemp("tmp")))
    return problem, data_dir


def test_encoders_round_trip_symbol_lines():
    encoder = registry.problem("algorithmic_copy").feature_encoders(None)["inputs"]
    assert encoder.encode("3 7 1") == [4, 8, 2]
    assert encoder.decode(encoder.encode("10 1 5")) == "10 1 5"
    assert encoder.decode([4, 8, EOS_ID, 5]) == "3 7"
    with pytest.raises(ValueError, match="'11' is not a symbol"):
        encoder.encode("3 11")


def test_reverse_reverses():
    problem = registry.problem("algorithmic_reverse")
    sample = next(problem.generate_samples(None, None, "dev"))
    assert sample["targets"].split() == sample["inputs"].split()[::-1]


def test_datagen_writes_shards_and_held_out_text(copy_data):
    problem, data_dir = copy_data
    examples = list(pipeline.read_examples(problem.filepattern(data_dir, "train"), False)
                    .as_numpy_iterator())
    assert len(examples) == 2000
    assert len([n for n in os.listdir(data_dir) if "-train-" in n]) == 10
    for example in examples[:50]:
        assert example["inputs"].tolist() == example["targets"].tolist()
        assert example["inputs"][-1] == EOS_ID and 2 <= len(example["inputs"]) <= 21
    texts = problem.text_paths(data_dir, "test")
    with open(texts["inputs"]) as handle:
        test_lines = handle.read().splitlines()
    assert len(test_lines) == 100
    training = {tuple(s["inputs"].split()) for s in problem.generate_samples(None, None, "train")}
    assert not any(tuple(line.split()) in training for line in test_lines)


def test_datagen_again_keeps_complete_splits(copy_data):
    problem, data_dir = copy_data
    path = problem.filepaths(data_dir, problem.dataset_splits()[0])[0]
    before = os.stat(path).st_mtime_ns
    problem.generate_data(data_dir, data_dir)
    assert os.stat(path).st_mtime_ns == before


def test_missing_data_names_the_pattern_and_the_fix(tmp_path):
    problem = registry.problem("algorithmic_copy")
    with pytest.raises(ValueError, match="t2t_lite-datagen --problem=algorithmic_copy"):
        problem.dataset("train", str(tmp_path), registry.hparams("transformer_tiny"), True)
