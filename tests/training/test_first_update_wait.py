"""A first update that takes long says what it waits for: one line once FirstUpdateWait's
seconds have passed (here a pipeline that blocks until the line is logged), none when the
first update is done before."""
import threading

import pytest

from t2t_lite.training import trainer


def blocking_batches(released: threading.Event):
    if not released.wait(timeout=120):  # fails the test, rather than waiting for ever
        raise AssertionError("no line while the first batch was awaited")
    while True:
        yield {}


def first_update(wait, batches):
    """The callback's events of two updates as the Trainer gives them, each waiting for its
    batch."""
    wait.on_train_begin()
    for index in range(2):
        wait.on_train_batch_begin(index)
        next(batches)
        wait.on_train_batch_end(index, {})
    wait.on_train_end()


@pytest.mark.parametrize("jit_compile, replicas", [(False, 1), (True, 2)])
def test_a_first_update_waiting_for_its_batch_says_so(monkeypatch, jit_compile, replicas):
    lines = []
    released = threading.Event()

    def info(text, *args):
        lines.append(text % args)
        if text.startswith("the first update"):
            released.set()

    monkeypatch.setattr(trainer.logging, "info", info)
    monkeypatch.setattr(trainer, "FIRST_UPDATE_PATIENCE_SECONDS", 0.01)
    wait = trainer.FirstUpdateWait(batch_size=4096, replicas=replicas, jit_compile=jit_compile)
    first_update(wait, blocking_batches(released))
    waiting = [line for line in lines if line.startswith("the first update")]
    shares = " x 2 replicas" if replicas == 2 else ""
    assert waiting == [
        f"the first update has not finished after 0.01 s: it waits for the input pipeline to "
        f"fill the first batch of about {4096 * replicas} tokens (batch_size=4096{shares}) and "
        f"for TensorFlow to trace the step"
        + (" and XLA to compile it for the batch's shape" if jit_compile else "")]


def test_a_quick_first_update_says_nothing(monkeypatch):
    lines = []
    monkeypatch.setattr(trainer.logging, "info", lambda text, *args: lines.append(text % args))
    wait = trainer.FirstUpdateWait(batch_size=4096, replicas=1, jit_compile=False,
                                   seconds=600)
    released = threading.Event()
    released.set()
    first_update(wait, blocking_batches(released))
    wait.timer.join()  # cancelled: ends at once
    assert not [line for line in lines if line.startswith("the first update")]
