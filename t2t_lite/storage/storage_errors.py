"""A full disk (TensorFlow's ResourceExhaustedError, Python's ENOSPC) or storage out of reach as one
StorageError naming the flag and the folder (`reported_full_storage`)."""
import contextlib
import errno

import tensorflow as tf

from t2t_lite.errors import UserError

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_FULL_MESSAGES = ("no space left on device", "disk quota exceeded", "file too large")


class StorageError(UserError):
    """A folder that is full or cannot be reached."""


def is_full_storage(error: BaseException) -> bool:
    """True for the errors a full disk raises: Python's OSError(ENOSPC, EDQUOT, EFBIG) and
    TensorFlow's ResourceExhaustedError (or any OpError whose message says so)."""
    if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
        return True
    if isinstance(error, tf.errors.ResourceExhaustedError):
        return True
    message = str(getattr(error, "message", error)).lower()
    return isinstance(error, (tf.errors.OpError, OSError)) and any(
        text in message for text in _FULL_MESSAGES)


def full_storage_message(folder: str, flag: str = None) -> str:
    named = f"--{flag}={folder}" if flag else folder
    return (f"{named}: no space left on its file system; free some space or choose another "
            f"folder, then run the same command again")


@contextlib.contextmanager
def reported_full_storage(folder: str, flag: str = None):
    """Runs the block; a write in it that fails because `folder`'s file system is full raises
    StorageError naming --flag=folder (or the folder alone) instead. Other errors pass."""
    try:
        yield
    except (OSError, tf.errors.OpError) as error:
        if is_full_storage(error):
            raise StorageError(full_storage_message(folder, flag)) from error
        raise
