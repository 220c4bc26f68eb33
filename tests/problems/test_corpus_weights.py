"""translate_text_files with several training corpora drawn by weight: what datagen writes and
records for each, the checks that see every corpus, and the trainer's batches (their mix, their
order from the seed, and a resume). Corpus A's sources all start with "alpha", B's with "omega",
with the same lengths otherwise, so an example tells its corpus."""
import itertools
import json
import os
import random
import shutil
import threading

import pytest

from t2t_lite import registry
from t2t_lite.bin import datagen
from t2t_lite.data import pipeline, records
from t2t_lite.data import problem as problem_module
from t2t_lite.errors import DataError, FlagError
from t2t_lite.training import trainer
from t2t_lite.training.data_watch import DataWatch
from t2t_lite.problems import translate_files

from program_runs import error_lines, hparams_of, run

WORDS = "house garden river light stone water city night friend music".split()
SIZES = {"alpha": 400, "omega": 1000}  # lines of corpus A and corpus B
WEIGHTS = (0.8, 0.2)
# About 40 examples a batch: 200 batches hold some 8,000, a share known to +-0.5 points.
BATCHES = hparams_of("batch_size=1024,max_length=32")


def write_corpus(folder, marker: str, count: int, seed: int = 1, words: int = None) -> tuple:
    """(source, target) files of `count` lines, each source starting with `marker` and then
    `words` words (None: 2 to 8); the target is the source upper-cased. The same seed gives
    the same words whatever the marker."""
    rng = random.Random(seed)
    source = [f"{marker} " + " ".join(rng.choice(WORDS)
                                      for _ in range(words or rng.randint(2, 8)))
              for _ in range(count)]
    paths = (str(folder / f"{marker}.en"), str(folder / f"{marker}.de"))
    for path, lines in zip(paths, (source, [line.upper() for line in source])):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
    return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{"train": [A's pair, B's pair], "dev": a pair} in a folder of their own."""
    folder = tmp_path_factory.mktemp("corpora")
    return {"train": [write_corpus(folder, marker, count) for marker, count in SIZES.items()],
            "dev": write_corpus(folder, "dev", 20, seed=2)}


def configured(files, weights=WEIGHTS):
    return registry.problem("translate_text_files").configure(
        files["train"], files["dev"], vocab_size=60, train_weights=weights)


@pytest.fixture(scope="module")
def generated(files, tmp_path_factory):
    """data_dir of datagen on corpora A and B weighted 0.8/0.2."""
    data_dir = str(tmp_path_factory.mktemp("data"))
    configured(files).generate_data(data_dir, str(tmp_path_factory.mktemp("tmp")))
    return data_dir


def corpus_counts(problem, data_dir, batches) -> dict:
    """{"alpha": examples of A, "omega": examples of B} in `batches`."""
    vocabulary = problem.feature_encoders(data_dir)["inputs"]
    counts = {marker: 0 for marker in SIZES}
    for batch in batches:
        for text in vocabulary.decode_in_graph(batch["inputs"]).numpy():
            counts[text.decode().split()[0]] += 1
    return counts


def train_batches(data_dir, seed: int):
    return registry.problem("translate_text_files").dataset(
        "train", data_dir, BATCHES, training=True, seed=seed)


def as_lists(batches) -> list:
    return [{name: batch[name].numpy().tolist() for name in pipeline.FEATURES}
            for batch in batches]


def test_batches_hold_the_corpora_in_the_weights_proportions(generated):
    """80/20 of the examples of 200 batches, though B has 2.5 times A's lines; without weights
    the trainer would see A's 400 and B's 1000 in proportion, 29/71."""
    problem = registry.problem("translate_text_files")
    counts = corpus_counts(problem, generated, train_batches(generated, seed=3).take(200))
    total = sum(counts.values())
    assert total > 6000
    assert abs(counts["alpha"] / total - WEIGHTS[0]) < 0.02, counts


def test_the_same_seed_gives_the_same_batches_and_another_seed_others(generated):
    first = as_lists(train_batches(generated, seed=3).take(30))
    assert as_lists(train_batches(generated, seed=3).take(30)) == first
    assert as_lists(train_batches(generated, seed=4).take(30)) != first


def test_a_resume_continues_the_same_batches(generated):
    """The trainer resumes by skipping the batches of the steps done, on a new dataset built
    alike: the batches after the skip are those the uninterrupted run read next."""
    uninterrupted = as_lists(train_batches(generated, seed=3).take(25))
    resumed = as_lists(train_batches(generated, seed=3).skip(15).take(10))
    assert resumed == uninterrupted[15:]


def test_each_corpus_is_written_with_its_manifest_and_recorded(generated, files):
    problem = registry.problem("translate_text_files")
    corpora = problem.train_corpora(generated)
    assert [corpus.name for corpus in corpora] == ["train.c0", "train.c1"]
    assert [corpus.weight for corpus in corpora] == list(WEIGHTS)
    for corpus, count in zip(corpora, SIZES.values()):
        shards = records.manifest_shards(corpus.manifest)
        assert [os.path.basename(path) for path in shards] == [
            f"translate_text_files-{corpus.name}-{i:05d}-of-00010" for i in range(10)]
        assert records.read_manifest(corpus.manifest)["records"] == count
        assert records.verify_manifest(corpus.manifest) is None
    # No corpus's shard is also one of the train split's pattern.
    assert not [path for path in os.listdir(generated)
                if path.startswith("translate_text_files-train-")]
    with open(os.path.join(generated, "translate_text_files.json"), encoding="utf-8") as handle:
        recorded = json.load(handle)
    assert recorded["train"] == [[os.path.abspath(path) for path in pair]
                                 for pair in files["train"]]
    assert recorded["train_weights"] == list(WEIGHTS)
    (a_source, a_target), (b_source, b_target) = files["train"]
    assert (f"--train_source={a_source},{b_source} --train_target={a_target},{b_target} "
            f"--train_weights=0.8,0.2") in problem.datagen_command(generated)


def test_without_weights_each_corpus_weighs_its_examples(files, tmp_path):
    """No --train_weights: each corpus's share is its share of all examples, 400 / 1400."""
    problem = configured(files, weights=None)
    problem._record_config(str(tmp_path), problem.config)
    corpora = problem.train_corpora(str(tmp_path))
    assert [corpus.weight for corpus in corpora] == [None, None]
    for corpus, count in zip(corpora, SIZES.values()):
        records.write_shards(({"inputs": [5], "targets": [5]} for _ in range(count)),
                             records.shard_paths(str(tmp_path), f"p-{corpus.name}", 1),
                             manifest=corpus.manifest)
    assert problem.corpus_weights(corpora) == [400 / 1400, 1000 / 1400]


def test_a_damaged_shard_of_one_corpus_is_named(generated, tmp_path):
    damaged = str(tmp_path / "data")
    shutil.copytree(generated, damaged)
    problem = registry.problem("translate_text_files")
    second = problem.train_corpora(damaged)[1]
    shard = records.manifest_shards(second.manifest)[3]
    size = os.path.getsize(shard)
    with open(shard, "r+b") as handle:
        handle.truncate(size - 5)
    with pytest.raises(DataError) as raised:
        problem.check_data(damaged)
    assert str(raised.value).startswith(f"the shard {shard} has {size - 5} bytes")
    assert "--train_weights=0.8,0.2" in str(raised.value)  # the command to rerun
    with open(shard, "r+b") as handle:  # the same size, a record's bytes changed
        handle.truncate(size)
    assert problem.corrupt_data_error(damaged).args[0].startswith(f"the shard {shard} is damaged")


def test_the_data_watch_and_the_batch_size_check_take_every_corpus(generated, tmp_path):
    problem = registry.problem("translate_text_files")
    corpora = problem.train_corpora(generated)
    watch = DataWatch(problem, generated, ("train", "dev"), str(tmp_path))
    assert {corpus.manifest for corpus in corpora} <= set(watch.files)
    # One pass holds the tokens of both corpora: a batch of all of them fills, one more not.
    lengths = [records.manifest_example_lengths(corpus.manifest) for corpus in corpora]
    held = sum(pipeline.batch_tokens_of_pass(each, BATCHES) for each in lengths)
    assert held > pipeline.batch_tokens_of_pass(lengths[1], BATCHES)
    problem.check_batch_size(generated, BATCHES.replace(batch_size=held))
    with pytest.raises(DataError, match=f"holds {held} tokens"):
        problem.check_batch_size(generated, BATCHES.replace(batch_size=held + 1))


@pytest.mark.parametrize("weights, share", [(WEIGHTS, 0.8), (None, 2000 / 7000)])
def test_the_vocabulary_sample_follows_the_weights(tmp_path, weights, share):
    """The first 3,000 pairs the vocabulary would train on, of corpora of 2,000 and 5,000
    lines: A's share is its weight, or without weights its share of the lines; the same sample
    every time (datagen writes the same vocabulary)."""
    files = {"train": [write_corpus(tmp_path, "alpha", 2000),
                       write_corpus(tmp_path, "omega", 5000)],
             "dev": write_corpus(tmp_path, "dev", 20, seed=2)}
    problem = configured(files, weights)
    first = list(itertools.islice(problem.vocabulary_samples(None, None), 3000))
    from_a = sum(sample["inputs"].startswith("alpha") for sample in first)
    assert len(first) == 3000 and abs(from_a / 3000 - share) < 0.03
    assert list(itertools.islice(problem.vocabulary_samples(None, None), 3000)) == first


def test_another_weight_into_the_same_folder_is_refused(generated, files, tmp_path):
    with pytest.raises(DataError, match="generated with other train_weights"):
        configured(files, weights=(0.5, 0.5)).generate_data(generated, str(tmp_path))


def test_lists_and_weights_that_do_not_fit_are_refused(files):
    with pytest.raises(FlagError, match="--train_source lists 2 files and --train_target 1"):
        datagen.train_corpora("a.en,b.en", "a.de")
    with pytest.raises(FlagError, match="--train_target=a.de, has an empty file name"):
        datagen.train_corpora("a.en,b.en", "a.de,")
    with pytest.raises(FlagError, match="--train_weights=0.8,much: expected comma-separated"):
        datagen.train_weights("0.8,much")
    for weights, message in (((0.8, 0.1, 0.1), "gives 3 weights for 2 training corpora"),
                             ((0.8, 0), "every weight must be a positive number, not 0"),
                             ((-1, 2), "every weight must be a positive number, not -1"),
                             ((1, float("inf")), "a positive number, not inf"),
                             ((float("nan"), 1), "a positive number, not nan")):
        with pytest.raises(DataError, match=f"--train_weights=.*{message}"):
            configured(files, weights)


def test_a_bad_weight_is_one_error_line_and_nothing_written(files, tmp_path):
    (a_source, a_target), (b_source, b_target) = files["train"]
    code, output = run("datagen", "--problem=translate_text_files",
                       f"--data_dir={tmp_path / 'data'}", f"--tmp_dir={tmp_path / 'tmp'}",
                       f"--train_source={a_source},{b_source}",
                       f"--train_target={a_target},{b_target}", "--train_weights=0.8,0",
                       f"--dev_source={files['dev'][0]}", f"--dev_target={files['dev'][1]}")
    assert code == 2, output
    assert error_lines(output) == ["error: --train_weights=0.8,0: every weight must be a "
                                   "positive number, not 0"]
    assert not (tmp_path / "data").exists()


def test_a_tiny_weight_ends_datagen_and_batches_still_follow_the_weights(files, tmp_path):
    """--train_weights=1e-6,1: datagen ends within a minute (its summary once drew from the
    finite corpora until the rare one ended, some 1e6 draws an example: for ever), and the
    training batches hold A at about its weight. A thread, so that a datagen that spins fails
    the test after the minute instead of holding it."""
    data_dir = str(tmp_path / "data")
    problem = configured(files, weights=(1e-6, 1))
    done = []
    datagen_run = threading.Thread(target=lambda: done.append(
        problem.generate_data(data_dir, str(tmp_path / "tmp"))), daemon=True)
    datagen_run.start()
    datagen_run.join(timeout=60)
    assert done, "datagen with --train_weights=1e-6,1 ran for more than a minute"
    counts = corpus_counts(problem, data_dir, train_batches(data_dir, seed=3).take(50))
    assert counts["omega"] > 1000 and counts["alpha"] / sum(counts.values()) < 0.001, counts


def test_a_tiny_weights_vocabulary_sample_stops_after_the_passes_of_the_other_corpus(files):
    """The sample reads every corpus whole, or one corpus MAX_PASSES times: at 1e-6, A would be
    read whole after some 400 million draws."""
    problem = configured(files, weights=(1e-6, 1))
    limit = translate_files.MAX_PASSES * SIZES["omega"] + 10
    sample = list(itertools.islice(problem.vocabulary_samples(None, None), limit))
    assert len(sample) < limit
    assert sum(item["inputs"].startswith("omega") for item in sample) >= (
        (translate_files.MAX_PASSES - 1) * SIZES["omega"])


@pytest.fixture(scope="module")
def with_long_corpora(files, tmp_path_factory):
    """(data_dir, the corpora's pairs, datagen's warnings) of corpus A, a corpus of lines of 40
    words (kept by datagen, over max_length=32 tokens) and one of 300 words (over datagen's
    256 tokens: written with no record)."""
    folder = tmp_path_factory.mktemp("long")
    pairs = [files["train"][0], write_corpus(folder, "long", 5, seed=40, words=40),
             write_corpus(folder, "endless", 5, seed=300, words=300)]
    data_dir = str(folder / "data")
    warnings = []
    problem = registry.problem("translate_text_files").configure(
        pairs, files["dev"], vocab_size=60, train_weights=(0.5, 0.3, 0.2))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(problem_module.logging, "warning",
                      lambda text, *args: warnings.append(text % args))
        problem.generate_data(data_dir, str(folder / "tmp"))
    return data_dir, pairs, warnings


def test_a_corpus_filtered_to_nothing_is_one_error_naming_it_before_training(
        with_long_corpora, tmp_path):
    """Training would draw from the other corpora alone, the corpus's weight ignored: the
    trainer refuses before it writes anything, naming the corpus, its files, the limit that
    filtered it and what to do; datagen warns as it writes it."""
    data_dir, pairs, warnings = with_long_corpora
    problem = registry.problem("translate_text_files")
    assert [line for line in warnings if "train.c2" in line] == [
        f"the training corpus train.c2 ({', '.join(pairs[2])}) kept no pair (0 records; "
        f"skipped 5 longer than max_length={problem.max_length} tokens): the trainer refuses "
        f"a corpus without examples"]
    shortest = min(records.manifest_example_lengths(problem.train_corpora(data_dir)[1].manifest))
    assert 32 < shortest <= problem.max_length
    with pytest.raises(DataError) as error:
        problem.check_batch_size(data_dir, BATCHES)  # max_length=32
    assert str(error.value) == (
        f"the training corpus train.c1 ({', '.join(pairs[1])}, weight 0.3) in {data_dir}: none "
        f"of its 5 examples has at most --hparams=max_length=32 tokens (the shortest has "
        f"{shortest}), so training would draw from the other corpora alone: raise max_length "
        f"to {shortest} or more, or leave it out of --train_source, --train_target and "
        f"--train_weights and generate the data again into a new --data_dir")
    output_dir = tmp_path / "train"
    with pytest.raises(DataError) as error:
        trainer.train("translate_text_files", "transformer",
                      BATCHES.replace(max_length=problem.max_length), data_dir,
                      str(output_dir), trainer.RunConfig(train_steps=1))
    assert str(error.value).startswith(
        f"the training corpus train.c2 ({', '.join(pairs[2])}, weight 0.2) in {data_dir}: "
        f"datagen kept none of its pairs (each has an empty side or more than datagen's "
        f"max_length={problem.max_length} tokens), so training would draw from the other "
        f"corpora alone: shorten or split its lines, or leave it out")
    assert not output_dir.exists()
