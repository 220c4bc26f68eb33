"""Output paths checked and prepared before the first step of work: missing folders made (and
returned, to be removed on failure), a path that cannot be written refused naming its flag, and
storage that cannot be reached found out within REACH_SECONDS (docs/architecture.md, "Storage")."""
import contextlib
import os
import threading
import uuid

import tensorflow as tf
from absl import logging

from t2t_lite.errors import FlagError
from t2t_lite.storage.storage_errors import StorageError, reported_full_storage

# A gs:// stat answers in well under a second, the first with its token request in a few.
REACH_SECONDS = 10
_reached = set()  # the paths found reachable in this process


def one_line(message: str) -> str:
    """TensorFlow's error message on one line (a GCS error's ends in a second line, "when
    reading metadata of PATH")."""
    return " ".join(str(message).split())


def check_reachable(path: str, named: str, seconds: float = REACH_SECONDS):
    """Raises StorageError "{named}: cannot reach {path}: {cause}" when asking whether `path`
    exists fails (NotFound is an answer: no) or gets no answer within `seconds`.

    Where requests go unanswered, TensorFlow's GCS client waits 60 s for each and retries
    (no answer after 200 s), so the question is asked from a daemon thread, which a hang leaves
    behind without keeping the program from ending with the error."""
    key = path.rstrip("/") or path
    if key in _reached:
        return
    answer = {}

    def ask():
        try:
            answer["exists"] = tf.io.gfile.exists(path)
        except tf.errors.OpError as error:
            answer["error"] = error

    asking = threading.Thread(target=ask, name=f"reach {path}", daemon=True)
    asking.start()
    asking.join(seconds)
    if asking.is_alive():
        cause = f"no answer within {seconds:g} s"
    elif "error" in answer:
        cause = one_line(answer["error"].message)
    else:
        _reached.add(key)
        return
    raise StorageError(f"{named}: cannot reach {path}: {cause}. Check the path, the network "
                       f"and the credentials, then run the same command again")


def _check_writable(folder: str, flag: str, path: str):
    probe = tf.io.gfile.join(folder, f".t2t_lite-write-test-{uuid.uuid4().hex}")
    try:
        with reported_full_storage(path, flag), tf.io.gfile.GFile(probe, "w") as handle:
            handle.write("")
        tf.io.gfile.remove(probe)
    except tf.errors.OpError as error:
        raise FlagError(f"--{flag}={path}: cannot write in {folder}: "
                        f"{one_line(error.message)}") from None


def _missing_folders(folder: str) -> list:
    """`folder` and those of its parents that do not exist, deepest first."""
    missing = []
    while folder not in ("", ".") and not folder.endswith(":/") and \
            not tf.io.gfile.exists(folder):
        missing.append(folder)
        folder = parent_folder(folder)
    return missing


def _prepare_folder(folder: str, flag: str, path: str, is_file: bool = False) -> list:
    """Creates `folder` (the one --flag=path names or writes in) and its parents and returns
    those it created, deepest first; raises StorageError naming --flag=path if its storage
    cannot be reached, FlagError if it is a file or cannot be created or written, or if
    `is_file` and `path` is a folder."""
    check_reachable(folder, f"--{flag}={path}")
    if is_file and tf.io.gfile.isdir(path):
        raise FlagError(f"--{flag}={path} is a folder: give a file name")
    named = f"--{flag}={path}" + ("" if folder == path else f": {folder}")
    if tf.io.gfile.exists(folder) and not tf.io.gfile.isdir(folder):
        raise FlagError(f"{named} is a file, not a folder" +
                        (": choose a folder" if folder == path else ""))
    created = _missing_folders(folder.rstrip("/") or folder)
    with removed_on_failure(created):
        try:
            tf.io.gfile.makedirs(folder)
        except tf.errors.OpError as error:
            raise FlagError(f"{named}: cannot create the folder: "
                            f"{one_line(error.message)}") from None
        _check_writable(folder, flag, path)
    return created


@contextlib.contextmanager
def removed_on_failure(created: list):
    """Runs the block; when it raises, removes the folders in `created` (what a prepare_*
    function returned: the folders it made, deepest first) that are empty, so that a program
    that fails leaves no folder it made. A folder that was there before is never in `created`,
    and one that holds something (another program's files) is kept."""
    try:
        yield
    except BaseException:
        for folder in created:
            try:
                # tf.io.gfile removes a folder only with what is in it: asked empty first.
                if tf.io.gfile.isdir(folder) and not tf.io.gfile.listdir(folder):
                    tf.io.gfile.rmtree(folder)
            except tf.errors.OpError as error:  # the error the program ends with matters more
                logging.warning("leaving the folder %s: %s", folder, one_line(error.message))
        raise


def prepare_output_folder(folder: str, flag: str) -> list:
    """Creates `folder` and its parents and returns those it created (for
    `removed_on_failure`); raises StorageError naming --flag if its storage cannot be reached,
    FlagError if it is a file or cannot be created or written."""
    return _prepare_folder(folder, flag, folder)


def absolute(path: str) -> str:
    """A local path made absolute, so that a record names it from any working folder; a URL
    (gs://, ram://) as it is."""
    return path if "://" in path else os.path.abspath(path)


def parent_folder(path: str) -> str:
    """The folder `path` is in ("." for a bare name); unlike os.path.dirname it keeps a URL's
    scheme intact ("gs://bucket/model" -> "gs://bucket")."""
    path = path.rstrip("/")
    return path.rsplit("/", 1)[0] if "/" in path else "."


def prepare_parent_folder(path: str, flag: str) -> list:
    """Creates the folder that `path` will be written in and returns the folders it created
    (for `removed_on_failure`); raises StorageError naming --flag if its storage cannot be
    reached, FlagError if it is a file or cannot be created or written."""
    return _prepare_folder(parent_folder(path), flag, path)


def prepare_output_file(path: str, flag: str) -> list:
    """prepare_parent_folder, and a FlagError if `path` is a folder."""
    return _prepare_folder(parent_folder(path), flag, path, is_file=True)
