"""`onmt-main ... train` that also ends after a time budget, run by OpenNMT-tf's own Python.

    python timed_train.py SECONDS ONMT_MAIN_ARGS...      (SECONDS 0: no time limit)

OpenNMT-tf 2.32 stops training only at `train.max_step` (or by early stopping on evaluation).
Its `Trainer.__call__` runs `for loss in self._steps(...)`, and after the loop logs its final
statistics and saves a last checkpoint. This wrapper replaces `Trainer._steps` with a generator
that yields the same losses and returns once SECONDS have passed since the loop started, so a
time-limited run ends exactly as a `max_step` run does: a checkpoint at the last update.
The time is checked after each update, once OpenNMT-tf has logged it and saved any checkpoint
due then. It starts when the training loop starts (after the model and the input pipeline are
built; the tracing of the training function counts), as t2t_lite's time limit starts at
`on_train_begin`.

At the end it prints one line that run.py reads:
    training loop: N updates in S s, last loss L
This file imports only OpenNMT-tf and the standard library (it runs in the peer's environment).
"""
import sys
import time


def limit_training_time(trainer_class, seconds: float):
    """Makes `trainer_class._steps` stop after `seconds` (0: never) and report its time: from
    the start of the loop to the end of the last update (OpenNMT-tf's bookkeeping after it,
    and closing the input pipeline, not included)."""
    steps = trainer_class._steps

    def timed_steps(self, dataset, accum_steps=1):
        start = end = time.time()
        updates, last_loss = 0, float("nan")
        inner = steps(self, dataset, accum_steps=accum_steps)
        try:
            for last_loss in inner:
                updates += 1
                end = time.time()
                yield last_loss
                if seconds and time.time() - start >= seconds:
                    print(f"time limit of {seconds:.0f} s reached", flush=True)
                    return
        finally:
            print(f"training loop: {updates} updates in {end - start:.1f} s, "
                  f"last loss {last_loss:.6f}", flush=True)

    trainer_class._steps = timed_steps


def main():
    seconds = float(sys.argv[1])
    from opennmt import training
    from opennmt.bin import main as onmt_main

    # One device (the CPU run here) uses the base Trainer; MirroredStrategyTrainer and
    # HorovodTrainer inherit `_steps` from it.
    limit_training_time(training.Trainer, seconds)
    sys.argv = ["onmt-main"] + sys.argv[2:]
    onmt_main.main()


if __name__ == "__main__":
    main()
