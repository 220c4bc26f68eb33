"""Files and folders written whole or not at all on every tf.io.gfile file system: written under a
hidden temporary name beside the final one (`folder/.name.incomplete`) and renamed when complete;
a failed write removes the temporary (docs/architecture.md, "Storage")."""
import contextlib
import os

import tensorflow as tf

INCOMPLETE_SUFFIX = ".incomplete"


def hidden_sibling(path: str, suffix: str) -> str:
    """`folder/.name{suffix}`: a hidden name beside `path` that does not start with `path`
    (see above: on ram:// a name starting with `path` would make `path` look existing)."""
    folder, name = os.path.split(path.rstrip("/"))
    return os.path.join(folder, f".{name}{suffix}")


def temporary_path(path: str, owner: str = None) -> str:
    """The name `path` is written under until it is complete: `folder/.name.incomplete`, or
    `folder/.name.OWNER.incomplete` for a writer that must not share it with another process."""
    owner = f".{owner}" if owner else ""
    return hidden_sibling(path, f"{owner}{INCOMPLETE_SUFFIX}")


@contextlib.contextmanager
def atomic_path(path: str, owner: str = None, overwrite: bool = True):
    """Yields the temporary path to write `path` under (`temporary_path(path, owner)`); renames
    it to `path` when the block ends without error, and removes it when the block or the
    rename raises. Without `overwrite`, an existing `path` is kept and the rename raises
    AlreadyExistsError (how OutputLock creates its lock)."""
    temporary = temporary_path(path, owner)
    try:
        yield temporary
        tf.io.gfile.rename(temporary, path, overwrite=overwrite)
    except BaseException:  # KeyboardInterrupt too: no leftover when Python can clean up
        remove_if_exists(temporary)
        raise


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", owner: str = None, overwrite: bool = True):
    """Yields a `tf.io.gfile.GFile` handle ("w": text, "wb": bytes) whose content becomes
    `path` when the block ends without error, and nothing when it raises (also when the
    handle's close does, as on a full disk); written under `temporary_path(path, owner)`."""
    with atomic_path(path, owner, overwrite) as temporary:
        with tf.io.gfile.GFile(temporary, mode) as handle:
            yield handle


@contextlib.contextmanager
def atomic_folder(path: str):
    """Yields the temporary folder to write the folder `path` in (a leftover of an interrupted
    write removed first); when the block ends without error, replaces `path` by it, and when
    the block raises, removes it. The old folder is moved aside (`folder/.name.replaced`) until
    the new one is in place, and moved back when that rename fails, so a failed `--overwrite`
    export keeps the SavedModel it was to replace. On gs:// and ram://, which move a folder
    file by file, a move that fails halfway may leave the old folder split between its name
    and the aside name (neither is removed then)."""
    temporary = temporary_path(path)
    aside = hidden_sibling(path, ".replaced")
    remove_tree_if_exists(temporary)
    try:
        yield temporary
    except BaseException:
        remove_tree_if_exists(temporary)
        raise
    path = path.rstrip("/")
    replacing = tf.io.gfile.exists(path)
    try:
        if replacing:
            remove_tree_if_exists(aside)  # a leftover of an earlier interrupted replacement
            _rename_folder(path, aside)
    except BaseException:
        remove_tree_if_exists(temporary)
        raise
    try:
        _rename_folder(temporary, path)
    except BaseException:
        remove_tree_if_exists(path)  # what part of the new folder got there
        remove_tree_if_exists(temporary)
        if replacing:
            _rename_folder(aside, path)
        raise
    if replacing:
        remove_tree_if_exists(aside)


def _rename_folder(source: str, target: str):
    """Renames a folder with what is in it. The local disk and gs:// rename the contents with
    the folder; TensorFlow's ram:// renames only the folder's own entry and leaves what was in
    it under the old name, so that is then moved file by file."""
    gfile = tf.io.gfile
    gfile.rename(source, target)
    if not gfile.exists(source):
        return
    folders = list(gfile.walk(source))
    for folder, _, names in folders:
        moved = target + folder[len(source):]
        gfile.makedirs(moved)
        for name in names:
            gfile.rename(os.path.join(folder, name), os.path.join(moved, name))
    for folder, _, _ in reversed(folders[1:]):  # the emptied sub-folders' entries
        gfile.remove(folder)


def remove_tree_if_exists(path: str):
    gfile = tf.io.gfile
    if gfile.exists(path):
        gfile.rmtree(path)


def remove_if_exists(path: str):
    gfile = tf.io.gfile
    if gfile.exists(path):
        gfile.remove(path)


def remove_matching(*patterns: str):
    """Deletes every file and folder matching a `tf.io.gfile.glob` pattern (what a failed
    checkpoint write leaves: `PREFIX.*` and TensorFlow's `PREFIX_temp/`)."""
    gfile = tf.io.gfile
    for pattern in patterns:
        for path in gfile.glob(pattern):
            if gfile.isdir(path):
                gfile.rmtree(path)
            else:
                gfile.remove(path)


def remove_incomplete(folder: str, prefix: str = ""):
    """Deletes what interrupted writes of files whose names start with `prefix` left in
    `folder` (also the `name.incomplete` leftovers of versions before the hidden names)."""
    gfile = tf.io.gfile
    if not gfile.isdir(folder):
        return
    for name in gfile.listdir(folder):
        name = name.rstrip("/")  # gs:// lists sub-folders with a slash
        if name.endswith(INCOMPLETE_SUFFIX) and (name.startswith(prefix) or
                                                 name.startswith("." + prefix)):
            gfile.remove(os.path.join(folder, name))
