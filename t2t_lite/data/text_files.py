"""Reading and fetching parallel text: one sentence a line, line N of the source file translating
line N of the target file; plain or gzip. Every problem with a file names the file (and the line)."""
import gzip
import itertools
import os
import urllib.request

from absl import logging

from t2t_lite.data.problem import DataError

DOWNLOAD_SUFFIX = ".incomplete"


def maybe_download(directory: str, filename: str, url: str) -> str:
    """`directory/filename`, downloaded from `url` unless it is already there (atomic)."""
    path = os.path.join(directory, filename)
    if os.path.exists(path):
        return path
    os.makedirs(directory, exist_ok=True)
    logging.info("downloading %s to %s", url, path)
    try:
        urllib.request.urlretrieve(url, path + DOWNLOAD_SUFFIX)
    except OSError as error:
        raise DataError(f"cannot download {url} to {path}: {error}. Put the file there by hand "
                        f"to skip the download.") from None
    os.replace(path + DOWNLOAD_SUFFIX, path)
    return path


def _open(path: str):
    if not os.path.exists(path):
        raise DataError(f"missing file {path}")
    try:
        return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    except OSError as error:
        raise DataError(f"cannot read {path}: {error}") from None


def read_lines(path: str):
    """Yields the lines of a UTF-8 text file without their line ends."""
    with _open(path) as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise DataError(f"{path}, line {number}: invalid UTF-8 ({error.reason} at byte "
                                f"{error.start})") from None


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
