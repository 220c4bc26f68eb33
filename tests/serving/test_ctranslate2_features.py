"""CTranslate2Engine, the engine of decoding/results.py over a t2t_lite-exporter
--format=ctranslate2 folder: n-best lists (the first the 1-best, distinct, in score order),
log probabilities equal to the engine's own scoring of the same pair and the scoring equal to
the TensorFlow checkpoint's, target prefixes, hard alignments from the last decoder layer's
attention averaged over its heads, and sampling that the seed alone decides."""
import threading

import numpy as np
import pytest
import tensorflow as tf

import t2t_lite
from t2t_lite import registry
from t2t_lite.data.vocab import EOS_ID, SymbolVocabulary
from t2t_lite.models import restoring
from t2t_lite.decoding.ctranslate2_translator import CTranslate2Engine
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.errors import UserError
from t2t_lite.serving import ctranslate2_export

from test_ctranslate2_export import TINY, program, random_model

ctranslate2 = pytest.importorskip("ctranslate2")

SAMPLING = SearchHParams(beam_size=1, num_hypotheses=3, sampling_topk=0,
                         sampling_temperature=3.0)


@pytest.fixture(scope="module")
def copy_rows(exported_copy_model):
    """(folder, vocabulary, rows): the exported copy model, its vocabulary and the test set's
    100 inputs as id rows ending with EOS."""
    data_dir, _, folder = exported_copy_model
    vocabulary = registry.problem("algorithmic_copy").feature_encoders(data_dir)["targets"]
    with open(f"{data_dir}/algorithmic_copy-test.inputs.txt", encoding="utf-8") as handle:
        rows = [vocabulary.encode(line) + [EOS_ID] for line in handle.read().splitlines()]
    return folder, vocabulary, rows


def batches(rows, size=25):
    return [rows[start:start + size] for start in range(0, len(rows), size)]


def seeded(seed, rows):
    """The seed pairs of `rows` as the Translator gives them: (seed, the row's index)."""
    return [(seed, index) for index in range(len(rows))]


def searched(engine, rows, **kwargs):
    return [hypotheses for batch in batches(rows) for hypotheses in engine.search(batch, **kwargs)]


def test_n_best_lists_begin_with_the_1_best_and_are_distinct_in_score_order(copy_rows):
    folder, vocabulary, rows = copy_rows
    best = searched(CTranslate2Engine(folder, vocabulary.tokens, SearchHParams(beam_size=4)),
                    rows)
    n_best = searched(CTranslate2Engine(folder, vocabulary.tokens,
                                        SearchHParams(beam_size=4, num_hypotheses=4)), rows)
    assert len(n_best) == len(rows)
    for one, four in zip(best, n_best):
        assert len(one) == 1 and len(four) == 4
        assert four[0].ids == one[0].ids and four[0].score == pytest.approx(one[0].score)
        assert len({tuple(hypothesis.ids) for hypothesis in four}) == 4
        scores = [hypothesis.score for hypothesis in four]
        assert scores == sorted(scores, reverse=True)
        assert all(hypothesis.ids[-1] == EOS_ID for hypothesis in four)


SEARCHES = {
    "beam 4, alpha 0.6": SearchHParams(beam_size=4, num_hypotheses=4),
    "greedy, alpha 1": SearchHParams(beam_size=1, alpha=1.0),
    "sampling": SAMPLING,
    "cut by the length limit": SearchHParams(beam_size=4, num_hypotheses=2, extra_length=-4),
}


@pytest.mark.parametrize("search_hparams", SEARCHES.values(), ids=SEARCHES.keys())
def test_a_hypothesis_log_prob_is_the_engines_score_of_the_same_pair(copy_rows,
                                                                    search_hparams):
    """CTranslate2's score is the log probability over length^alpha, the EOS counted when
    the hypothesis ended: undone, it is score_batch's log-likelihood of the same pair; a
    hypothesis cut by the length limit ends with EOS all the same and is scored with it."""
    folder, vocabulary, rows = copy_rows
    engine = CTranslate2Engine(folder, vocabulary.tokens, search_hparams)
    rows = rows[:30]
    hypotheses = engine.search(rows, seeds=seeded(1, rows))
    pairs = [(row, hypothesis) for row, row_hypotheses in zip(rows, hypotheses)
             for hypothesis in row_hypotheses]
    scored = engine.score([row for row, _ in pairs], [hypothesis.ids for _, hypothesis in pairs])
    for (row, hypothesis), target_score in zip(pairs, scored):
        assert hypothesis.ids[-1] == EOS_ID
        assert target_score.pieces == len(hypothesis.ids)
        assert hypothesis.log_prob == pytest.approx(target_score.log_likelihood, abs=1e-4)
    if search_hparams.extra_length < 0:  # the longest inputs' copies do not fit
        assert any(len(hypothesis.ids) < len(row) for row, hypothesis in pairs)


def test_tensorflow_and_ctranslate2_score_every_piece_alike(trained_copy_model, copy_rows):
    """The float32 folder's score_batch against the checkpoint's model teacher-forced, on the
    references and on targets the model finds improbable (the references reversed)."""
    data_dir, output_dir, hparams = trained_copy_model
    folder, vocabulary, rows = copy_rows
    model = restoring.load_model("transformer", hparams, vocabulary.vocab_size, output_dir)
    engine = CTranslate2Engine(folder, vocabulary.tokens, SearchHParams())
    rows = rows[:10]
    targets = rows + [row[-2::-1] + [EOS_ID] for row in rows]
    sources = rows + rows
    tokens = vocabulary.tokens
    pieces = engine.translator.score_batch(  # without EOS: the folder's config appends it
        [[tokens[i] for i in row[:-1]] for row in sources],
        [[tokens[i] for i in target[:-1]] for target in targets])
    scored = engine.score(sources, targets)
    for source, target, per_piece, target_score in zip(sources, targets, pieces, scored):
        logits = model({"inputs": tf.constant([source]), "targets": tf.constant([target])})
        log_probs = tf.nn.log_softmax(logits, axis=-1)[0].numpy()
        expected = [log_probs[position, token] for position, token in enumerate(target)]
        np.testing.assert_allclose(per_piece.log_probs, expected, atol=1e-3)
        assert target_score.log_likelihood == pytest.approx(sum(per_piece.log_probs))
        assert target_score.pieces == len(target)


def test_outputs_begin_with_their_prefixes_and_empty_prefixes_change_nothing(copy_rows):
    folder, vocabulary, rows = copy_rows
    engine = CTranslate2Engine(folder, vocabulary.tokens,
                               SearchHParams(beam_size=4, num_hypotheses=2))
    rows = rows[:20]
    # The first three pieces reversed: not what the copy model would choose.
    prefixes = [row[2::-1] if i % 2 else [] for i, row in enumerate(rows)]
    default = engine.search(rows)
    prefixed = engine.search(rows, prefixes=prefixes)
    assert engine.search(rows, prefixes=[[] for _ in rows]) == default
    for prefix, hypotheses, expected in zip(prefixes, prefixed, default):
        for hypothesis in hypotheses:
            assert hypothesis.ids[:len(prefix)] == prefix and hypothesis.ids[-1] == EOS_ID
        if not prefix:
            assert [h.ids for h in hypotheses] == [h.ids for h in expected]
            assert [h.score for h in hypotheses] == pytest.approx([h.score for h in expected])
    with_prefix = [(row, h) for row, prefix, hs in zip(rows, prefixes, prefixed) if prefix
                   for h in hs]
    scored = engine.score([row for row, _ in with_prefix], [h.ids for _, h in with_prefix])
    for (_, hypothesis), target_score in zip(with_prefix, scored):
        assert hypothesis.log_prob == pytest.approx(target_score.log_likelihood, abs=1e-4)


def test_a_prefix_past_the_length_limit_is_cut_as_tensorflow_cuts_it(trained_copy_model,
                                                                     copy_rows):
    """Each row's limit is its input length (EOS counted) + extra_length: a longer prefix is
    cut there and is the whole output, through CTranslate2 as through the model's search."""
    from t2t_lite.decoding.model_engine import ModelEngine
    _, output_dir, hparams = trained_copy_model
    folder, vocabulary, rows = copy_rows
    model = restoring.load_model("transformer", hparams, vocabulary.vocab_size, output_dir)
    search = SearchHParams(beam_size=1, extra_length=2)
    rows = rows[:8]
    # Even rows: their pieces three times over, past the limit; odd rows: their first piece.
    prefixes = [row[:-1] * 3 if i % 2 == 0 else row[:1] for i, row in enumerate(rows)]
    assert all(len(prefixes[i]) > len(rows[i]) + 2 for i in range(0, 8, 2))
    texts = {name: [vocabulary.decode(hypotheses[0].ids)
                    for hypotheses in engine.search(rows, prefixes)]
             for name, engine in (("tensorflow", ModelEngine(model, search)),
                                  ("ctranslate2", CTranslate2Engine(folder, vocabulary.tokens,
                                                                    search)))}
    assert texts["ctranslate2"] == texts["tensorflow"]
    for i, row in enumerate(rows):
        limit = len(row) + 2
        expected = prefixes[i][:limit] if i % 2 == 0 else row[:-1]  # the copy model copies
        assert texts["tensorflow"][i] == vocabulary.decode(expected)


def test_copy_model_alignments_are_the_diagonal(copy_rows):
    folder, vocabulary, rows = copy_rows
    engine = CTranslate2Engine(folder, vocabulary.tokens, SearchHParams(beam_size=4),
                               alignments=True)
    hypotheses = [row_hypotheses[0] for row_hypotheses in searched(engine, rows)]
    pairs = [pair for hypothesis in hypotheses for pair in hypothesis.alignment]
    for row, hypothesis in zip(rows, hypotheses):
        assert [target for _, target in hypothesis.alignment] == list(
            range(len(hypothesis.ids) - 1))
        assert all(0 <= source < len(row) - 1 for source, _ in hypothesis.alignment)
    diagonal = sum(source == target for source, target in pairs)
    assert diagonal >= 0.95 * len(pairs), (diagonal, len(pairs))
    assert CTranslate2Engine(folder, vocabulary.tokens, SearchHParams()).search(
        rows[:2])[0][0].alignment is None


def test_the_attention_returned_is_the_last_layers_averaged_over_all_heads(tmp_path):
    """Forced through a target prefix, a random model's attention as CTranslate2 returns it
    equals the TensorFlow model's last decoder layer's encoder-decoder attention averaged
    over its 4 heads (not its first head, CTranslate2's default), source EOS left out."""
    vocabulary = SymbolVocabulary(20)
    model = random_model(TINY, vocabulary.vocab_size)
    folder = str(tmp_path / "ct2")
    ctranslate2_export.write_folder(model, {"inputs": vocabulary, "targets": vocabulary},
                                    folder, "float32")
    source, target = [3, 9, 4, 7, 12], [5, 2, 8, 8]
    tokens = vocabulary.tokens
    result, = ctranslate2.Translator(folder).translate_batch(
        [[tokens[i] for i in source]], [[tokens[i] for i in target]], beam_size=1,
        max_decoding_length=len(target), return_attention=True)
    assert result.hypotheses[0] == [tokens[i] for i in target]
    weights = model.attention_weights({"inputs": tf.constant([source + [EOS_ID]]),
                                       "targets": tf.constant([target])})
    last = weights["decoder"][-1]["encoder_decoder"][0].numpy()  # [heads, T, S]
    assert last.shape[0] == 4
    returned = np.asarray(result.attention[0])[:len(target), :len(source)]
    np.testing.assert_allclose(returned, last.mean(axis=0)[:, :len(source)], atol=1e-4)
    assert not np.allclose(returned, last[0][:, :len(source)], atol=1e-2)


def test_sampling_is_decided_by_the_seed_whatever_runs_at_the_same_time(copy_rows):
    """Same seed, same samples, from one call to the next and when batches are searched
    from two threads of a translator with two parallel batches; another seed, others."""
    folder, vocabulary, rows = copy_rows
    engine = CTranslate2Engine(folder, vocabulary.tokens, SAMPLING, parallel_batches=2)
    first, second = rows[:20], rows[20:40]
    expected = {seed: engine.search(batch, seeds=seeded(seed, batch))
                for seed, batch in ((1, first), (2, second))}
    assert engine.search(first, seeds=seeded(1, first)) == expected[1]
    assert engine.search(first, seeds=seeded(3, first)) != expected[1]
    assert any(len({tuple(h.ids) for h in hypotheses}) > 1 for hypotheses in expected[1])
    found = {}

    def search(seed, batch):
        found[seed] = engine.search(batch, seeds=seeded(seed, batch))

    threads = [threading.Thread(target=search, args=(seed, batch)) for seed, batch in
               ((1, first), (2, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == expected


def test_sampling_draws_num_hypotheses_samples(copy_rows):
    """Sampling returns num_hypotheses draws, more than its beam of 1 (a beam search's
    num_hypotheses above its beam_size is refused where SearchHParams are made)."""
    folder, vocabulary, _ = copy_rows
    sampled = CTranslate2Engine(folder, vocabulary.tokens, SearchHParams(
        beam_size=1, num_hypotheses=5, sampling_topk=0))
    assert len(sampled.search([[3, 4, EOS_ID]], seeds=[(0, 0)])[0]) == 5


def test_a_tiny_nucleus_is_greedy_search_and_the_decoder_takes_it(exported_copy_model,
                                                                 copy_rows, tmp_path):
    """sampling_topp maps to CTranslate2's: 1e-6 keeps the most probable piece alone, so the
    samples are greedy search's; t2t_lite-decoder --ctranslate2_model takes it."""
    folder, vocabulary, rows = copy_rows
    nucleus = CTranslate2Engine(folder, vocabulary.tokens, SearchHParams(
        beam_size=1, sampling_topk=0, sampling_topp=1e-6))
    greedy = CTranslate2Engine(folder, vocabulary.tokens, SearchHParams(beam_size=1))
    assert nucleus._options(10)["sampling_topp"] == 1e-6
    rows = rows[:25]
    assert [[h.ids for h in row] for row in searched(nucleus, rows, seeds=seeded(3, rows))] == \
        [[h.ids for h in row] for row in searched(greedy, rows)]
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("3 7 1\n2 2 9 4\n")
    program("decoder", f"--data_dir={exported_copy_model[0]}", f"--ctranslate2_model={folder}",
            f"--decode_from_file={source}",
            f"--decode_to_file={output}", "--decode_hparams=sampling_topk=0,sampling_topp=0.9")
    assert len(output.read_text().splitlines()) == 2


def test_one_seed_gives_each_line_its_own_samples(exported_copy_model):
    """200 copies of one line sampled with one seed, the first 20 a call of the Python API
    each (as interactive decoding), the rest in one call: at least 150 distinct samples, 15 of
    the 20 alone, and the same again from a rerun; the N samples of one line differ too."""
    data_dir, _, folder = exported_copy_model
    with open(f"{data_dir}/algorithmic_copy-test.inputs.txt", encoding="utf-8") as handle:
        line = handle.readline().strip()
    settings = dict(sampling_topk=0, sampling_temperature=3.0)

    def run():
        model = t2t_lite.load(folder, data_dir=data_dir, seed=5)
        alone = [model.translate([line], **settings)[0] for _ in range(20)]
        together = model.translate([line] * 180, **settings)
        return [translations.hypotheses[0].text for translations in alone + together]

    samples = run()
    assert len(set(samples[:20])) >= 15 and len(set(samples)) >= 150
    assert run() == samples
    n_samples = t2t_lite.load(folder, data_dir=data_dir, seed=5).translate(
        [line], num_hypotheses=50, **settings)[0].hypotheses
    assert len({sample.text for sample in n_samples}) >= 40


def test_a_sampling_topk_above_the_vocabulary_is_refused_as_with_the_checkpoint(
        exported_copy_model):
    data_dir, _, folder = exported_copy_model
    vocab_size = registry.problem("algorithmic_copy").vocab_size(data_dir)
    model = t2t_lite.load(folder, data_dir=data_dir)
    with pytest.raises(UserError, match=rf"^--decode_hparams: sampling_topk={vocab_size + 1}: "
                                        rf"the model's vocabulary has {vocab_size} pieces"):
        model.translate(["3 4"], sampling_topk=vocab_size + 1)
