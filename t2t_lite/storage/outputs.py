"""One way for a program to open what it writes: `Output.folder`, `.file` or `.whole_folder`,
`check()` in seconds before slow work, then `opened(...)`: folders made, the lock taken, a full
disk named by the flag, and on failure the lock released and the folders made removed
(docs/architecture.md, "Storage")."""
import contextlib
import dataclasses
import os

import tensorflow as tf

from t2t_lite.errors import FlagError
from t2t_lite.storage import atomic_files, output_paths
from t2t_lite.storage.output_lock import LOCK_NAME, OutputLock
from t2t_lite.storage.storage_errors import reported_full_storage

FOLDER, FILE, WHOLE_FOLDER = "folder", "file", "whole folder"


@dataclasses.dataclass(frozen=True)
class Output:
    """A path a program writes, named by its flag (`--flag=path`).

    Args:
        path: the file or folder written.
        flag: the flag's name, without dashes, for the errors.
        form: FOLDER, FILE or WHOLE_FOLDER (see the module's docstring).
        lock_path: the lock file that keeps a second writer out; None for no lock.
        purpose: what the program does with it, completing a refusal's "cannot ...".
    """
    path: str
    flag: str
    form: str
    lock_path: str = None
    purpose: str = None

    @classmethod
    def folder(cls, path: str, flag: str, lock_name: str = LOCK_NAME, purpose: str = None,
               lock_folder: str = None) -> "Output":
        """A folder written in, locked through `lock_name` in it (or in `lock_folder`); no lock
        for lock_name None."""
        lock = tf.io.gfile.join(lock_folder or path, lock_name) if lock_name else None
        return cls(path, flag, FOLDER, lock, purpose)

    @classmethod
    def file(cls, path: str, flag: str, purpose: str = None) -> "Output":
        """A file written whole, locked through `.NAME.lock` beside it."""
        return cls(path, flag, FILE, atomic_files.hidden_sibling(path, ".lock"), purpose)

    @classmethod
    def whole_folder(cls, path: str, flag: str, purpose: str = None) -> "Output":
        """A folder written whole, locked through `.NAME.lock` beside it."""
        path = path.rstrip("/") or path
        return cls(path, flag, WHOLE_FOLDER, atomic_files.hidden_sibling(path, ".lock"),
                   purpose)

    @property
    def named(self) -> str:
        return f"--{self.flag}={self.path}"

    def lock(self):
        """The output's OutputLock, or None when it has no lock."""
        if self.lock_path is None:
            return None
        return OutputLock(self.lock_path, self.purpose or f"write {self.named}")

    def check(self, inputs: dict = None):
        """Refuses the output now, writing nothing: StorageError when its storage cannot be
        reached, FlagError when the path is of the wrong kind (a file where a folder goes, or
        the reverse) or is one of the program's `inputs` ({flag: path or None}, by any
        spelling: a symlink, ./x for x), OutputLockedError when a running program holds its
        lock. A program calls it before its slow checks and work, so that a mistake costs
        seconds."""
        output_paths.check_reachable(self._folder(), self.named)
        self._check_form()
        for flag, path in (inputs or {}).items():
            if path and _same_file(self.path, path):
                raise FlagError(f"{self.named} is the file --{flag}={path} reads: writing it "
                                f"would lose it; choose another file for --{self.flag}")
        lock = self.lock()
        if lock is not None:
            lock.refuse_if_held()

    def _folder(self) -> str:
        """The folder that must exist for the output to be written: the output itself for a
        FOLDER, the one it is in otherwise."""
        return self.path if self.form == FOLDER else output_paths.parent_folder(self.path)

    def _check_form(self):
        gfile = tf.io.gfile
        if self.form == FOLDER and gfile.exists(self.path) and not gfile.isdir(self.path):
            raise FlagError(f"{self.named} is a file, not a folder: choose a folder")
        if self.form == FILE and gfile.isdir(self.path):
            raise FlagError(f"{self.named} is a folder: give a file name")
        if self.form == WHOLE_FOLDER and gfile.exists(self.path) and not gfile.isdir(self.path):
            raise FlagError(f"{self.named} is a file: give the name of a folder to write")

    def prepare(self) -> list:
        """Creates the missing folders the output needs and returns them, deepest first;
        FlagError or StorageError naming the flag when the path cannot be written."""
        self._check_form()
        if self.form == FOLDER:
            return output_paths.prepare_output_folder(self.path, self.flag)
        return output_paths.prepare_parent_folder(self.path, self.flag)


def _same_file(output: str, path: str) -> bool:
    """Whether `output` names the file `path` (os.path.samefile where both exist on local
    disk; the same normalised path otherwise, e.g. on gs://)."""
    try:
        return os.path.samefile(output, path)
    except (OSError, ValueError):
        return os.path.normpath(output) == os.path.normpath(path)


@contextlib.contextmanager
def opened(*outputs: Output, name_full_disk: bool = True):
    """Prepares each output (Output.prepare) and takes its lock for the block, and yields the
    output (the tuple of them for several). With `name_full_disk`, a full disk in the block is
    a StorageError naming the first output's flag (without, the program names each write's own
    flag). When the block raises, the locks are released, then the folders made for the
    outputs removed if empty."""
    with contextlib.ExitStack() as stack:
        for output in outputs:
            created = output.prepare()
            stack.enter_context(output_paths.removed_on_failure(created))
        for output in outputs:
            lock = output.lock()
            if lock is not None:
                stack.enter_context(lock)
        if outputs and name_full_disk:
            stack.enter_context(reported_full_storage(outputs[0].path, outputs[0].flag))
        yield outputs[0] if len(outputs) == 1 else outputs
