"""translate_text_files as a user runs it: their own parallel files passed to t2t_lite-datagen by
flags, then the trainer's and the decoder's view (the problem by name, no configuration)."""
import gzip
import json
import os
import random
import shutil

import pytest

from t2t_lite import registry
from t2t_lite.data import pipeline
from t2t_lite.errors import DataError

from program_runs import run

WORDS = ("house garden river light stone water city night friend music paper window "
         "bread road morning winter table mountain letter story").split()


def sentences(count, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) + f" {n}."
            for n in range(count)]


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def write_pair(folder, name, count, seed):
    """A source file and its 'translation' (the words upper-cased), count lines each."""
    source = sentences(count, seed)
    return (write_lines(folder / f"{name}.en", source),
            write_lines(folder / f"{name}.de", [line.upper() for line in source]))


def datagen(*flags, expect_failure=False):
    code, output = run("datagen", *flags, timeout=300)
    assert (code != 0) == expect_failure, output
    return output


def file_flags(train, dev, test=None):
    flags = [f"--train_source={train[0]}", f"--train_target={train[1]}",
             f"--dev_source={dev[0]}", f"--dev_target={dev[1]}"]
    if test:
        flags += [f"--test_source={test[0]}", f"--test_target={test[1]}"]
    return flags


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Datagen on 600 training pairs (plus two empty lines), 50 dev and 30 test pairs."""
    folder = tmp_path_factory.mktemp("files")
    train = write_pair(folder, "train", 600, seed=1)
    with open(train[0], "a", encoding="utf-8") as source, \
            open(train[1], "a", encoding="utf-8") as target:
        source.write("\nan empty translation\n")
        target.write("A SENTENCE WITHOUT SOURCE\n\n")
    dev, test = write_pair(folder, "dev", 50, seed=2), write_pair(folder, "test", 30, seed=3)
    data_dir = str(tmp_path_factory.mktemp("data"))
    output = datagen("--problem=translate_text_files", f"--data_dir={data_dir}",
                     f"--tmp_dir={folder / 'tmp'}", *file_flags(train, dev, test),
                     "--source_language=en", "--target_language=de", "--approx_vocab_size=100")
    return data_dir, output, (train, dev, test)


def test_datagen_writes_records_and_a_summary(generated):
    data_dir, output, _ = generated
    problem = registry.problem("translate_text_files")
    assert "datagen summary for translate_text_files" in output
    assert "train: 600 records" in output and "skipped 2 empty line" in output
    assert "dev: 50 records" in output and "test: 30 records" in output
    for split, count in (("train", 600), ("dev", 50)):
        examples = pipeline.read_examples(problem.filepattern(data_dir, split), False)
        assert sum(1 for _ in examples) == count
    with open(problem.text_paths(data_dir, "test")["targets"], encoding="utf-8") as handle:
        assert handle.read().splitlines()[0].isupper()


def test_trainer_finds_the_vocabulary_without_flags(generated):
    data_dir, _, (train, _, _) = generated
    encoders = registry.problem("translate_text_files").feature_encoders(data_dir)
    assert 90 <= encoders["targets"].vocab_size <= 110
    with open(train[1], encoding="utf-8") as handle:
        line = handle.readline().rstrip("\n")
    assert encoders["inputs"].decode(encoders["inputs"].encode(line)) == line
    with open(os.path.join(data_dir, "translate_text_files.json"), encoding="utf-8") as handle:
        recorded = json.load(handle)
    assert recorded["approx_vocab_size"] == 100 and recorded["target_language"] == "de"
    assert recorded["train"] == [os.path.abspath(path) for path in train]


def test_a_damaged_shard_names_the_rerun_with_the_recorded_flags(generated, tmp_path):
    data_dir, _, (train, dev, test) = generated
    damaged = str(tmp_path / "data")
    shutil.copytree(data_dir, damaged)
    problem = registry.problem("translate_text_files")
    shard = problem.filepaths(damaged, problem.dataset_splits()[0])[0]
    with open(shard, "r+b") as handle:
        handle.truncate(10)
    command = (f"t2t_lite-datagen --problem=translate_text_files --data_dir={damaged} "
               f"--tmp_dir=TMP_DIR --train_source={train[0]} --train_target={train[1]} "
               f"--dev_source={dev[0]} --dev_target={dev[1]} --test_source={test[0]} "
               f"--test_target={test[1]} --source_language=en --target_language=de "
               f"--approx_vocab_size=100")
    with pytest.raises(DataError) as raised:
        problem.check_data(damaged)
    assert str(raised.value).startswith(f"the shard {shard} has 10 bytes")
    assert f"rerun {command}, which writes this split again" in str(raised.value)


def test_file_flags_for_another_problem_are_an_error(tmp_path):
    output = datagen("--problem=algorithmic_copy", f"--data_dir={tmp_path}/data",
                     f"--tmp_dir={tmp_path}/tmp", "--source_language=en", expect_failure=True)
    assert "error: --source_language is only for" in output and "algorithmic_copy" in output
    output = datagen("--problem=translate_text_files", f"--data_dir={tmp_path}/data",
                     f"--tmp_dir={tmp_path}/tmp", "--train_source=a.en", expect_failure=True)
    assert "error: --train_source needs --train_target too" in output


# The problem API as datagen calls it (a subprocess each would add about 10 s).
def test_without_files_names_the_flags(tmp_path):
    problem = registry.problem("translate_text_files")
    with pytest.raises(DataError, match="reads your own files: pass your files to "
                                        "t2t_lite-datagen with --train_source, --train_target"):
        problem.generate_data(str(tmp_path / "data"), str(tmp_path / "tmp"))
    with pytest.raises(DataError, match="--dev_source"):
        next(problem.generate_samples(None, None, "train"))


def test_again_with_other_files_is_an_error(generated, tmp_path):
    data_dir, _, (train, dev, _) = generated
    problem = registry.problem("translate_text_files").configure(train, dev, vocab_size=100)
    with pytest.raises(DataError, match="generated with other source_language, "
                                        "target_language, test .see .*translate_text_files.json"):
        problem.generate_data(data_dir, str(tmp_path))


def configured(tmp_path, train):
    dev = write_pair(tmp_path, "dev", 5, seed=2)
    return registry.problem("translate_text_files").configure(train, dev, vocab_size=100)


def generate(problem, tmp_path):
    return problem.generate_data(str(tmp_path / "data"), str(tmp_path / "tmp"))


def test_missing_file_is_named(tmp_path):
    source = write_lines(tmp_path / "train.en", sentences(10, seed=1))
    missing = str(tmp_path / "train.de")
    with pytest.raises(DataError, match=f"missing file {missing}$"):
        generate(configured(tmp_path, (source, missing)), tmp_path)
    assert not os.path.exists(tmp_path / "data" / "translate_text_files.json")


def test_mismatched_line_counts_name_both_files(tmp_path):
    source = write_lines(tmp_path / "train.en", sentences(300, seed=1))
    target = write_lines(tmp_path / "train.de", sentences(298, seed=1))
    with pytest.raises(DataError, match=f"{source} has 300 lines but {target} has 298"):
        generate(configured(tmp_path, (source, target)), tmp_path)


def test_invalid_utf8_names_file_and_line(tmp_path):
    source, target = write_pair(tmp_path, "train", 300, seed=1)
    lines = open(target, "rb").read().splitlines(keepends=True)
    lines[41] = b"caf\xe9 latin-1\n"
    with gzip.open(target + ".gz", "wb") as handle:
        handle.writelines(lines)
    with pytest.raises(DataError, match=f"{target}.gz, line 42: invalid UTF-8"):
        generate(configured(tmp_path, (source, target + ".gz")), tmp_path)


def test_an_empty_training_file_is_named_before_the_vocabulary_and_blocks_no_rerun(tmp_path):
    empty = (write_lines(tmp_path / "empty.en", []), write_lines(tmp_path / "empty.de", []))
    with pytest.raises(DataError, match=f"{empty[0]} and {empty[1]} hold no sentence pair .*"
                                        f"the train split needs at least one"):
        generate(configured(tmp_path, empty), tmp_path)
    assert not os.path.exists(tmp_path / "data" / "translate_text_files.json")
    train = write_pair(tmp_path, "train", 40, seed=1)
    generate(configured(tmp_path, train), tmp_path)  # the corrected command runs
    with open(tmp_path / "data" / "translate_text_files.json", encoding="utf-8") as handle:
        assert json.load(handle)["train"] == list(train)


def test_a_record_left_by_a_run_that_generated_nothing_is_replaced(tmp_path):
    # A run that failed after recording its files, before the vocabulary (say, in SentencePiece)
    old = write_pair(tmp_path, "old", 40, seed=4)
    problem = configured(tmp_path, old)
    problem._record_config(str(tmp_path / "data"), problem.config)
    train = write_pair(tmp_path, "train", 40, seed=1)
    generate(configured(tmp_path, train), tmp_path)
    with open(tmp_path / "data" / "translate_text_files.json", encoding="utf-8") as handle:
        assert json.load(handle)["train"] == list(train)
    other = registry.problem("translate_text_files").configure(old, problem.config.dev,
                                                               vocab_size=100)
    with pytest.raises(DataError, match="generated with other train .*vocab.translate_text_"
                                        "files.bpe.model is from them"):
        generate(other, tmp_path)  # now there is data from the recorded files


def test_a_byte_order_mark_is_no_vocabulary_piece_and_no_token(tmp_path):
    """Files saved by an editor that starts them with U+FEFF: the mark is not part of the
    first sentence, so it is neither a piece of the vocabulary nor the first token."""
    train = write_pair(tmp_path, "train", 300, seed=1)
    for path in train:
        content = open(path, encoding="utf-8").read()
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\ufeff" + content)
    generate(configured(tmp_path, train), tmp_path)
    vocabulary = registry.problem("translate_text_files").feature_encoders(
        str(tmp_path / "data"))["inputs"]
    pieces = [vocabulary.processor.id_to_piece(i) for i in range(vocabulary.vocab_size)]
    assert not [piece for piece in pieces if "\ufeff" in piece]
    first = sentences(1, seed=1)[0]
    assert vocabulary.decode(vocabulary.encode(first)) == first


def test_a_nul_byte_names_file_and_line_before_anything_is_written(tmp_path):
    source, target = write_pair(tmp_path, "train", 300, seed=1)
    lines = open(target, "rb").read().splitlines(keepends=True)
    lines[9] = b"EIN\x00HUND\n"
    with open(target, "wb") as handle:
        handle.writelines(lines)
    with pytest.raises(DataError, match=f"{target}, line 10: a NUL byte \\(at byte 3\\)"):
        generate(configured(tmp_path, (source, target)), tmp_path)
    assert not os.path.exists(tmp_path / "data" / "translate_text_files.json")


def test_the_vocabulary_trains_only_on_pairs_that_datagen_can_keep(tmp_path):
    """A pair with an empty side, and one with a side of more than max_length (256) tokens
    whatever the vocabulary (300 words), are skipped by datagen: their characters (Ж, Ψ) are
    not pieces of the vocabulary either."""
    source, target = write_pair(tmp_path, "train", 300, seed=1)
    with open(source, "a", encoding="utf-8") as source_file, \
            open(target, "a", encoding="utf-8") as target_file:
        source_file.write("ЖЖЖ ЖЖ\n" + " ".join(["Ψ"] * 300) + "\n")
        target_file.write("\n" + "A LONG ONE\n")
    written = generate(configured(tmp_path, (source, target)), tmp_path)
    assert written["train"].skipped == {"empty line": 1,
                                        "longer than max_length=256 tokens": 1}
    vocabulary = registry.problem("translate_text_files").feature_encoders(
        str(tmp_path / "data"))["inputs"]
    for character in ("Ж", "Ψ"):
        assert vocabulary.processor.piece_to_id(character) == vocabulary.processor.unk_id()
    assert vocabulary.processor.piece_to_id("H") != vocabulary.processor.unk_id()
