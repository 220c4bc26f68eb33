"""t2t_lite-datagen --vocab_from: data of another corpus that a trained model can go on training
on, since it encodes with the model's vocabulary rather than one trained on it. The parent is a
translate_multi30k_deen "model" (its data generated from small raw files, and the hparams.json
the trainer writes, with its vocabulary record); the new data is translate_text_files on a few
hundred other lines. The new ids are the parent's encoding of the new sentences, the parent's
record accepts the new folder (and refuses one whose vocabulary was trained anew), each split's
manifest says where the vocabulary came from, and every refusal is one error naming the files,
with nothing written."""
import gzip
import hashlib
import json
import os
import random
import shutil

import pytest

from t2t_lite import registry
from t2t_lite.data import pipeline, records, vocabulary_source
from t2t_lite.data.vocab import EOS_ID
from t2t_lite.errors import DataError
from t2t_lite.hparams_lib import HParams
from t2t_lite.storage.run_description import (VocabularyError, checked_vocabulary,
                                              same_vocabulary, save_run_description,
                                              vocabulary_record)

from program_runs import error_lines, file_hashes, run

WORDS = ("house garden river light stone water city night friend music paper window bread "
         "road morning winter table mountain letter story").split()
PARENT_VOCABULARY = "vocab.translate_multi30k_deen.100.bpe.model"
NEW_VOCABULARY = "vocab.translate_text_files.bpe.model"
MULTI30K_NAMES = {"train": "train", "dev": "val", "test": "test_2016_flickr"}


def sentences(count, seed, words=WORDS):
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) + f" {n}."
            for n in range(count)]


def sha256(path) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def parent_problem():
    problem = registry.problem("translate_multi30k_deen")
    problem.approx_vocab_size = 100
    return problem


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    """{"data_dir", "output_dir", "vocabulary"}: translate_multi30k_deen generated from small
    raw files (300 training pairs) with a vocabulary of 100 pieces, and an output folder whose
    hparams.json records that vocabulary as the trainer does (save_run_description with
    vocabulary_record)."""
    raw = tmp_path_factory.mktemp("multi30k_raw")
    for split, count, seed in (("train", 300, 1), ("dev", 20, 2), ("test", 20, 3)):
        lines = sentences(count, seed)
        for language, side in (("de", lines), ("en", [line.upper() for line in lines])):
            with gzip.open(raw / f"{MULTI30K_NAMES[split]}.{language}.gz", "wt",
                           encoding="utf-8") as handle:
                handle.writelines(line + "\n" for line in side)
    problem = parent_problem()
    data_dir = str(tmp_path_factory.mktemp("parent_data"))
    problem.generate_data(data_dir, str(raw))
    output_dir = tmp_path_factory.mktemp("parent_run") / "train"
    output_dir.mkdir()
    save_run_description(str(output_dir), problem.name, "transformer", HParams(),
                         vocabulary_record(problem, data_dir))
    return {"data_dir": data_dir, "output_dir": str(output_dir),
            "vocabulary": os.path.join(data_dir, PARENT_VOCABULARY)}


@pytest.fixture(scope="module")
def new_files(tmp_path_factory):
    """(train, dev, test) (source, target) pairs of the new corpus: other sentences."""
    folder = tmp_path_factory.mktemp("new_files")
    pairs = []
    for split, count, seed in (("train", 200, 11), ("dev", 15, 12), ("test", 10, 13)):
        lines = sentences(count, seed)
        source, target = folder / f"{split}.en", folder / f"{split}.de"
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        target.write_text("".join(line.upper() + "\n" for line in lines), encoding="utf-8")
        pairs.append((str(source), str(target)))
    return tuple(pairs)


def file_flags(new_files) -> list:
    (train, dev, test) = new_files
    return [f"--train_source={train[0]}", f"--train_target={train[1]}",
            f"--dev_source={dev[0]}", f"--dev_target={dev[1]}",
            f"--test_source={test[0]}", f"--test_target={test[1]}"]


@pytest.fixture(scope="module")
def generated(parent, new_files, tmp_path_factory):
    """(data_dir, output) of t2t_lite-datagen --vocab_from=the parent's output folder."""
    root = tmp_path_factory.mktemp("with_vocab_from")
    data_dir = root / "data"
    code, output = run("datagen", "--problem=translate_text_files", f"--data_dir={data_dir}",
                       f"--tmp_dir={root / 'tmp'}", *file_flags(new_files),
                       f"--vocab_from={parent['output_dir']}", timeout=300)
    assert code == 0, output
    return str(data_dir), output


def configured(new_files, vocab_size=None):
    return registry.problem("translate_text_files").configure(*new_files,
                                                              vocab_size=vocab_size)


@pytest.fixture(scope="module")
def trained_anew(new_files, tmp_path_factory):
    """The new corpus generated without --vocab_from: a vocabulary of 100 pieces trained on it,
    another than the parent's."""
    data_dir = str(tmp_path_factory.mktemp("trained_anew"))
    configured(new_files, 100).generate_data(data_dir, data_dir)
    return data_dir


def examples(problem, data_dir, split):
    """The (inputs, targets) id tuples of a split's shards, sorted (the shards are shuffled)."""
    return sorted((tuple(example["inputs"].numpy().tolist()),
                   tuple(example["targets"].numpy().tolist()))
                  for example in pipeline.read_examples(problem.filepattern(data_dir, split),
                                                        False))


def test_the_vocabulary_is_the_parents_under_the_new_problems_name(parent, generated):
    data_dir, output = generated
    copied = os.path.join(data_dir, NEW_VOCABULARY)
    with open(copied, "rb") as new, open(parent["vocabulary"], "rb") as old:
        assert new.read() == old.read()
    assert not [name for name in os.listdir(data_dir) if name.startswith("vocab.translate_multi")]
    assert f"vocabulary {copied} copied from {parent['vocabulary']}" in output
    assert "training a bpe vocabulary" not in output


def test_the_ids_are_the_parents_encoding_and_decode_back(parent, generated, new_files):
    data_dir, _ = generated
    encoder = parent_problem().feature_encoders(parent["data_dir"])["inputs"]
    problem = registry.problem("translate_text_files")
    for split, (source, target) in zip(("train", "dev"), new_files):
        with open(source, encoding="utf-8") as inputs, open(target, encoding="utf-8") as targets:
            pairs = [(line.rstrip("\n"), other.rstrip("\n"))
                     for line, other in zip(inputs, targets)]
        expected = sorted((tuple(encoder.encode(line) + [EOS_ID]),
                           tuple(encoder.encode(other) + [EOS_ID])) for line, other in pairs)
        found = examples(problem, data_dir, split)
        assert found == expected, split
        decoded = sorted((encoder.decode(ids), encoder.decode(other)) for ids, other in found)
        assert decoded == sorted(pairs)


def test_the_manifests_record_where_the_vocabulary_came_from(parent, generated, tmp_path):
    data_dir, _ = generated
    problem = registry.problem("translate_text_files")
    origin = {"from": parent["output_dir"], "file": parent["vocabulary"],
              "sha256": sha256(parent["vocabulary"])}
    for split in ("train", "dev"):
        manifest = problem.manifest_path(data_dir, split)
        assert records.manifest_vocabulary(manifest) == origin
        assert records.verify_manifest(manifest) is None
    parent_manifest = parent_problem().manifest_path(parent["data_dir"], "train")
    assert records.manifest_vocabulary(parent_manifest) == {
        "from": "trained", "sha256": sha256(parent["vocabulary"])}

    # A manifest of an earlier datagen, without the record, still verifies and reads.
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    for split in ("train", "dev"):
        path = problem.manifest_path(str(copy), split)
        manifest = json.loads(open(path, encoding="utf-8").read())
        del manifest["vocabulary"]
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle)
        assert records.verify_manifest(path) is None
        assert records.manifest_vocabulary(path) is None
        assert records.read_manifest(path)["records"] == manifest["records"]
    problem.check_data(str(copy))


def test_the_parent_model_accepts_the_new_folder_and_refuses_one_trained_anew(parent, generated,
                                                                              trained_anew):
    data_dir, _ = generated
    problem = registry.problem("translate_text_files")
    recorded = vocabulary_record(parent_problem(), parent["data_dir"])
    assert same_vocabulary(recorded, vocabulary_record(problem, data_dir))
    assert checked_vocabulary(parent["output_dir"], problem, data_dir) == recorded
    assert checked_vocabulary(parent["output_dir"], problem, data_dir, resuming=True) == recorded

    anew = os.path.join(trained_anew, NEW_VOCABULARY)
    assert sha256(anew) != sha256(parent["vocabulary"])
    assert not same_vocabulary(recorded, vocabulary_record(problem, trained_anew))
    with pytest.raises(VocabularyError) as refused:
        checked_vocabulary(parent["output_dir"], problem, trained_anew)
    message = str(refused.value)
    assert f"{anew} (sha256 {sha256(anew)[:12]}) is not" in message
    assert f"{parent['vocabulary']} (sha256 {sha256(parent['vocabulary'])[:12]})" in message


@pytest.mark.parametrize("kind", ["data folder", "model file"])
def test_a_data_folder_or_a_model_file_gives_the_same_vocabulary(parent, new_files, generated,
                                                                 tmp_path, kind):
    vocab_from = parent["data_dir"] if kind == "data folder" else parent["vocabulary"]
    data_dir = str(tmp_path / "data")
    configured(new_files).generate_data(data_dir, str(tmp_path / "tmp"), vocab_from=vocab_from)
    assert sha256(os.path.join(data_dir, NEW_VOCABULARY)) == sha256(parent["vocabulary"])
    problem = registry.problem("translate_text_files")
    assert records.manifest_vocabulary(problem.manifest_path(data_dir, "train")) == {
        "from": vocab_from, "file": parent["vocabulary"],
        "sha256": sha256(parent["vocabulary"])}
    assert examples(problem, data_dir, "train") == examples(problem, generated[0], "train")


def test_a_rerun_keeps_the_same_vocabulary(parent, new_files, generated, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(generated[0], data_dir)
    before = file_hashes(data_dir)
    for vocab_from in (parent["output_dir"], parent["data_dir"], parent["vocabulary"]):
        assert configured(new_files).generate_data(str(data_dir), str(tmp_path / "tmp"),
                                                   vocab_from=vocab_from) == {}
        assert file_hashes(data_dir) == before, vocab_from
    # and without --vocab_from: the copied vocabulary is kept, with its record of origin
    assert configured(new_files).generate_data(str(data_dir), str(tmp_path / "tmp")) == {}
    assert file_hashes(data_dir) == before


def refused(problem, data_dir, tmp_dir, vocab_from) -> str:
    """The DataError's message of generate_data with vocab_from."""
    with pytest.raises(DataError) as error:
        problem.generate_data(str(data_dir), str(tmp_dir), vocab_from=str(vocab_from))
    return str(error.value)


def test_a_folder_with_another_vocabulary_is_refused_naming_both(parent, new_files, generated,
                                                                 trained_anew, tmp_path):
    parent_vocabulary = f"{parent['vocabulary']} (sha256 {sha256(parent['vocabulary'])[:12]}"
    # A vocabulary trained in the folder
    data_dir = tmp_path / "trained"
    shutil.copytree(trained_anew, data_dir)
    before = file_hashes(data_dir)
    anew = data_dir / NEW_VOCABULARY
    message = refused(configured(new_files), data_dir, tmp_path / "tmp", parent["output_dir"])
    assert message.startswith(f"--data_dir={data_dir} already holds another vocabulary: "
                              f"{anew} (sha256 {sha256(anew)[:12]}, trained there) is not "
                              f"{parent_vocabulary}), from --vocab_from={parent['output_dir']}")
    assert file_hashes(data_dir) == before
    assert not (tmp_path / "tmp").exists()

    # A vocabulary taken from another --vocab_from
    data_dir = tmp_path / "copied"
    shutil.copytree(generated[0], data_dir)
    before = file_hashes(data_dir)
    copied = data_dir / NEW_VOCABULARY
    message = refused(configured(new_files), data_dir, tmp_path / "tmp", trained_anew)
    assert message.startswith(f"--data_dir={data_dir} already holds another vocabulary: "
                              f"{copied} (sha256 {sha256(copied)[:12]}, taken from "
                              f"--vocab_from={parent['output_dir']}) is not "
                              f"{trained_anew}/{NEW_VOCABULARY}")
    assert file_hashes(data_dir) == before


def test_splits_encoded_with_a_vocabulary_that_is_gone_are_written_again(parent, new_files,
                                                                         trained_anew, generated,
                                                                         tmp_path):
    """The trained vocabulary deleted to take the parent's: the shards it encoded are not kept."""
    data_dir = tmp_path / "data"
    shutil.copytree(trained_anew, data_dir)
    os.remove(data_dir / NEW_VOCABULARY)
    written = configured(new_files).generate_data(str(data_dir), str(tmp_path / "tmp"),
                                                  vocab_from=parent["output_dir"])
    assert sorted(written) == ["dev", "train"]
    problem = registry.problem("translate_text_files")
    assert examples(problem, str(data_dir), "train") == examples(problem, generated[0], "train")


def write_record(output_dir, problem, data_dir, record=None):
    os.makedirs(output_dir)
    save_run_description(str(output_dir), problem.name, "transformer", HParams(),
                         record or vocabulary_record(problem, str(data_dir)))
    return output_dir


def test_each_source_without_one_vocabulary_is_refused_writing_nothing(parent, new_files,
                                                                       trained_anew, tmp_path):
    problem = configured(new_files)
    data_dir, tmp_dir = tmp_path / "data", tmp_path / "tmp"
    recorded = vocabulary_record(parent_problem(), parent["data_dir"])
    parent_sha256 = recorded["files"][0]["sha256"]

    missing = tmp_path / "nothing"
    assert refused(problem, data_dir, tmp_dir, missing) == (
        f"--vocab_from={missing}: no such file or folder")

    empty = tmp_path / "empty"
    empty.mkdir()
    assert refused(problem, data_dir, tmp_dir, empty).startswith(
        f"--vocab_from={empty} holds no vocabulary: neither a vocab.*.model")

    several = tmp_path / "several"
    several.mkdir()
    for name in (PARENT_VOCABULARY, NEW_VOCABULARY):
        shutil.copy(parent["vocabulary"], several / name)
    assert refused(problem, data_dir, tmp_dir, several) == (
        f"--vocab_from={several} holds several vocabularies ({PARENT_VOCABULARY}, "
        f"{NEW_VOCABULARY}): pass the one to take, e.g. "
        f"--vocab_from={several / PARENT_VOCABULARY}")

    # The record's data folder is gone, or was generated again with another vocabulary.
    gone = write_record(tmp_path / "gone_run", parent_problem(), None,
                        {**recorded, "data_dir": str(tmp_path / "gone_data")})
    gone_file = tmp_path / "gone_data" / PARENT_VOCABULARY
    assert refused(problem, data_dir, tmp_dir, gone) == (
        f"--vocab_from={gone}: {gone}/hparams.json records the vocabulary {gone_file} (sha256 "
        f"{parent_sha256[:12]}), which is no longer there. Pass a copy of that file with "
        f"--vocab_from=FILE")
    again = tmp_path / "again_data"
    shutil.copytree(parent["data_dir"], again)
    shutil.copy(os.path.join(trained_anew, NEW_VOCABULARY), again / PARENT_VOCABULARY)
    other_run = write_record(tmp_path / "again_run", parent_problem(), None,
                             {**recorded, "data_dir": str(again)})
    message = refused(problem, data_dir, tmp_dir, other_run)
    other_sha256 = sha256(again / PARENT_VOCABULARY)
    assert message.startswith(
        f"--vocab_from={other_run}: {again / PARENT_VOCABULARY} (sha256 {other_sha256[:12]}) "
        f"is not the vocabulary the model was trained with: {other_run}/hparams.json records "
        f"{again / PARENT_VOCABULARY} with sha256 {parent_sha256[:12]}")

    foreign = tmp_path / "foreign.model"
    foreign.write_bytes(b"not a SentencePiece model")
    assert refused(problem, data_dir, tmp_dir, foreign).startswith(
        f"--vocab_from={foreign}: {foreign} is not a SentencePiece vocabulary of t2t_lite")

    copy_problem = registry.problem("algorithmic_copy")
    in_code = write_record(tmp_path / "copy_run", copy_problem, tmp_path)
    assert refused(problem, data_dir, tmp_dir, in_code) == (
        f"--vocab_from={in_code}: the model there has a vocabulary made in code (12 ids, see "
        f"{in_code}/hparams.json), not a file to take")

    assert not data_dir.exists() and not tmp_dir.exists()


@pytest.mark.parametrize("contents", [b"", b"not a SentencePiece model", b"\x0a\x02ab"],
                         ids=["empty", "text", "another protobuf"])
def test_a_file_that_is_no_vocabulary_is_the_one_error_without_sentencepiece_lines(
        tmp_path, capfd, contents):
    """SentencePiece's C++ logging writes to the process's stderr itself ("Model is not
    initialized" for an empty file): nothing but the error may reach it."""
    foreign = tmp_path / "foreign.model"
    foreign.write_bytes(contents)
    capfd.readouterr()
    with pytest.raises(DataError, match="is not a SentencePiece vocabulary of t2t_lite"):
        vocabulary_source.find(str(foreign))
    assert capfd.readouterr() == ("", "")


def test_a_problem_whose_vocabulary_is_made_in_code_is_refused(parent, tmp_path):
    code, output = run("datagen", "--problem=algorithmic_copy", f"--data_dir={tmp_path}/data",
                       f"--tmp_dir={tmp_path}/tmp", f"--vocab_from={parent['output_dir']}")
    assert code == 2, output
    assert "Traceback" not in output
    assert error_lines(output) == [
        f"error: --vocab_from={parent['output_dir']} is not for algorithmic_copy: its "
        f"vocabulary is made in code (12 ids, the same in every data folder), not a file to "
        f"take from another. Generate its data without --vocab_from"]
    assert os.listdir(tmp_path) == []


def test_a_vocabulary_size_with_vocab_from_is_refused(parent, new_files, tmp_path):
    code, output = run("datagen", "--problem=translate_text_files",
                       f"--data_dir={tmp_path}/data", f"--tmp_dir={tmp_path}/tmp",
                       *file_flags(new_files), "--approx_vocab_size=100",
                       f"--vocab_from={parent['output_dir']}")
    assert code == 2, output
    errors = error_lines(output)
    assert len(errors) == 1 and "Traceback" not in output, output
    assert errors[0].startswith("error: --approx_vocab_size sizes a vocabulary trained here, "
                                "and --vocab_from takes one as it is")
    assert os.listdir(tmp_path) == []


def test_the_origin_record_is_not_a_name_that_starts_with_the_vocabularys():
    path = "/d/vocab.translate_text_files.bpe.model"
    assert vocabulary_source.origin_path(path) == "/d/vocab.translate_text_files.bpe.origin.json"
    assert not vocabulary_source.origin_path(path).startswith(path)
