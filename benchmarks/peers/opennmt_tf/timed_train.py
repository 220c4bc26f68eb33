"""`onmt-main ... train` that also ends after a time budget and can keep timed weights, run by
OpenNMT-tf's own Python.

    python timed_train.py SECONDS [--curve_every=S --curve_dir=DIR] ONMT_MAIN_ARGS...
        (SECONDS 0: no time limit; --curve_every 0: only the weights after the last update)

OpenNMT-tf 2.32 stops training only at `train.max_step` (or by early stopping on evaluation).
Its `Trainer.__call__` runs `for loss in self._steps(...)`, and after the loop logs its final
statistics and saves a last checkpoint. This wrapper replaces `Trainer._steps` with a generator
that yields the same losses and returns once SECONDS have passed since the loop started, so a
time-limited run ends exactly as a `max_step` run does: a checkpoint at the last update.
The time is checked after each update, once OpenNMT-tf has logged it and saved any checkpoint
due then. It starts when the training loop starts (after the model and the input pipeline are
built; the tracing of the training function counts), as t2t_lite's time limit starts at
`on_train_begin`.

With --curve_dir, the model's weights (no optimizer state) are also written to DIR/ckpt-STEP
every --curve_every seconds of the loop (checked after each update) and after the last update,
and DIR/curve.json lists {step, seconds, path} for each: the checkpoints of the dev BLEU curve,
decoded after training (benchmarks/multi30k_recipe.py does the same for t2t_lite). They are
apart from OpenNMT-tf's own checkpoints, so they change neither its `keep_checkpoint_max` nor
its averaging.

At the end it prints one line that run.py reads:
    training loop: N updates in S s, last loss L
This file imports only OpenNMT-tf, TensorFlow and the standard library (it runs in the peer's
environment).
"""
import json
import math
import os
import sys
import time


class CurveCheckpoints:
    """The model's weights every `every` seconds of training and at the end, with their step
    and time."""

    def __init__(self, trainer, every: float, directory: str):
        import tensorflow as tf
        self.manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=trainer._model),
                                                  directory, max_to_keep=None,
                                                  checkpoint_name="ckpt")
        self.iterations = trainer._optimizer.iterations
        self.every = every
        self.next_save = every or math.inf
        self.record = os.path.join(directory, "curve.json")
        self.points = []

    def after_update(self, seconds: float):
        if seconds >= self.next_save:
            self.save(seconds)
            while self.next_save <= seconds:
                self.next_save += self.every

    def save(self, seconds: float):
        step = int(self.iterations.numpy())
        if step == 0 or (self.points and self.points[-1]["step"] == step):
            return
        path = self.manager.save(checkpoint_number=step)
        self.points.append({"step": step, "seconds": round(seconds, 2), "path": path})
        with open(self.record + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(json.dumps(self.points, indent=2) + "\n")
        os.replace(self.record + ".tmp", self.record)


def limit_training_time(trainer_class, seconds: float, curve_every: float = 0,
                        curve_dir: str = None):
    """Makes `trainer_class._steps` stop after `seconds` (0: never), report its time (from the
    start of the loop to the end of the last update; OpenNMT-tf's bookkeeping after it, and
    closing the input pipeline, not included) and, with `curve_dir`, write the curve
    checkpoints."""
    steps = trainer_class._steps

    def timed_steps(self, dataset, accum_steps=1):
        start = end = time.time()
        updates, last_loss, finished = 0, float("nan"), False
        curve = CurveCheckpoints(self, curve_every, curve_dir) if curve_dir else None
        inner = steps(self, dataset, accum_steps=accum_steps)
        try:
            for last_loss in inner:
                updates += 1
                end = time.time()
                yield last_loss
                if curve:
                    curve.after_update(end - start)
                if seconds and time.time() - start >= seconds:
                    print(f"time limit of {seconds:.0f} s reached", flush=True)
                    finished = True
                    return
            finished = True
        except GeneratorExit:  # OpenNMT-tf left the loop itself (max_step)
            finished = True
            raise
        finally:
            if curve and finished:
                curve.save(end - start)
            print(f"training loop: {updates} updates in {end - start:.1f} s, "
                  f"last loss {last_loss:.6f}", flush=True)

    trainer_class._steps = timed_steps


def parse_arguments(argv: list):
    """(seconds, curve_every, curve_dir, onmt-main's arguments) from this program's argv."""
    seconds, rest = float(argv[0]), list(argv[1:])
    options = {"--curve_every": "0", "--curve_dir": None}
    while rest and rest[0].split("=", 1)[0] in options:
        name, value = rest.pop(0).split("=", 1)
        options[name] = value
    return seconds, float(options["--curve_every"]), options["--curve_dir"], rest


def main():
    seconds, curve_every, curve_dir, onmt_arguments = parse_arguments(sys.argv[1:])
    from opennmt import training
    from opennmt.bin import main as onmt_main

    # One device (the CPU run here) uses the base Trainer; MirroredStrategyTrainer and
    # HorovodTrainer inherit `_steps` from it.
    limit_training_time(training.Trainer, seconds, curve_every, curve_dir)
    sys.argv = ["onmt-main"] + onmt_arguments
    onmt_main.main()


if __name__ == "__main__":
    main()
