"""Reading and fetching parallel text: one sentence a line, line N of the source file translating
line N of the target file; plain or gzip. Every problem with a file names the file (and the line)."""
import gzip
import itertools
import os
import tempfile
import urllib.request

import tensorflow as tf
from absl import logging

from t2t_lite import atomic_files
from t2t_lite.data.problem import DataError


def maybe_download(directory: str, filename: str, url: str) -> str:
    """`directory/filename`, downloaded from `url` unless it is already there (atomic)."""
    path = os.path.join(directory, filename)
    if tf.io.gfile.exists(path):
        return path
    tf.io.gfile.makedirs(directory)
    logging.info("downloading %s to %s", url, path)
    try:
        with atomic_files.atomic_path(path) as temporary:
            if "://" not in temporary:
                urllib.request.urlretrieve(url, temporary)
            else:  # urllib writes local files only: through a local copy to gs://, ram://, ...
                with tempfile.TemporaryDirectory() as local:
                    urllib.request.urlretrieve(url, os.path.join(local, filename))
                    tf.io.gfile.copy(os.path.join(local, filename), temporary, overwrite=True)
    except OSError as error:
        raise DataError(f"cannot download {url} to {path}: {error}. Put the file there by hand "
                        f"to skip the download.") from None
    return path


def read_lines(path: str):
    """Yields the lines of a UTF-8 text file (gunzipped if it ends in .gz) without their line
    ends; read through tf.io.gfile, so on any TensorFlow file system."""
    if not tf.io.gfile.exists(path):
        raise DataError(f"missing file {path}")
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            lines = gzip.GzipFile(fileobj=handle, mode="rb") if path.endswith(".gz") else handle
            for number, raw in enumerate(lines, start=1):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as error:
                    raise DataError(f"{path}, line {number}: invalid UTF-8 ({error.reason} at "
                                    f"byte {error.start})") from None
                yield line
    except (OSError, tf.errors.OpError) as error:  # a folder, no permission, not gzip, ...
        raise DataError(f"cannot read {path}: {error}") from None


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
