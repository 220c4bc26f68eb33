"""The decoder writes its translations as they are decoded, one window of batches after the other:
a write that fails (a full disk, a file size limit) stops the decoding at once with one error line
naming --decode_to_file, the translations completed are kept in OUT.partial, and OUT, if it was
there, stays as it was. Before, every line was decoded first and the write then ended in a
ResourceExhaustedError traceback, the translations lost."""
import os
import random
import resource
import signal

import keras
import pytest
import tensorflow as tf

from t2t_lite.data.vocab import SymbolVocabulary
from t2t_lite.decoding import decoder, output_files
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.models.building import build_model
from t2t_lite.storage.storage_errors import StorageError

from program_runs import TINY_MODEL, error_lines, hparams_of, run

DECODE = "beam_size=1,extra_length=2,batch_size=2,parallel_batches=1"  # 128-line windows


def symbol_lines(count: int, seed: int = 1) -> list:
    rng = random.Random(seed)
    return [" ".join(str(rng.randint(1, 10)) for _ in range(rng.randint(1, 12)))
            for _ in range(count)]


@pytest.fixture(scope="module")
def translator():
    hparams = hparams_of(TINY_MODEL)
    keras.utils.set_random_seed(1)
    vocabulary = SymbolVocabulary(10)
    model = build_model("transformer", hparams, vocabulary.vocab_size)
    return decoder.Translator(
        model, {"inputs": vocabulary, "targets": vocabulary},
        SearchHParams(beam_size=1, extra_length=2), max_input_length=20,
        translator_hparams=decoder.TranslatorHParams(batch_size=2, parallel_batches=1))


class FullAfterFirstWrite:
    """tf.io.gfile.GFile on a file system that takes one write of lines into the decoder's
    temporary file and fails the next one halfway through, as a disk that fills up does."""

    def __init__(self, monkeypatch):
        self.writes = 0
        gfile = tf.io.gfile.GFile
        fake = self

        class GFile(gfile):
            def write(self, text):
                name = os.path.basename(self.name)
                if text and name.endswith(".incomplete") and \
                        not name.startswith(".decoded.txt.partial"):
                    fake.writes += 1
                    if fake.writes > 1:
                        super().write(text[:len(text) // 2])
                        super().flush()
                        raise tf.errors.ResourceExhaustedError(
                            None, None, f"{self.name}; No space left on device")
                super().write(text)

        monkeypatch.setattr(tf.io.gfile, "GFile", GFile)


def test_a_failed_write_stops_the_decoding_and_keeps_the_lines_written(translator, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setattr(decoder.Translator, "WINDOW_BATCHES", 4)  # windows of 8 lines
    lines = symbol_lines(40)
    whole = translator.translate(lines, show_progress=False)
    searched = []
    search = translator.engine.search
    monkeypatch.setattr(translator.engine, "search",
                        lambda *batch: searched.append(1) or search(*batch))
    path = tmp_path / "decoded.txt"
    path.write_text("an earlier decoding\n")
    FullAfterFirstWrite(monkeypatch)

    with pytest.raises(StorageError) as error:
        decoder.write_translations(translator, lines, str(path), show_progress=False)
    assert str(error.value) == (
        f"--decode_to_file={path}: no space left on its file system; free some space or choose "
        f"another folder, then run the same command again. The translations of lines 1-8 (of "
        f"40) are kept in {path}.partial")
    assert len(searched) == 2 * 4  # the batches of two windows of five: stopped at once
    assert (tmp_path / "decoded.txt.partial").read_text().splitlines() == whole[:8]
    assert path.read_text() == "an earlier decoding\n"
    assert sorted(os.listdir(tmp_path)) == ["decoded.txt", "decoded.txt.partial"]


def test_windows_translate_as_one_sort_of_every_line(translator, tmp_path, monkeypatch):
    """The lines bad for the vocabulary or empty still get their empty line, in their place; a
    complete run writes OUT whole and removes an earlier run's OUT.partial."""
    lines = symbol_lines(40)
    lines[3], lines[17], lines[30] = "", "one two", "   "
    whole = translator.translate(lines, show_progress=False)  # one window of 64 batches
    monkeypatch.setattr(decoder.Translator, "WINDOW_BATCHES", 3)
    path = tmp_path / "decoded.txt"
    (tmp_path / "decoded.txt.partial").write_text("what a failed run kept\n")
    written = decoder.write_translations(translator, lines, str(path), show_progress=False)
    assert written == whole and whole[3] == whole[17] == whole[30] == ""
    assert path.read_text() == "".join(line + "\n" for line in whole)
    assert sorted(os.listdir(tmp_path)) == ["decoded.txt"]


def test_an_empty_input_gives_an_empty_file(translator, tmp_path):
    path = tmp_path / "decoded.txt"
    assert decoder.write_translations(translator, [], str(path), show_progress=False) == []
    assert path.read_text() == ""
    assert sorted(os.listdir(tmp_path)) == ["decoded.txt"]


def decode(model_dir, source, target, file_size_limit: int = None):
    """(exit status, stdout and stderr) of t2t_lite-decoder with DECODE on model_dir's (data_dir,
    output_dir), in a process that may write files of at most `file_size_limit` bytes (a write
    beyond fails with EFBIG, as on a full disk)."""
    data_dir, output_dir = model_dir

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return run("decoder", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
               f"--decode_from_file={source}", f"--decode_to_file={target}",
               f"--decode_hparams={DECODE}", env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
               preexec_fn=limit if file_size_limit else None)


def test_a_file_size_limit_is_one_error_line_and_the_lines_done_are_kept(untrained_model_dir,
                                                                         tmp_path):
    """conftest's untrained model: its translations are as good as any for the writing."""
    source = tmp_path / "source.txt"
    source.write_text("".join(line + "\n" for line in symbol_lines(300)))
    whole_path = tmp_path / "whole.txt"
    code, out = decode(untrained_model_dir, source, whole_path)
    assert code == 0, out
    whole = whole_path.read_text().splitlines(keepends=True)
    assert len(whole) == 300
    window = 64 * 2  # WINDOW_BATCHES batches of 2 lines
    limit = len("".join(whole[:window]).encode()) + 10  # the second window does not fit

    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "decoded.txt"
    target.write_text("an earlier decoding\n")
    code, out = decode(untrained_model_dir, source, target, file_size_limit=limit)
    assert code == 2, out
    assert "Traceback" not in out
    assert error_lines(out) == [
        f"error: --decode_to_file={target}: no space left on its file system; free some space "
        f"or choose another folder, then run the same command again. The translations of lines "
        f"1-{window} (of 300) are kept in {target}.partial"]
    assert (folder / "decoded.txt.partial").read_text() == "".join(whole[:window])
    assert target.read_text() == "an earlier decoding\n"
    assert sorted(os.listdir(folder)) == ["decoded.txt", "decoded.txt.partial"]


def test_the_temporary_is_created_with_the_first_lines(tmp_path):
    """A decoder that dies before it has translated anything (memory that runs out in native
    code, which no Python cleanup sees) leaves no temporary beside --decode_to_file."""
    path = tmp_path / "decoded.txt"
    with output_files.TranslationsFile(str(path), 2) as output:
        assert os.listdir(tmp_path) == []
        output.write(["3 7 1"])
        assert os.listdir(tmp_path) == [".decoded.txt.incomplete"]
        output.write(["2 2"])
    assert path.read_text() == "3 7 1\n2 2\n"
    assert os.listdir(tmp_path) == ["decoded.txt"]


MEMORY_RUNS_OUT = """
import sys
from t2t_lite.decoding import model_engine

def allocate(self, rows, prefixes=None, seed=None):
    raise MemoryError("std::bad_alloc")  # what TensorFlow's kernels raise under ulimit -v

model_engine.ModelEngine.search = allocate
sys.argv = ["t2t_lite-decoder", *sys.argv[1:]]
from t2t_lite.bin import decoder as program
program.run()
"""


def test_memory_that_runs_out_while_decoding_is_one_error_line(untrained_model_dir, tmp_path):
    """A MemoryError (or TensorFlow's OOM, or "can't start new thread") ends the decoder with
    one line saying memory ran out and what to do, status 2, and nothing left behind."""
    import subprocess
    import sys
    data_dir, output_dir = untrained_model_dir
    source = tmp_path / "source.txt"
    source.write_text("3 7 1\n2 2\n")
    folder = tmp_path / "out"
    folder.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_RUNS_OUT, f"--data_dir={data_dir}",
         f"--output_dir={output_dir}", f"--decode_from_file={source}",
         f"--decode_to_file={folder / 'decoded.txt'}", f"--decode_hparams={DECODE}"],
        capture_output=True, text=True, timeout=600)
    out = result.stdout + result.stderr
    errors = error_lines(out)
    assert result.returncode == 2 and "Traceback" not in out and len(errors) == 1, out
    assert errors[0].startswith("error: memory ran out (MemoryError: std::bad_alloc); "), errors
    assert "--decode_hparams=batch_size=8,parallel_batches=1" in errors[0]
    assert os.listdir(folder) == []
