"""Output paths checked before the first step of work.

A program that only finds out at the end that it cannot write its result (`--decode_to_file`
in a folder that does not exist, after hours of decoding; `--output_dir` naming a file) loses
the work. Each program therefore prepares every path it will write before it starts: missing
parent folders are created, and a path that cannot be written is refused at once, in an error
naming the flag. Everything goes through `tf.io.gfile`, so gs:// and ram:// paths work too.
"""
import uuid

import tensorflow as tf

from t2t_lite.errors import FlagError


def _check_writable(folder: str, flag: str, path: str):
    probe = tf.io.gfile.join(folder, f".t2t_lite-write-test-{uuid.uuid4().hex}")
    try:
        with tf.io.gfile.GFile(probe, "w") as handle:
            handle.write("")
        tf.io.gfile.remove(probe)
    except tf.errors.OpError as error:
        raise FlagError(f"--{flag}={path}: cannot write in {folder}: {error.message}") from None


def _prepare_folder(folder: str, flag: str, path: str):
    """Creates `folder` (the one --flag=path names or writes in) and its parents; raises
    FlagError naming --flag=path if it is a file or cannot be created or written."""
    named = f"--{flag}={path}" + ("" if folder == path else f": {folder}")
    if tf.io.gfile.exists(folder) and not tf.io.gfile.isdir(folder):
        raise FlagError(f"{named} is a file, not a folder" +
                        (": choose a folder" if folder == path else ""))
    try:
        tf.io.gfile.makedirs(folder)
    except tf.errors.OpError as error:
        raise FlagError(f"{named}: cannot create the folder: {error.message}") from None
    _check_writable(folder, flag, path)


def prepare_output_folder(folder: str, flag: str):
    """Creates `folder` and its parents; raises FlagError naming --flag if it is a file or
    cannot be created or written."""
    _prepare_folder(folder, flag, folder)


def parent_folder(path: str) -> str:
    """The folder `path` is in ("." for a bare name); unlike os.path.dirname it keeps a URL's
    scheme intact ("gs://bucket/model" -> "gs://bucket")."""
    path = path.rstrip("/")
    return path.rsplit("/", 1)[0] if "/" in path else "."


def prepare_parent_folder(path: str, flag: str):
    """Creates the folder that `path` will be written in; raises FlagError naming --flag if it
    is a file or cannot be created or written."""
    _prepare_folder(parent_folder(path), flag, path)


def prepare_output_file(path: str, flag: str):
    """prepare_parent_folder, and a FlagError if `path` is a folder."""
    if tf.io.gfile.isdir(path):
        raise FlagError(f"--{flag}={path} is a folder: give a file name")
    prepare_parent_folder(path, flag)
