"""One writer per output folder: a lock file that names the process holding it.

tensor2tensor let two trainers share an `--output_dir`: both trained from step 0 and wrote the
same `model.ckpt-N` names, and the folder ended up a mix of two runs with no error. Here a
program that writes a folder (the trainer its `--output_dir`, the averager the folder of
`--out`, the exporter its `--export_dir`) first takes `OutputLock`; a second program is refused
at once with an error naming the holder's host, process id and start time.

The lock file is written through `tf.io.gfile`, so it works on every file system the trainer
accepts (local, gs://, ram://), where `fcntl` locks do not. Creation is "write a file of our
own (atomic_files' hidden temporary name, with our token in it), rename it to the lock's name
without overwriting, read it back": rename refuses an existing lock, and the read-back catches
the rare race of two renames at once. A lock whose holder is gone (its process no longer runs on
this host) is taken over with a warning; a lock held from another host cannot be checked from
here, so the error says which file to delete once that process has ended.
"""
import datetime
import json
import os
import socket
import sys
import uuid

import tensorflow as tf
from absl import logging

from t2t_lite import atomic_files, output_paths
from t2t_lite.errors import UserError

LOCK_NAME = "t2t_lite.lock"


class OutputLockedError(UserError):
    """Another running program holds the lock of the folder this one would write."""


def _process_start_ticks(pid: int):
    """The process's start time in clock ticks since boot (Linux /proc), or None elsewhere: with
    the pid it tells a live holder from a new process that reuses the number."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _is_running(holder: dict) -> bool:
    """Whether the holder (on this host) still runs."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    started = holder.get("start_ticks")
    return started is None or _process_start_ticks(pid) in (None, started)


def describe(holder: dict) -> str:
    return (f"{holder.get('program', 'a t2t_lite program')} (host {holder.get('host')}, pid "
            f"{holder.get('pid')}, started {holder.get('started')})")


class OutputLock:
    """A context manager that holds `lock_path` for this process.

    `OutputLock.of_folder(folder)` locks a folder through a file inside it;
    `OutputLock.beside(path)` through the hidden file `.NAME.lock` next to it (the exporter's
    SavedModel folder must not exist until it is written whole, and on ram:// a visible
    `NAME.lock` would make `NAME` look existing); `OutputLock(path)` takes any lock path.
    """

    def __init__(self, lock_path: str, purpose: str = None):
        self.lock_path = lock_path
        self.purpose = purpose or f"write {output_paths.parent_folder(lock_path)}"
        self.holder = {
            "program": os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python",
            "host": socket.gethostname(), "pid": os.getpid(),
            "start_ticks": _process_start_ticks(os.getpid()),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "token": uuid.uuid4().hex}
        self.held = False

    @classmethod
    def of_folder(cls, folder: str, purpose: str = None) -> "OutputLock":
        return cls(tf.io.gfile.join(folder, LOCK_NAME), purpose or f"write {folder}")

    @classmethod
    def beside(cls, path: str, purpose: str = None) -> "OutputLock":
        return cls(atomic_files.hidden_sibling(path, ".lock"), purpose or f"write {path}")

    def _read_holder(self):
        try:
            with tf.io.gfile.GFile(self.lock_path, "r") as handle:
                return json.loads(handle.read())
        except tf.errors.NotFoundError:
            return None
        except (ValueError, tf.errors.OpError):
            return {}  # being written by another process this instant, or not ours to parse

    def _try_create(self) -> bool:
        # Named by our token: two programs starting at once never write the same file.
        temporary = atomic_files.temporary_path(self.lock_path, owner=self.holder["token"])
        with tf.io.gfile.GFile(temporary, "w") as handle:
            handle.write(json.dumps(self.holder, indent=2))
        try:
            tf.io.gfile.rename(temporary, self.lock_path, overwrite=False)
        except tf.errors.AlreadyExistsError:
            tf.io.gfile.remove(temporary)
            return False
        return (self._read_holder() or {}).get("token") == self.holder["token"]

    def _is_gone(self, holder: dict) -> bool:
        """Whether the holder ran on this host and has ended (another host's cannot be told)."""
        return holder.get("host") == self.holder["host"] and not _is_running(holder)

    def refuse_if_held(self):
        """Raises OutputLockedError now if a running program holds the lock, without writing
        anything: a program calls it first, so that it is refused in seconds, before the
        checks and preparations that come before `acquire`."""
        holder = self._read_holder()
        if holder and not self._is_gone(holder):
            raise OutputLockedError(self._refusal(holder))

    def acquire(self):
        """Takes the lock, taking over one whose holder is gone; raises OutputLockedError if a
        running program holds it."""
        for _ in range(3):
            if self._try_create():
                self.held = True
                return self
            holder = self._read_holder()
            if holder is None:
                continue  # released between our rename and our read: try again
            if self._is_gone(holder):
                logging.warning("taking over the lock %s of %s, which is no longer running",
                                self.lock_path, describe(holder))
                tf.io.gfile.remove(self.lock_path)
                continue
            raise OutputLockedError(self._refusal(holder))
        raise OutputLockedError(self._refusal(self._read_holder() or {}))

    def _refusal(self, holder: dict) -> str:
        text = (f"cannot {self.purpose}: {describe(holder)} is writing there (lock "
                f"{self.lock_path}). Wait for it to finish or stop it")
        if holder.get("host") != self.holder["host"]:
            text += "; if it has already ended, delete the lock file"
        return text

    def release(self):
        if self.held and (self._read_holder() or {}).get("token") == self.holder["token"]:
            tf.io.gfile.remove(self.lock_path)
        self.held = False

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc_info):
        self.release()
