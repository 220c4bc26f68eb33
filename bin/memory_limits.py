"""Memory and the address-space limit (ulimit -v) of a program: what TensorFlow takes to start
under a limit, malloc's arenas kept few under one, and memory that runs out told as one line
(a MemoryLimitError, which common.run_main prints) instead of a traceback or a native abort.

Importing this module changes nothing in the process and loads no TensorFlow.
"""
import contextlib
import sys

from t2t_lite.errors import UserError

# The address space (ulimit -v, RLIMIT_AS) TensorFlow 2.21 takes to load and start its
# thread pools, before any work: 1.54 GiB on 2 CPU cores with MALLOC_ARENAS_UNDER_A_LIMIT
# (VmPeak; more with more cores). Under a lower limit every program dies in native code (a
# thread that cannot be created aborts, a library fails to map), so `check_address_space`
# refuses it first.
TENSORFLOW_ADDRESS_SPACE = int(1.5 * 2**30)
# glibc's malloc gives threads that allocate at once arenas of their own, each reserving 64 MB
# of address space (up to 8 per core): under ulimit -v those reservations, not the memory
# used, make TensorFlow's threads fail to start (the decoder of a small model reserved 2.16 GB
# on 2 cores, 1.82 GB with 2 arenas). Under a limit, malloc keeps to this many.
MALLOC_ARENAS_UNDER_A_LIMIT = 2
M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


class MemoryLimitError(UserError):
    """Memory ran out, or the address-space limit is too low for TensorFlow to start; the
    message says which and what to do."""


def prepare_for_the_limit():
    """A program's first step: under ulimit -v, fewer malloc arenas
    (MALLOC_ARENAS_UNDER_A_LIMIT), before any thread makes more, and `check_address_space`."""
    if address_space_limit() is not None:
        _limit_malloc_arenas(MALLOC_ARENAS_UNDER_A_LIMIT)
    check_address_space()


def address_space_limit():
    """The soft limit of this process' address space (ulimit -v) in bytes; None without."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _limit_malloc_arenas(arenas: int):
    """glibc's mallopt(M_ARENA_MAX, arenas), what MALLOC_ARENA_MAX=arenas sets at a process'
    start; must run before the threads that would make more (TensorFlow's). Nothing where the
    C library is not glibc."""
    import ctypes
    try:
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, arenas)
    except (OSError, AttributeError):  # no mallopt: not glibc
        pass


def _megabytes(size: int) -> str:
    return f"{size / 2**20:,.0f} MB"


def check_address_space():
    """A MemoryLimitError when ulimit -v is below what TensorFlow takes to start
    (TENSORFLOW_ADDRESS_SPACE): it would otherwise abort in native code with no word of
    memory (exit status 127 or 134)."""
    limit = address_space_limit()
    if limit is not None and limit < TENSORFLOW_ADDRESS_SPACE:
        raise MemoryLimitError(
            f"the address space is limited to {_megabytes(limit)} (ulimit -v) and TensorFlow "
            f"takes about {_megabytes(TENSORFLOW_ADDRESS_SPACE)} of it to start, before any "
            f"work: raise the limit (ulimit -v unlimited)")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` says memory (or address space) ran out: MemoryError, Python's "can't
    start new thread", a library that could not be mapped, TensorFlow's OOM
    (ResourceExhaustedError; not a full disk, which storage_errors reports) or an aborted
    operation whose allocation failed."""
    message = str(error).lower()
    if isinstance(error, MemoryError):
        return True
    if isinstance(error, RuntimeError) and "can't start new thread" in message:
        return True
    if isinstance(error, ImportError) and "failed to map segment" in message:
        return True
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return False
    if isinstance(error, tf.errors.ResourceExhaustedError):
        return "no space left" not in message and ("oom" in message or "alloc" in message)
    if isinstance(error, tf.errors.AbortedError):
        return "alloc" in message or "memory" in message
    return False


def out_of_memory_message(error: BaseException) -> str:
    """One line: memory ran out, the error's kind and first line, the address-space limit
    (ulimit -v) if any, and what to do."""
    from t2t_lite.storage.output_paths import one_line
    cause = one_line(getattr(error, "message", None) or error) or "no message"
    limit = address_space_limit()
    where = (f"the address space is limited to {_megabytes(limit)} (ulimit -v): raise the "
             f"limit (ulimit -v unlimited)" if limit is not None else
             "free memory (other programs)")
    return (f"memory ran out ({type(error).__name__}: {cause}); {where}, or ask for less "
            f"(the decoder: --decode_hparams=batch_size=8,parallel_batches=1)")


@contextlib.contextmanager
def memory_errors_reported():
    """Runs the block; memory that runs out in it (`is_out_of_memory`) becomes a
    MemoryLimitError saying so (`out_of_memory_message`); other errors go on as they are."""
    try:
        yield
    except Exception as error:  # any kind can say memory ran out; the others go on
        if not is_out_of_memory(error):
            raise
        raise MemoryLimitError(out_of_memory_message(error)) from error
