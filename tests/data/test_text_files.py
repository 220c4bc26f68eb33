"""Reading raw text: a byte-order mark at the start of a file is not text, and a NUL byte is
named with its file and line, as invalid UTF-8 is (an error in data for training, a warning
and U+FFFD in sentences to translate)."""
import gzip
import io
import logging

import pytest

from t2t_lite.data.text_files import decode_lines, read_lines
from t2t_lite.decoding import decoder
from t2t_lite.errors import DataError

WITH_MARK = "\ufeffeins\nzwei\n\ufeffdrei\n".encode("utf-8")


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_the_byte_order_mark_of_a_file_starts_no_line(tmp_path, suffix):
    """Only at the file's start: a U+FEFF further on is a character of its line."""
    path = tmp_path / f"train.de{suffix}"
    path.write_bytes(gzip.compress(WITH_MARK) if suffix else WITH_MARK)
    assert list(read_lines(str(path))) == ["eins", "zwei", "\ufeffdrei"]


def test_the_decoder_reads_its_input_without_the_byte_order_mark(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(WITH_MARK)
    assert decoder.read_sentences(str(path))[0] == "eins"
    assert list(decode_lines(io.BytesIO(WITH_MARK), "stdin"))[0] == "eins"


def test_invalid_utf8_after_a_byte_order_mark_counts_the_mark_in_its_position(tmp_path):
    path = tmp_path / "train.de"
    path.write_bytes(b"\xef\xbb\xbfab\xff\n")
    with pytest.raises(DataError, match=f"{path}, line 1: invalid UTF-8 .invalid start byte "
                                        f"at byte 5."):
        list(read_lines(str(path)))


def test_a_nul_byte_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "train.de"
    path.write_bytes(b"eins\nzw\x00ei\n")
    with pytest.raises(DataError, match=f"^{path}, line 2: a NUL byte \\(at byte 2\\)"):
        list(read_lines(str(path)))


def test_a_utf16_file_is_named_by_its_first_nul_byte(tmp_path):
    path = tmp_path / "train.de"
    path.write_bytes("eins\nzwei\n".encode("utf-16-le"))
    with pytest.raises(DataError, match=f"{path}, line 1: a NUL byte \\(at byte 1\\).*UTF-16"):
        list(read_lines(str(path)))


@pytest.mark.parametrize("bad, warning", [(b"\x00", "a NUL byte (at byte 2)"),
                                          (b"\xff", "invalid UTF-8")])
def test_the_decoder_replaces_a_bad_byte_and_names_the_line(tmp_path, caplog, bad, warning):
    """Every input line keeps its place: the bad byte becomes U+FFFD and a warning names it."""
    path = tmp_path / "in.txt"
    path.write_bytes(b"eins\nzw" + bad + b"ei\ndrei\n")
    with caplog.at_level(logging.WARNING):
        lines = decoder.read_sentences(str(path))
    assert lines == ["eins", "zw\ufffdei", "drei"]
    assert f"{path}, line 2: {warning}" in caplog.text
