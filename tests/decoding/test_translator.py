"""Text in, text out: every input line gets one output line, in order, whatever the line."""
import logging
import re

import keras
import pytest

from t2t_lite.data.vocab import EOS_ID, SentencePieceVocabulary, SymbolVocabulary
from t2t_lite.decoding import decoder
from t2t_lite.decoding.results import Hypothesis
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.models.building import build_model

from program_runs import TINY_MODEL, hparams_of


@pytest.fixture(scope="module")
def translator():
    hparams = hparams_of(TINY_MODEL)
    keras.utils.set_random_seed(1)
    vocabulary = SymbolVocabulary(10)
    model = build_model("transformer", hparams, vocabulary.vocab_size)
    return decoder.Translator(
        model, {"inputs": vocabulary, "targets": vocabulary},
        SearchHParams(beam_size=2, extra_length=3), max_input_length=20, source_name="in.txt",
        translator_hparams=decoder.TranslatorHParams(batch_size=4))


def test_bad_lines_get_a_message_and_the_others_a_translation(translator, caplog):
    lines = ["1 2 3", "", "4 " * 5000, "one two", "   ", "5 6"]
    with caplog.at_level(logging.WARNING):
        outputs, scores = translator.translate_with_scores(lines, show_progress=False)
    assert len(outputs) == len(lines)
    assert outputs[1] == outputs[3] == outputs[4] == "" and scores[1] is None
    for index in (0, 2, 5):
        assert scores[index] is not None and set(outputs[index].split()) <= set(
            map(str, range(1, 11)))
    # The long line is cut to max_length: its output is at most 20 + extra_length tokens.
    assert len(outputs[2].split()) <= 20 + 3
    messages = caplog.text
    assert "in.txt line 3: 10000 characters, 5001 tokens; cut to max_length=20" in messages
    assert "in.txt line 4 not translated: 'one' is not a symbol" in messages


def test_translations_do_not_depend_on_batching(translator):
    lines = [" ".join(str(1 + (i * j) % 10) for j in range(1 + i % 7)) for i in range(9)]
    alone = [translator.translate([line], show_progress=False)[0] for line in lines]
    assert translator.translate(lines, show_progress=False) == alone


def test_batches_searched_at_once_give_the_same_translations_and_scores(translator):
    """Four batches searched two at a time, each from its own thread, give every sentence the
    translation and score that one batch at a time gives, in input order."""
    lines = [" ".join(str(1 + (i * j) % 10) for j in range(1 + i % 5)) for i in range(16)]
    one_at_a_time = decoder.Translator(
        translator.model, translator.encoders, translator.search_hparams, max_input_length=20,
        translator_hparams=decoder.TranslatorHParams(batch_size=4, parallel_batches=1))
    two_at_once = decoder.Translator(
        translator.model, translator.encoders, translator.search_hparams, max_input_length=20,
        translator_hparams=decoder.TranslatorHParams(batch_size=4, parallel_batches=2))
    expected = one_at_a_time.translate_with_scores(lines, show_progress=False)
    assert two_at_once.translate_with_scores(lines, show_progress=False) == expected
    assert len(set(expected[0])) > 1  # different sentences, different translations


def test_parallel_batches_default_to_one_per_cpu_core_without_a_gpu(monkeypatch):
    monkeypatch.setattr(decoder, "usable_cores", lambda: 6)
    assert decoder.parallel_batches_for(decoder.TranslatorHParams()) == 6
    assert decoder.parallel_batches_for(decoder.TranslatorHParams(parallel_batches=3)) == 3
    monkeypatch.setattr(decoder.tf.config, "list_physical_devices",
                        lambda kind=None: ["GPU:0"] if kind == "GPU" else [])
    assert decoder.parallel_batches_for(decoder.TranslatorHParams()) == 1


def test_a_thread_that_dies_starting_ends_the_decoding_with_the_memory_line(translator,
                                                                          monkeypatch):
    """A thread of those that search batches at once whose start fails inside it (under
    ulimit -v: "Exception ignored in thread started by ... MemoryError") never searches its
    batch: the decoding ends with memory_errors_reported's line instead of waiting for ever.
    The decoding runs in a thread of its own, so that the test ends even when it would."""
    import concurrent.futures.thread
    import threading
    from t2t_lite.bin import memory_limits

    def start_that_fails(*args):
        raise MemoryError("cannot allocate the thread's state")

    died, ended = [], []
    monkeypatch.setattr(concurrent.futures.thread, "_worker", start_that_fails)
    monkeypatch.setattr(threading, "excepthook", lambda hook: died.append(hook.exc_type))
    two_at_once = decoder.Translator(
        translator.model, translator.encoders, translator.search_hparams, max_input_length=20,
        translator_hparams=decoder.TranslatorHParams(batch_size=4, parallel_batches=2))

    def decode():
        try:
            with memory_limits.memory_errors_reported():
                two_at_once.translate(["1 2", "3 4 5"] * 4, show_progress=False)
        except memory_limits.MemoryLimitError as error:
            ended.append(str(error))

    decoding = threading.Thread(target=decode, daemon=True)
    decoding.start()
    decoding.join(timeout=120)  # a bound for a decoding that waits for ever
    assert not decoding.is_alive(), "the decoding waits for the batches of threads that died"
    assert died == [MemoryError, MemoryError]
    assert len(ended) == 1 and re.match(
        r"memory ran out \(MemoryError: [12] of the 2 threads that search batches at once "
        r"ended before their batch was searched \(a thread that cannot get the memory it "
        r"starts with ends so\)\); ", ended[0]), ended
    assert "--decode_hparams=batch_size=8,parallel_batches=1" in ended[0]


class PrefixEngine:
    """An engine whose one hypothesis of each row is its prefix (what it was asked to begin
    with), then EOS."""

    def search(self, rows, prefixes=None, seed=None):
        return [[Hypothesis(list(prefix) + [EOS_ID], 0.0, 0.0)] for prefix in prefixes]


def test_a_prefix_the_vocabulary_cannot_spell_leaves_its_line_untranslated(tmp_path, caplog):
    """A SentencePiece model without byte fallback makes an unseen character its unknown
    piece: that prefix's line gets no translation and a warning naming it, the others their
    prefixes (as through the model's engine, CTranslate2's and t2t_lite.load's translate)."""
    vocabulary = SentencePieceVocabulary.train(
        ["a cat sat on the mat", "the dog ate the hat", "a bat and a rat"] * 20,
        str(tmp_path / "vocab.model"), vocab_size=40)
    assert vocabulary.processor.unk_id() in vocabulary.encode("é")
    translator = decoder.Translator(None, {"inputs": vocabulary, "targets": vocabulary},
                                    engine=PrefixEngine(), source_name="in.txt")
    lines, prefixes = ["a cat", "the dog", "a rat", "a bat"], ["the", "thé €", "", "a"]
    with caplog.at_level(logging.WARNING):
        results = [result for _, window in translator.translate_in_order(
            lines, show_progress=False, prefixes=prefixes) for result in window]
    texts = [texts[0] if texts else None for texts in translator.texts(results)]
    assert texts == ["the", None, "", "a"]
    assert list(translator.warnings) == [2]
    assert "--target_prefix_file line 2 not translated: the target vocabulary cannot spell " \
           "'é€'" in caplog.text
