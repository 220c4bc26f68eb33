"""One writer per output folder: a lock file, written through tf.io.gfile, that names the process
holding it; a lock whose holder is gone is taken over, one that cannot be read is an error
(docs/architecture.md, "Storage")."""
import datetime
import json
import os
import socket
import sys
import uuid

import tensorflow as tf
from absl import logging

from t2t_lite.storage import atomic_files, output_paths
from t2t_lite.errors import UserError
from t2t_lite.storage.storage_errors import StorageError, reported_full_storage

LOCK_NAME = "t2t_lite.lock"


class OutputLockedError(UserError):
    """Another running program holds the lock of the folder this one would write, or its lock
    cannot be read."""


def _process_start_ticks(pid: int):
    """The process's start time in clock ticks since boot (Linux /proc), or None elsewhere: with
    the pid it tells a live holder from a new process that reuses the number."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _why_not_running(holder: dict):
    """Why the holder (on this host) no longer runs, or None while it does: no process has its
    pid now, or the pid belongs to a process started at another time (the number reused)."""
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return f"it names no process id ({pid!r})"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"no process has pid {pid} now"
    except PermissionError:  # a process of another user has the pid: the holder, or a reuse
        pass
    started, now = holder.get("start_ticks"), _process_start_ticks(pid)
    if started is None or now in (None, started):
        return None
    return (f"pid {pid} now belongs to another process, started at another time than the "
            f"lock's holder (the number was reused)")


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

    def _check_reachable(self):
        """StorageError now, within output_paths.REACH_SECONDS, if the lock's folder cannot be
        reached (its first read or write could hang for minutes)."""
        output_paths.check_reachable(output_paths.parent_folder(self.lock_path),
                                     f"cannot {self.purpose}")

    def _read_holder(self):
        """The holder the lock names, or None when there is no lock; StorageError when it
        cannot be read, OutputLockedError when it is not a holder's record (see above)."""
        try:
            # No folder yet, or a file in its place, holds no lock (preparing the folder names
            # the file in the way).
            if not tf.io.gfile.isdir(output_paths.parent_folder(self.lock_path)):
                return None
            with tf.io.gfile.GFile(self.lock_path, "r") as handle:
                text = handle.read()
        except tf.errors.NotFoundError:
            return None
        except tf.errors.OpError as error:
            raise StorageError(f"cannot {self.purpose}: cannot read its lock {self.lock_path}: "
                               f"{output_paths.one_line(error.message)}") from None
        try:
            holder = json.loads(text)
        except ValueError:
            holder = None
        if not isinstance(holder, dict) or not holder.get("token"):
            raise OutputLockedError(
                f"cannot {self.purpose}: its lock {self.lock_path} is not a lock a t2t_lite "
                f"program wrote ({len(text)} characters that do not name a holder). If no "
                f"program is writing there, delete the lock file")
        return holder

    def _try_create(self) -> bool:
        # Named by our token: two programs starting at once never write the same file.
        try:
            with reported_full_storage(output_paths.parent_folder(self.lock_path)), \
                    atomic_files.atomic_write(self.lock_path, owner=self.holder["token"],
                                              overwrite=False) as handle:
                handle.write(json.dumps(self.holder, indent=2))
        except tf.errors.AlreadyExistsError:
            return False
        return (self._read_holder() or {}).get("token") == self.holder["token"]

    def _why_gone(self, holder: dict):
        """Why the holder is gone when it ran on this host and has ended, else None (another
        host's holder cannot be told)."""
        return _why_not_running(holder) if holder.get("host") == self.holder["host"] else None

    def refuse_if_held(self):
        """Raises OutputLockedError now if a running program holds the lock, without writing
        anything: a program calls it first, so that it is refused in seconds, before the
        checks and preparations that come before `acquire`."""
        self._check_reachable()
        holder = self._read_holder()
        if holder and not self._why_gone(holder):
            raise OutputLockedError(self._refusal(holder))

    def acquire(self):
        """Takes the lock, taking over one whose holder is gone; raises OutputLockedError if a
        running program holds it."""
        self._check_reachable()
        for _ in range(3):
            if self._try_create():
                self.held = True
                return self
            holder = self._read_holder()
            if holder is None:
                continue  # released between our rename and our read: try again
            gone = self._why_gone(holder)
            if gone:
                logging.warning("taking over the lock %s of %s, which no longer runs: %s",
                                self.lock_path, describe(holder), gone)
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
        """Removes the lock if it is still ours. One that cannot be read now is left, with a
        warning: removing it could free another's lock, and raising would hide the error, if
        any, that the program is ending with (on this host a later program takes it over)."""
        try:
            ours = self.held and (self._read_holder() or {}).get("token") == self.holder["token"]
        except UserError as error:
            logging.warning("leaving the lock %s: %s", self.lock_path, error)
            ours = False
        if ours:
            tf.io.gfile.remove(self.lock_path)
        self.held = False

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc_info):
        self.release()
