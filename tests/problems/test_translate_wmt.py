"""translate_ende_wmt14 end to end on TFDS's mock data: tfds.testing.mock_data replaces the
download and the prepared files with random strings of the dataset's features (here
{"de": text, "en": text}), so datagen runs as it would on the real WMT 2014 without a download."""
import os

import pytest
import tensorflow_datasets as tfds

from t2t_lite import registry
from t2t_lite.data import pipeline
from t2t_lite.data.vocab import EOS_ID

NUM_EXAMPLES = 1000  # per split; mock data gives every split the same random examples


@pytest.fixture(scope="module")
def wmt_data(tmp_path_factory):
    problem = registry.problem("translate_ende_wmt14")
    problem.approx_vocab_size = 200  # the mock text is random letters: a 32k vocabulary can't fit
    data_dir = str(tmp_path_factory.mktemp("data"))
    with tfds.testing.mock_data(num_examples=NUM_EXAMPLES):
        written = problem.generate_data(data_dir, str(tmp_path_factory.mktemp("tmp")))
    return problem, data_dir, written


def test_english_to_german_with_the_32k_vocabulary():
    problem = registry.problem("translate_ende_wmt14")
    assert (problem.source_language, problem.target_language) == ("en", "de")
    assert problem.approx_vocab_size == 32768
    assert problem.vocab_filename() == "vocab.translate_ende_wmt14.32768.bpe.model"


def test_datagen_writes_every_split(wmt_data):
    problem, data_dir, written = wmt_data
    assert set(written) == {"train", "dev", "test"}
    assert written["train"].records + sum(written["train"].skipped.values()) == NUM_EXAMPLES
    assert written["train"].records > 0.9 * NUM_EXAMPLES
    train = list(pipeline.read_examples(problem.filepattern(data_dir, "train"), False)
                 .as_numpy_iterator())
    assert len(train) == written["train"].records
    assert len([name for name in os.listdir(data_dir) if "-train-" in name]) == 10
    assert all(example["targets"][-1] == EOS_ID for example in train)
    with open(problem.text_paths(data_dir, "test")["inputs"], encoding="utf-8") as handle:
        assert len(handle.read().splitlines()) == NUM_EXAMPLES


def test_english_is_the_source(wmt_data):
    problem, data_dir, _ = wmt_data
    with tfds.testing.mock_data(num_examples=3):
        sample = next(problem.generate_samples(data_dir, "unused", "test"))
        pair = next(tfds.load("wmt14_translate/de-en", split="test").as_numpy_iterator())
    assert sample == {"inputs": pair["en"].decode("utf-8"), "targets": pair["de"].decode("utf-8")}


def test_vocabulary_round_trips(wmt_data):
    problem, data_dir, _ = wmt_data
    encoder = problem.feature_encoders(data_dir)["targets"]
    assert 100 <= encoder.vocab_size <= 300
    with open(problem.text_paths(data_dir, "test")["targets"], encoding="utf-8") as handle:
        sentences = handle.read().splitlines()[:100]
    for sentence in sentences:
        assert encoder.decode(encoder.encode(sentence)) == sentence
