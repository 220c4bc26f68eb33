"""SIGTERM (a cluster preempting the job, `kill`) and SIGINT (Ctrl-C) in the trainer, from the
program's first instant: the handler whose state the Trainer (loop.py) acts on in the training
loop, and the exceptions that end a trainer on a signal. It imports no TensorFlow, so that
t2t_lite-trainer installs it before TensorFlow loads.

MultiWorkerMirroredStrategy's creation puts TensorFlow's preemption notifier (its native
SigtermNotifier, which only records the signal for the coordination service) in the place of
Python's SIGTERM handler. `hold_sigterm` blocks SIGTERM in the main thread before TensorFlow
starts any thread, so that every thread inherits the block, until `SignalWatch.release_sigterm`
installs the handler again once the strategy exists: a SIGTERM meanwhile waits and then
reaches the handler.
"""
import contextlib
import signal
import threading

from absl import logging

STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StoppedBySignal(Exception):
    """Training stopped on a SIGTERM or SIGINT; the message says which checkpoint the same
    command resumes from. `exit_status` is 128 + the signal's number (143, 130), the status of
    a process that the signal ended."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.signal_number = signal_number
        self.exit_status = 128 + signal_number


class Interrupted(BaseException):
    """A signal that ends the trainer at once (a BaseException, as KeyboardInterrupt, so that
    no `except Exception` on its way takes it for an error to handle). `second`: a second
    signal, received while training stopped for the first."""

    def __init__(self, signal_number: int, second: bool):
        super().__init__(signal_number)
        self.signal_number = signal_number
        self.second = second
        self.exit_status = 128 + signal_number


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def hold_sigterm():
    """Blocks SIGTERM in the calling (main) thread and so in every thread started from it
    afterwards (TensorFlow's), until SignalWatch.release_sigterm."""
    if _in_main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


class SignalWatch:
    """The trainer's handler of STOPPING_SIGNALS while `installed()` (in the main thread only:
    Python runs signal handlers there).

    In the training loop (`in_loop`), the first signal is kept in `signal_number` for
    the Trainer (loop.py), which stops training after the update under way. Before the loop the
    first ends the trainer at once (Interrupted), unless `keep_until_loop` (several workers,
    once they have met): then it is kept for the workers' vote as training begins, so that all
    stop together. A second signal always ends the trainer at once."""

    def __init__(self):
        self.signal_number = None  # the signal that stops training, here or on another worker
        self.in_loop = False
        self.keep_until_loop = False

    def _install(self) -> dict:
        """Installs the handler; returns the handlers it replaced."""
        return {number: signal.signal(number, self._received) for number in STOPPING_SIGNALS}

    @contextlib.contextmanager
    def installed(self):
        """The handler in place within the context, the previous ones restored after it."""
        if not _in_main_thread():
            yield
            return
        previous = self._install()
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def release_sigterm(self):
        """Installs the handler again over any native one TensorFlow put in its place, then
        ends hold_sigterm: a SIGTERM that waited reaches the handler now."""
        if _in_main_thread():
            self._install()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})

    def _received(self, number, frame):
        if self.signal_number is not None or not (self.in_loop or self.keep_until_loop):
            raise Interrupted(number, second=self.signal_number is not None)
        self.signal_number = number
        when = "after the update under way" if self.in_loop else "before the first update"
        logging.warning("%s received: training stops %s, with a checkpoint (a second signal "
                        "stops at once)", signal.Signals(number).name, when)
