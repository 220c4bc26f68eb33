"""Reading and fetching parallel text: one sentence a line, line N of the source file translating
line N of the target file; plain or gzip. Every problem with a file names the file (and the line)."""
import gzip
import itertools
import os
import shutil
import urllib.request
import zlib

import tensorflow as tf
from absl import logging

from t2t_lite.storage import atomic_files
from t2t_lite.errors import DataError
from t2t_lite.storage.storage_errors import reported_full_storage

DOWNLOAD_CHUNK_BYTES = 1 << 20


def maybe_download(directory: str, filename: str, url: str) -> str:
    """`directory/filename`, downloaded from `url` unless it is already there (atomic)."""
    path = os.path.join(directory, filename)
    if tf.io.gfile.exists(path):
        return path
    tf.io.gfile.makedirs(directory)
    logging.info("downloading %s to %s", url, path)
    try:
        # Streamed into tf.io.gfile, so the download lands on any TensorFlow file system; a
        # full disk is a StorageError naming the folder, and the partial file is removed.
        with reported_full_storage(directory), urllib.request.urlopen(url) as response, \
                atomic_files.atomic_write(path, "wb") as handle:
            shutil.copyfileobj(response, handle, DOWNLOAD_CHUNK_BYTES)
    except OSError as error:
        raise DataError(f"cannot download {url} to {path}: {error}. Put the file there by hand "
                        f"to skip the download.") from None
    return path


INVALID_UTF8_POLICIES = ("error", "replace")
BYTE_ORDER_MARK = "\ufeff"


def read_lines(path: str, invalid_utf8: str = "error"):
    """Yields the lines of a UTF-8 text file (gunzipped if it ends in .gz) without their line
    ends; read through tf.io.gfile, so on any TensorFlow file system. A byte-order mark at the
    start of the file is dropped (read as "utf-8-sig"): it would otherwise be a vocabulary piece
    and the first token of the first sentence.

    A line that is not valid UTF-8, or that holds a NUL byte (SentencePiece encodes it as
    `<unk>`; a UTF-16 file is full of them), is a DataError naming the file and line ("error",
    for data that goes into training), or is kept with U+FFFD for its bad bytes or NULs and a
    warning that names it ("replace", for sentences to translate: each input line still gets
    its output line).
    """
    if not tf.io.gfile.exists(path):
        raise DataError(f"missing file {path}")
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            raw_lines = (gzip.GzipFile(fileobj=handle, mode="rb") if path.endswith(".gz")
                         else handle)
            yield from decode_lines(raw_lines, path, invalid_utf8)
    except (OSError, tf.errors.OpError) as error:  # a folder, no permission, not gzip, ...
        raise DataError(f"cannot read {path}: {error}") from None
    except (EOFError, zlib.error) as error:  # gzip's own errors for a cut or damaged stream
        raise DataError(f"cannot read {path}: its gzip data is cut short or damaged ({error}); "
                        f"a download that was interrupted? Delete it, and datagen fetches it "
                        f"again (or put a complete copy there)") from None


def decode_lines(raw_lines, name: str, invalid_utf8: str = "error"):
    """Yields byte lines decoded from UTF-8 without their line ends, the first without a
    byte-order mark; `name` (a file, "stdin") and `invalid_utf8` as in read_lines."""
    if invalid_utf8 not in INVALID_UTF8_POLICIES:
        raise ValueError(f"invalid_utf8 must be one of {INVALID_UTF8_POLICIES}, not "
                         f"{invalid_utf8!r}")
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            problem = f"{name}, line {number}: invalid UTF-8 ({error.reason} at byte {error.start})"
            if invalid_utf8 == "error":
                raise DataError(problem) from None
            logging.warning("%s; bad bytes replaced by U+FFFD", problem)
            line = raw.decode("utf-8", errors="replace")
        if number == 1:  # read as "utf-8-sig"; the byte positions above count the mark
            line = line.removeprefix(BYTE_ORDER_MARK)
        if "\0" in line:
            nul_at = raw.index(b"\0")
            problem = (f"{name}, line {number}: a NUL byte (at byte {nul_at}), which text does "
                       f"not hold (a UTF-16 file?)")
            if invalid_utf8 == "error":
                raise DataError(problem)
            logging.warning("%s; NUL bytes replaced by U+FFFD", problem)
            line = line.replace("\0", "\ufffd")
        yield line.rstrip("\r\n")


def read_parallel(source_path: str, target_path: str):
    """Yields {"inputs", "targets"} line pairs; different line counts are an error naming both
    files and both counts."""
    count = 0
    missing = object()
    pairs = itertools.zip_longest(read_lines(source_path), read_lines(target_path),
                                  fillvalue=missing)
    for source, target in pairs:
        if source is missing or target is missing:
            rest = 1 + sum(1 for _ in pairs)
            counts = (count + (rest if target is missing else 0),
                      count + (rest if source is missing else 0))
            raise DataError(f"{source_path} has {counts[0]} lines but {target_path} has "
                            f"{counts[1]}: parallel files must have one line per sentence pair")
        count += 1
        yield {"inputs": source, "targets": target}
