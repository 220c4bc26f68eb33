"""The vocabulary is part of the model: hparams.json records the files the trainer's vocabulary
came from, and the decoder, the exporter, a resume and the averager refuse another one with one
error naming both files, before they write anything. Two translate_text_files folders with
SentencePiece vocabularies of the same size stand for a data folder emptied and generated again
with other files: before, the decoder translated with the wrong one into garbage, exit status 0,
and the trainer resumed the old checkpoints on it. hparams.json files written before the record
still work, with a warning."""
import hashlib
import json
import os
import random
import shutil

import pytest

from t2t_lite import registry
from t2t_lite.storage.run_description import (RunDescriptionError, VocabularyError, checked_vocabulary,
                                      saved_run, vocabulary_record)

from program_runs import SMALL_MODEL, error_lines, file_hashes, joined, run

HPARAMS = joined(SMALL_MODEL, "batch_size=256")
VOCABULARY_FILE = "vocab.translate_text_files.bpe.model"
WORDS = {"a": "house garden river light stone water city night friend music paper window bread "
              "road morning winter table mountain letter story".split(),
         "b": "cloud forest ocean shadow bridge castle flower summer dragon silver market "
              "island candle pocket thunder meadow ladder harbor engine sparrow".split()}


def write_pair(folder, name, words, count, seed):
    """A source file and its 'translation' (upper-cased), `count` lines of `words`."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))) + f" {n}."
             for n in range(count)]
    source, target = folder / f"{name}.en", folder / f"{name}.de"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    target.write_text("".join(line.upper() + "\n" for line in lines), encoding="utf-8")
    return str(source), str(target)


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory):
    """{"a": data_dir, "b": data_dir}: translate_text_files generated from other sentences,
    each with a SentencePiece vocabulary of 100 pieces, and the test source of "a"."""
    folders = {}
    for name, words in WORDS.items():
        raw = tmp_path_factory.mktemp(f"raw_{name}")
        problem = registry.problem("translate_text_files").configure(
            write_pair(raw, "train", words, 300, 1), write_pair(raw, "dev", words, 20, 2),
            write_pair(raw, "test", words, 20, 3), vocab_size=100)
        folders[name] = str(tmp_path_factory.mktemp(f"data_{name}"))
        problem.generate_data(folders[name], str(raw))
        folders[f"{name}_test"] = str(raw / "test.en")
    problem = registry.problem("translate_text_files")
    # The same size: the model builds and restores with either, as a user would find.
    assert problem.vocab_size(folders["a"]) == problem.vocab_size(folders["b"])
    assert sha256(vocabulary_path(folders["a"])) != sha256(vocabulary_path(folders["b"]))
    return folders


def vocabulary_path(data_dir) -> str:
    return os.path.join(data_dir, VOCABULARY_FILE)


def sha256(path) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def trainer_flags(data_dir, output_dir, steps: int) -> list:
    return ["--problem=translate_text_files", "--hparams_set=transformer_tiny",
            f"--hparams={HPARAMS}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--train_steps={steps}", "--eval_steps=1", "--eval_bleu_sentences=0",
            "--log_every_steps=1", "--save_checkpoints_steps=1"]


@pytest.fixture(scope="module")
def trained(data_dirs, tmp_path_factory):
    """Two steps on "a", a checkpoint at each; tests work on copies of it."""
    output_dir = tmp_path_factory.mktemp("trained") / "run"
    code, out = run("trainer", *trainer_flags(data_dirs["a"], output_dir, 2))
    assert code == 0, out
    return output_dir


@pytest.fixture
def run_copy(trained, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def without_record(output_dir):
    """output_dir's hparams.json without its vocabulary's record."""
    path = output_dir / "hparams.json"
    description = json.loads(path.read_text())
    del description["vocabulary"]
    path.write_text(json.dumps(description, indent=2))


def assert_refused_naming_both(code, out, data_dirs, record):
    """Exit status 2 and one error line that names the data folder's vocabulary file and the
    recorded one, with the start of each sha256, and the hparams.json that records it."""
    assert code == 2, out
    assert "Traceback" not in out
    errors = error_lines(out)
    assert len(errors) == 1, out
    for name in ("b", "a"):
        path = vocabulary_path(data_dirs[name])
        assert f"{path} (sha256 {sha256(path)[:12]})" in errors[0], errors[0]
    assert f"{record} records" in errors[0]
    assert errors[0].index(vocabulary_path(data_dirs["b"])) < errors[0].index(
        vocabulary_path(data_dirs["a"]))  # "b's file is not a's, which hparams.json records"


def decoder_flags(data_dir, output_dir, source, target) -> list:
    return [f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--decode_from_file={source}", f"--decode_to_file={target}",
            "--decode_hparams=beam_size=1,extra_length=2"]


def test_hparams_json_records_the_vocabulary_files(data_dirs, trained):
    record = json.loads((trained / "hparams.json").read_text())["vocabulary"]
    path = vocabulary_path(data_dirs["a"])
    assert record == {"data_dir": data_dirs["a"], "vocab_size": 100,
                      "files": [{"name": VOCABULARY_FILE, "sha256": sha256(path)}]}
    assert saved_run(str(trained))["problem"] == "translate_text_files"  # read as before


def test_the_decoder_refuses_another_vocabulary(data_dirs, trained, tmp_path):
    before = file_hashes(trained)
    target = tmp_path / "decoded" / "test.de"
    code, out = run("decoder", *decoder_flags(data_dirs["b"], trained, data_dirs["a_test"],
                                              target))
    assert_refused_naming_both(code, out, data_dirs, trained / "hparams.json")
    assert not (tmp_path / "decoded").exists()  # not even the folder made for the output
    assert file_hashes(trained) == before

    code, out = run("decoder", *decoder_flags(data_dirs["a"], trained, data_dirs["a_test"],
                                              target))
    assert code == 0, out  # with its own vocabulary it decodes
    assert len(target.read_text().splitlines()) == 20


def test_the_exporter_refuses_another_vocabulary(data_dirs, trained, tmp_path):
    export_dir = tmp_path / "models" / "copy" / "1"
    code, out = run("exporter", f"--data_dir={data_dirs['b']}", f"--output_dir={trained}",
                    f"--export_dir={export_dir}")
    assert_refused_naming_both(code, out, data_dirs, trained / "hparams.json")
    assert not (tmp_path / "models").exists()  # no folder, no lock, no temporary

    code, out = run("exporter", f"--data_dir={data_dirs['a']}", f"--output_dir={trained}",
                    f"--export_dir={export_dir}")
    assert code == 0, out
    exported = json.loads((export_dir / "hparams.json").read_text())
    assert exported["vocabulary"] == json.loads((trained / "hparams.json").read_text())[
        "vocabulary"]  # the SavedModel's record names the vocabulary inside it


def test_a_resume_refuses_another_vocabulary(data_dirs, run_copy):
    """The brief's case: the data folder emptied and generated again from other files."""
    before = file_hashes(run_copy)
    code, out = run("trainer", *trainer_flags(data_dirs["b"], run_copy, 3))
    assert_refused_naming_both(code, out, data_dirs, run_copy / "hparams.json")
    assert "--output_dir" in error_lines(out)[0]  # to train on it: a new folder
    assert "resuming from" not in out
    assert file_hashes(run_copy) == before

    code, out = run("trainer", *trainer_flags(data_dirs["a"], run_copy, 3))
    assert code == 0, out
    assert f"resuming from {run_copy}/model.ckpt-2" in out


def test_the_average_keeps_the_record_and_is_refused_another_vocabulary(data_dirs, run_copy,
                                                                        tmp_path):
    out_path = run_copy / "averaged" / "model.ckpt"
    code, out = run("avg_checkpoints", f"--output_dir={run_copy}", "--num_last=2",
                    f"--out={out_path}")
    assert code == 0, out
    copy = run_copy / "averaged" / "hparams.json"
    assert json.loads(copy.read_text())["vocabulary"] == json.loads(
        (run_copy / "hparams.json").read_text())["vocabulary"]

    # The averaged folder as the decoder's --output_dir: its copy of the record decides.
    target = tmp_path / "decoded.de"
    code, out = run("decoder", *decoder_flags(data_dirs["b"], run_copy / "averaged",
                                              data_dirs["a_test"], target),
                    f"--checkpoint_path={out_path}")
    assert_refused_naming_both(code, out, data_dirs, copy)
    assert not target.exists()


def test_the_averager_refuses_a_kept_record_of_another_vocabulary(data_dirs, trained, run_copy,
                                                                  tmp_path):
    """An average of a run on "b" into the folder that keeps the hparams.json of an average of
    the run on "a": the decoder would read the new average with "a"'s record. (The run on "b"
    is a copy of the run on "a" whose hparams.json records "b"'s vocabulary, as the trainer
    records it: the averager reads no more of it.)"""
    out_path = run_copy / "averaged" / "model.ckpt"
    code, out = run("avg_checkpoints", f"--output_dir={run_copy}", "--num_last=1",
                    f"--out={out_path}")
    assert code == 0, out
    before = file_hashes(run_copy)
    other_run = tmp_path / "run_b"
    shutil.copytree(trained, other_run)
    description = json.loads((other_run / "hparams.json").read_text())
    description["vocabulary"] = vocabulary_record(registry.problem("translate_text_files"),
                                                  data_dirs["b"])
    (other_run / "hparams.json").write_text(json.dumps(description, indent=2))
    code, out = run("avg_checkpoints", f"--output_dir={other_run}", "--num_last=1",
                    f"--out={out_path}")
    assert code == 2, out
    errors = error_lines(out)
    assert len(errors) == 1 and "Traceback" not in out, out
    for name in ("a", "b"):
        path = vocabulary_path(data_dirs[name])
        assert f"{path} (sha256 {sha256(path)[:12]})" in errors[0]
    assert str(run_copy / "averaged" / "hparams.json") in errors[0]
    assert file_hashes(run_copy) == before


def test_an_hparams_json_without_the_record_is_refused(data_dirs, run_copy, tmp_path):
    """Without the vocabulary's record nothing tells whether --data_dir holds the vocabulary
    the model was trained with: the decoder, the exporter and a resume refuse the record."""
    without_record(run_copy)
    before = file_hashes(run_copy)
    commands = [
        ("decoder", *decoder_flags(data_dirs["a"], run_copy, data_dirs["a_test"],
                                   tmp_path / "decoded.de")),
        ("exporter", f"--data_dir={data_dirs['a']}", f"--output_dir={run_copy}",
         f"--export_dir={tmp_path / 'export'}"),
        ("trainer", *trainer_flags(data_dirs["a"], run_copy, 3))]
    for program, *flags in commands:
        code, out = run(program, *flags)
        assert code == 2, out
        errors = error_lines(out)
        assert len(errors) == 1 and "Traceback" not in out, out
        assert f"{run_copy}/hparams.json cannot be read: it has no 'vocabulary'" in errors[0]
    assert file_hashes(run_copy) == before
    assert not (tmp_path / "decoded.de").exists() and not (tmp_path / "export").exists()


class Problem:
    """A problem's vocabulary as vocabulary_record reads it."""

    def __init__(self, files=(), size=12):
        self.files, self.size = list(files), size

    def vocabulary_files(self, data_dir):
        return self.files

    def vocab_size(self, data_dir):
        return self.size


def test_a_vocabulary_without_files_is_recorded_and_checked_by_its_size(tmp_path):
    from t2t_lite.hparams_lib import HParams
    from t2t_lite.storage.run_description import save_run_description
    copy_record = vocabulary_record(registry.problem("algorithmic_copy"), str(tmp_path))
    assert copy_record == {"data_dir": str(tmp_path), "vocab_size": 12, "files": []}
    save_run_description(str(tmp_path), "algorithmic_copy", "transformer", HParams(),
                         copy_record)
    assert checked_vocabulary(str(tmp_path), Problem(size=12), "D") == copy_record
    with pytest.raises(VocabularyError, match="a vocabulary of 14 ids without a file is not "
                                              "a vocabulary of 12 ids without a file"):
        checked_vocabulary(str(tmp_path), Problem(size=14), "D")


@pytest.mark.parametrize("record, fault", [
    ("[]", "'vocabulary' is []"),
    ('{"vocab_size": 12}', "'vocabulary' is {'vocab_size': 12}"),
    ('{"vocab_size": 12, "files": [{"name": "v.model"}]}', "{'name': 'v.model'}"),
])
def test_a_damaged_record_is_one_error_naming_the_file(tmp_path, record, fault):
    path = tmp_path / "hparams.json"
    path.write_text(f'{{"problem": "p", "model": "transformer", "hparams": {{}}, '
                    f'"vocabulary": {record}}}')
    with pytest.raises(RunDescriptionError, match=f"{path} cannot be read") as error:
        saved_run(str(tmp_path))
    assert fault in str(error.value)


def test_a_vocabulary_is_its_files_contents_whatever_their_names():
    """A vocabulary that datagen's --vocab_from copied under another problem's file name is the
    same vocabulary; the messages still name the files."""
    from t2t_lite.storage.run_description import same_vocabulary, vocabulary_difference
    record = {"data_dir": "/a", "vocab_size": 100,
              "files": [{"name": "vocab.translate_multi30k_deen.8192.bpe.model",
                         "sha256": "1" * 64}]}
    copied = {"data_dir": "/b", "vocab_size": 100,
              "files": [{"name": VOCABULARY_FILE, "sha256": "1" * 64}]}
    other = {**copied, "files": [{"name": VOCABULARY_FILE, "sha256": "2" * 64}]}
    assert same_vocabulary(record, copied) and same_vocabulary(copied, record)
    assert not same_vocabulary(record, other)
    assert vocabulary_difference(record, "/r/hparams.json", other) == (
        f"/b/{VOCABULARY_FILE} (sha256 {'2' * 12}) is not "
        f"/a/vocab.translate_multi30k_deen.8192.bpe.model (sha256 {'1' * 12}), which "
        f"/r/hparams.json records")
