"""Subword sampling while training (hparams.sentencepiece_alpha): a word's segmentations drawn as
SentencePiece draws them (a unigram model's P(pieces)^alpha; a BPE model's merges skipped with
probability alpha), each read of an example drawn anew and spelling the same text, and the
draws decided by the seed and the example's place in the stream, so that a resume reads the
batches of the uninterrupted run (docs/training.md, "Subword sampling")."""
import collections
import itertools
import math
import random

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data import pipeline
from t2t_lite.data.subword_sampling import SubwordSampler, sampled
from t2t_lite.data.vocab import EOS_ID, SentencePieceVocabulary
from t2t_lite.errors import UserError
from t2t_lite.hparams_lib import HParamsError

from program_runs import TINY, error_lines, hparams_of, joined, run, trainer_flags

# Words that share stems and affixes, so that a small vocabulary spells them in several ways.
WORDS = [prefix + stem + suffix for prefix, stem, suffix in itertools.product(
    ["", "re", "un", "under", "over"], "stand read play walk talk jump look work sing ring rest star"
    .split(), ["", "s", "ing", "ed", "er", "ers"])]


def sentences(count: int, seed: int = 1) -> list:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) for _ in range(count)]


@pytest.fixture(scope="module")
def vocabularies(tmp_path_factory) -> dict:
    """{"unigram": ..., "bpe": ...}: small SentencePieceVocabulary models of `sentences`."""
    folder = tmp_path_factory.mktemp("vocabularies")
    return {kind: SentencePieceVocabulary.train(sentences(400), str(folder / f"{kind}.model"),
                                                size, kind)
            for kind, size in (("unigram", 100), ("bpe", 100))}


def draws(sampler, vocabulary, text: str, count: int, key: int = 0) -> collections.Counter:
    """How often the sampler spells `text` (and EOS) as each tuple of pieces in `count` rows
    of distinct keys."""
    ids = tf.ragged.constant([vocabulary.encode(text) + [EOS_ID]] * count, tf.int32)
    keys = tf.stack([tf.fill([count], key), tf.range(count)], 1)
    return collections.Counter(tuple(vocabulary.processor.id_to_piece(i) for i in row[:-1])
                               for row in sampler(ids, keys).to_list())


def chi_square_quantile(degrees: int, z: float) -> float:
    """The chi-square distribution's quantile at the normal quantile z (Wilson-Hilferty)."""
    term = 2.0 / (9 * degrees)
    return degrees * (1 - term + z * math.sqrt(term)) ** 3


Z_0_999, Z_0_9999 = 3.0902, 3.7190


def segmentations(word: str, pieces: dict) -> list:
    """Every split of `word` into pieces of the model ({piece: score}), as tuples."""
    if not word:
        return [()]
    return [(word[:end],) + rest for end in range(1, len(word) + 1) if word[:end] in pieces
            for rest in segmentations(word[end:], pieces)]


def pooled_chi_square(observed: dict, expected: dict) -> tuple:
    """(Pearson's chi-square, degrees of freedom) over the outcomes expected 5 times or more,
    the others pooled into one."""
    big = [key for key, count in expected.items() if count >= 5]
    rows = [(observed.get(key, 0), expected[key]) for key in big]
    rows.append((sum(observed.values()) - sum(o for o, _ in rows),
                 sum(expected.values()) - sum(e for _, e in rows)))
    rows = [(o, e) for o, e in rows if e > 0]
    return sum((o - e) ** 2 / e for o, e in rows), len(rows) - 1


@pytest.mark.parametrize("alpha", [0.1, 0.2])
def test_a_unigram_words_segmentations_are_drawn_by_p_to_the_alpha(vocabularies, alpha):
    """Kudo (2018) §2.2: P(x) ∝ P(x_1)...P(x_n) to the alpha. Every segmentation of
    "▁restarting" is enumerated, and 4,000 draws fit those probabilities (chi-square below
    its 0.999 quantile); they do not fit those of alpha 0.5."""
    vocabulary = vocabularies["unigram"]
    processor = vocabulary.processor
    pieces = {processor.id_to_piece(i): processor.get_score(i)
              for i in range(vocabulary.vocab_size) if not processor.is_control(i)
              and not processor.is_unknown(i) and not processor.is_byte(i)}
    splits = segmentations("\u2581restarting", pieces)
    assert len(splits) >= 5

    def expected(theta):
        weights = np.array([math.exp(theta * sum(pieces[p] for p in split)) for split in splits])
        return dict(zip(splits, 4000 * weights / weights.sum()))
    counts = draws(SubwordSampler(vocabulary.model_proto, alpha), vocabulary, "restarting", 4000)
    statistic, degrees = pooled_chi_square(counts, expected(alpha))
    assert degrees >= 3
    assert statistic < chi_square_quantile(degrees, Z_0_999), (counts, expected(alpha))
    statistic, degrees = pooled_chi_square(counts, expected(0.5))
    assert statistic > chi_square_quantile(degrees, Z_0_999)


def test_bpe_dropout_draws_as_sentencepiece_samples(vocabularies):
    """A BPE model at alpha 0.1 (each merge skipped with that probability): 3,000 draws of
    "▁restarting" and 3,000 of SentencePiece's own encode(enable_sampling=True) come from one
    distribution (chi-square of homogeneity below its 0.9999 quantile)."""
    vocabulary = vocabularies["bpe"]
    ours = draws(SubwordSampler(vocabulary.model_proto, 0.1), vocabulary, "restarting", 3000)
    sentencepiece.set_random_generator_seed(1)
    theirs = collections.Counter(tuple(vocabulary.processor.encode(
        "restarting", out_type=str, enable_sampling=True, alpha=0.1, nbest_size=-1))
        for _ in range(3000))
    outcomes = [key for key in set(ours) | set(theirs) if ours[key] + theirs[key] >= 10]
    table = np.array([[ours[key] for key in outcomes] + [3000 - sum(ours[k] for k in outcomes)],
                      [theirs[key] for key in outcomes] +
                      [3000 - sum(theirs[k] for k in outcomes)]], float)
    table = table[:, table.sum(0) > 0]
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    statistic = ((table - expected) ** 2 / expected).sum()
    degrees = table.shape[1] - 1
    assert degrees >= 3
    assert statistic < chi_square_quantile(degrees, Z_0_9999), (ours, theirs)


def reversed_words(line: str) -> str:
    return " ".join(reversed(line.split()))


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_each_read_draws_pieces_anew_that_spell_the_same_text(vocabularies, kind):
    """Two passes over 200 sentences: every draw decodes to its sentence, and most sentences
    are drawn otherwise the second time."""
    vocabulary = vocabularies[kind]
    lines = sentences(200, seed=2)
    examples = {"inputs": [vocabulary.encode(line) + [EOS_ID] for line in lines],
                "targets": [vocabulary.encode(reversed_words(line)) + [EOS_ID] for line in lines]}
    dataset = tf.data.Dataset.from_tensor_slices(
        {name: tf.ragged.constant(ids) for name, ids in examples.items()}).map(
        lambda example: {name: ids for name, ids in example.items()})
    sampler = SubwordSampler(vocabulary.model_proto, 0.1)
    read = list(sampled(dataset.repeat(2), {"inputs": sampler, "targets": sampler},
                        [7, 0]).as_numpy_iterator())
    assert len(read) == 400
    for index, example in enumerate(read):
        assert example["inputs"][-1] == EOS_ID
        assert vocabulary.decode(example["inputs"]) == lines[index % 200]
        assert vocabulary.decode(example["targets"]) == reversed_words(lines[index % 200])
    differ = sum(read[i]["inputs"].tolist() != read[i + 200]["inputs"].tolist()
                 for i in range(200))
    assert differ > 100, differ


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
def test_an_examples_draws_do_not_depend_on_its_batch(vocabularies, kind):
    """A sentence drawn alone and in a batch beside a word longer than 16 characters and a
    character the vocabulary has never seen (its UNK piece kept as it is): the same pieces,
    row for row, and the other row spells its stored pieces' text."""
    vocabulary = vocabularies[kind]
    sampler = SubwordSampler(vocabulary.model_proto, 0.1)
    plain = vocabulary.encode("reading unstarred overtalkers") + [EOS_ID]
    odd = vocabulary.encode("unreadinglyoverwalkers s\u00e9ing") + [EOS_ID]
    assert vocabulary.processor.unk_id() in odd
    keys = [[5, row] for row in range(40)]
    alone = sampler(tf.ragged.constant([plain] * 40, tf.int32), tf.constant(keys)).to_list()
    mixed = sampler(tf.ragged.constant([odd, plain] * 20, tf.int32),
                    tf.constant([[5, 99], keys[0]] * 20)).to_list()
    assert len(set(map(tuple, alone))) > 1
    assert mixed[1::2] == [alone[0]] * 20
    for row in mixed[::2]:
        assert vocabulary.decode(row) == vocabulary.decode(odd)
        assert vocabulary.processor.unk_id() in row


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """data_dir of translate_text_files (BPE, 60 pieces) on 300 pairs of `sentences`."""
    folder = tmp_path_factory.mktemp("corpus")
    paths = {}
    for split, count, seed in (("train", 300, 3), ("dev", 20, 4)):
        lines = sentences(count, seed)
        paths[split] = (str(folder / f"{split}.en"), str(folder / f"{split}.de"))
        for path, texts in zip(paths[split], (lines, [line.upper() for line in lines])):
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("".join(text + "\n" for text in texts))
    data_dir = str(tmp_path_factory.mktemp("data"))
    registry.problem("translate_text_files").configure(
        paths["train"], paths["dev"], vocab_size=60).generate_data(
        data_dir, str(tmp_path_factory.mktemp("tmp")))
    return data_dir


def train_batches(data_dir, seed: int, *overrides: str):
    hparams = hparams_of("batch_size=256,max_length=40", *overrides)
    return registry.problem("translate_text_files").dataset(
        "train", data_dir, hparams, training=True, seed=seed)


def as_lists(batches) -> list:
    return [{name: batch[name].numpy().tolist() for name in pipeline.FEATURES}
            for batch in batches]


def test_the_seed_decides_the_batches_and_a_resume_reads_the_uninterrupted_runs(generated):
    """With sentencepiece_alpha=0.1: the same seed gives the same batches, another seed others;
    skipping the first 45 batches (the trainer's resume) gives batches 45-59 of the
    uninterrupted run, past the first pass over the 300 examples."""
    uninterrupted = as_lists(train_batches(generated, 3, "sentencepiece_alpha=0.1").take(60))
    assert as_lists(train_batches(generated, 3, "sentencepiece_alpha=0.1").take(60)) == \
        uninterrupted
    assert as_lists(train_batches(generated, 4, "sentencepiece_alpha=0.1").take(10)) != \
        uninterrupted[:10]
    resumed = as_lists(train_batches(generated, 3, "sentencepiece_alpha=0.1").skip(45).take(15))
    assert resumed == uninterrupted[45:]
    assert sum(len(batch["inputs"]) for batch in uninterrupted) > 300


def mean_length(rows) -> float:
    return sum(sum(1 for i in ids if i) for ids in rows) / len(rows)


def test_lengths_are_filtered_and_bucketed_after_sampling(generated):
    """max_length at the longest record: drawn segmentations are longer (BPE-dropout at 0.3),
    and those over max_length are dropped before bucketing, so no batch is wider than it."""
    stored = [ids for batch in as_lists(registry.problem("translate_text_files").dataset(
        "train", generated, hparams_of("batch_size=256,max_length=200"), training=False))
        for name in pipeline.FEATURES for ids in batch[name]]
    longest = max(sum(1 for i in ids if i) for ids in stored)
    batches = as_lists(train_batches(generated, 3, "sentencepiece_alpha=0.3",
                                     f"max_length={longest}").take(40))
    drawn = [ids for batch in batches for name in pipeline.FEATURES for ids in batch[name]]
    assert max(len(ids) for ids in drawn) <= longest
    assert mean_length(drawn) > 1.2 * mean_length(stored)


def test_alpha_0_and_evaluation_read_the_pieces_datagen_wrote(generated):
    """At 0 the batches are the records' own, as the pipeline reads them without sampling;
    at 0.3, evaluation's batches (training=False) are still the records' own."""
    problem = registry.problem("translate_text_files")
    hparams = hparams_of("batch_size=256,max_length=40", "sentencepiece_alpha=0")
    unsampled = pipeline.batched_dataset(problem.filepattern(generated, "train"), hparams,
                                         training=True, seed=3)
    assert as_lists(train_batches(generated, 3, "sentencepiece_alpha=0").take(25)) == \
        as_lists(unsampled.take(25))
    evaluated = [as_lists(problem.dataset("dev", generated, hparams_of(
        "batch_size=256,max_length=40", f"sentencepiece_alpha={alpha}"), training=False))
        for alpha in (0, 0.3)]
    assert evaluated[0] and evaluated[1] == evaluated[0]


def test_a_vocabulary_without_sampling_and_values_without_meaning_are_refused(
        copy_task_data, vocabularies, generated, tmp_path):
    """The trainer on the copy problem (symbols, not pieces): one error line, status 2, no
    output folder; a BPE alpha above 1, a negative or infinite alpha and a seed beyond int32:
    errors naming them."""
    data_dir, output_dir = copy_task_data(20, 5), tmp_path / "run"
    status, output = run("trainer", *trainer_flags(data_dir, output_dir, hparams=joined(
        TINY, "sentencepiece_alpha=0.1")))
    assert status == 2 and error_lines(output) == [
        "error: sentencepiece_alpha=0.1: the inputs of algorithmic_copy are not SentencePiece "
        "pieces (SymbolVocabulary); only a SentencePiece vocabulary's pieces are sampled"], output
    assert not output_dir.exists()
    with pytest.raises(UserError, match="BPE model, whose alpha is the probability of "
                                        "skipping a merge: 0 < alpha <= 1"):
        SubwordSampler(vocabularies["bpe"].model_proto, 1.5)
    for alpha in ("-0.1", "inf"):
        with pytest.raises(HParamsError, match=f"sentencepiece_alpha={alpha}"):
            hparams_of(f"sentencepiece_alpha={alpha}")
    with pytest.raises(UserError, match="--seed=2147483648: subword sampling"):
        train_batches(generated, 2 ** 31, "sentencepiece_alpha=0.1")
