"""Dev BLEU over training time, measured the same way for t2t_lite and the OpenNMT-tf peer.

Decoding during training would slow the training it measures (and by a different amount in
each toolkit), so nothing is decoded while a toolkit trains. Instead, every `every_minutes` of
training (counted from the start of the training loop, after each update) the model's weights
are written to a checkpoint of their own, and the update count and the seconds since the loop
started are recorded; the last update gets one too. After training, each of these checkpoints
translates the same first dev sentences greedily, each toolkit with its own decoder, and the
translations are scored by the same sacreBLEU call (`t2t_lite.decoding.decoder.score`). The
peer does the same inside OpenNMT-tf (`peers/opennmt_tf/timed_train.py`).

Also here: the learning-rate schedule as (warmup, peak), t2t_lite's dev loss of a checkpoint,
where one curve first reaches a BLEU score, and the picture of both curves.
"""
import json
import math
import os
import time

import keras

from t2t_lite.data import pipeline
from t2t_lite.data.problem import DEV
from t2t_lite import checkpoints
from t2t_lite.decoding import decoder
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.models.building import build_model
from t2t_lite.training import trainer
from t2t_lite.training.step import COUNTS, TrainingSteps

CURVE_RECORD = "curve.json"


# --- The schedule as (warmup, peak learning rate) ------------------------------------------------

def parse_schedule(text: str):
    """"1000,1e-3" -> (1000, 0.001): warmup updates and the peak learning rate."""
    try:
        warmup, peak = text.split(",")
        warmup, peak = int(warmup), float(peak)
    except ValueError:
        raise ValueError(f"a schedule is WARMUP,PEAK (e.g. 1000,1e-3), not {text!r}") from None
    if warmup < 1 or not peak > 0:
        raise ValueError(f"schedule {text!r}: warmup must be >= 1 and the peak rate > 0")
    return warmup, peak


def learning_rate_constant(warmup: int, peak: float, hidden_size: int) -> float:
    """The constant of constant * min(1, s/warmup) * rsqrt(max(s, warmup)) * rsqrt(hidden_size)
    (t2t's schedule, and OpenNMT-tf's NoamDecay scale) whose highest rate, at s = warmup, is
    `peak`."""
    return peak * math.sqrt(warmup) * math.sqrt(hidden_size)


def schedule_name(warmup: int, peak: float) -> str:
    return f"w{warmup}_p{peak:g}"


# --- t2t_lite: time limit and curve checkpoints during training ---------------------------------

class TimedCheckpoints(keras.callbacks.Callback):
    """Stops training after `minutes` of it (0: no limit) and, every `every_minutes` (0: never)
    and after the last update, writes the model's weights (no optimizer state) to
    `curve_dir/model.ckpt-STEP`. Time runs from `on_train_begin` and is read after each update;
    `points` holds {step, seconds, path} for each checkpoint, also written to
    `curve_dir/curve.json`."""

    def __init__(self, minutes: float, every_minutes: float = 0, curve_dir: str = None):
        super().__init__()
        self.seconds = minutes * 60
        self.every = every_minutes * 60
        self.curve_dir = curve_dir
        self.points = []
        self.start = self.last_update = self.manager = None
        self.next_save = math.inf

    def on_train_begin(self, logs=None):
        self.start = self.last_update = time.time()
        self.next_save = self.every if self.every and self.curve_dir else math.inf
        if self.curve_dir:
            self.manager = checkpoints.make_manager(self.curve_dir, self.model.model,
                                                    max_to_keep=None)

    def on_train_batch_end(self, batch, logs=None):
        self.last_update = time.time()
        elapsed = self.last_update - self.start
        if elapsed >= self.next_save:
            self._save(elapsed)
            while self.next_save <= elapsed:
                self.next_save += self.every
        if self.seconds and elapsed >= self.seconds:
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.curve_dir:
            self._save(self.last_update - self.start)

    def _save(self, seconds: float):
        step = int(self.model.optimizer.iterations.numpy())
        if self.points and self.points[-1]["step"] == step:
            return
        path = self.manager.save(checkpoint_number=step)
        self.points.append({"step": step, "seconds": round(seconds, 2), "path": path})
        write_json_atomically(os.path.join(self.curve_dir, CURVE_RECORD), self.points)


def write_json_atomically(path: str, value):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(json.dumps(value, indent=2) + "\n")
    os.replace(path + ".tmp", path)


# --- The dev sentences and the decoding of the curve checkpoints --------------------------------

def first_dev_pairs(problem, data_dir: str, count: int):
    """(sources, references): the first `count` pairs of the dev split in datagen's order, as
    text (the trainer's DevBleu takes the same ones)."""
    examples = pipeline.read_examples(problem.filepattern(data_dir, DEV),
                                      shuffle_files=False).take(count)
    encoders = problem.feature_encoders(data_dir)
    pairs = [(encoders["inputs"].decode(example["inputs"]),
              encoders["targets"].decode(example["targets"]))
             for example in examples.as_numpy_iterator()]
    return [source for source, _ in pairs], [reference for _, reference in pairs]


def t2t_lite_curve(points: list, problem, hparams, data_dir: str, sources: list,
                   references: list) -> list:
    """Each curve checkpoint's greedy translations of `sources` (t2t_lite's Translator, as its
    decoder and its trainer's DevBleu) scored with sacreBLEU: the points with `bleu` added.
    One model is built and each checkpoint restored into it, so the search compiles once."""
    if not points:
        return []
    model = build_model("transformer", hparams, problem.vocab_size(data_dir))
    translator = decoder.Translator(model, problem.feature_encoders(data_dir),
                                    SearchHParams(beam_size=1), problem.max_length)
    scored = []
    for point in points:
        checkpoints.restore(point["path"], model)
        hypotheses = translator.translate(sources, show_progress=False)
        scores = decoder.score(hypotheses, references)
        scored.append({**point, "bleu": scores["bleu"], "bleu_signature": scores["bleu_signature"]})
    return scored


# --- t2t_lite's dev loss -------------------------------------------------------------------------

def t2t_lite_dev_loss(problem, hparams, data_dir: str, checkpoint_path: str) -> float:
    """The trainer's dev loss (label-smoothed cross entropy minus its floor, per real target
    token, no dropout) over the whole dev split, for the weights in `checkpoint_path`."""
    model = decoder.load_model("transformer", hparams, problem.vocab_size(data_dir), None,
                               checkpoint_path)
    steps = TrainingSteps(model, trainer.make_optimizer(hparams), hparams, jit_compile=False)
    totals = dict.fromkeys(COUNTS, 0.0)
    dev = problem.dataset(DEV, data_dir, hparams, training=False, repeat=False)
    for batch in dev:
        totals = trainer.add_counts(totals, steps.eval_step(batch))
    return trainer.token_weighted_logs(totals)["loss"]


# --- Reading the curves --------------------------------------------------------------------------

def minutes_to_reach(points: list, bleu: float):
    """The training minutes at which the curve (points of {seconds, bleu}, in time order) first
    reaches `bleu`, linearly interpolated between the two points around it; the first point's
    time if that one already does (nothing is known before it), None if no point does."""
    previous = None
    for point in points:
        if point["bleu"] >= bleu:
            if previous is None:
                return point["seconds"] / 60
            fraction = (bleu - previous["bleu"]) / (point["bleu"] - previous["bleu"])
            seconds = previous["seconds"] + fraction * (point["seconds"] - previous["seconds"])
            return seconds / 60
        previous = point
    return None


def draw_curves(curves: dict, path: str, title: str, mark: dict = None):
    """Dev BLEU against training minutes, one line per toolkit ({name: points}), saved as a PNG
    under a temporary name and then renamed. `mark` ({bleu, minutes, label}) draws a level as
    a dotted line and, if `minutes` is not None, the point where a curve reaches it."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, 4.5), dpi=110)
    for name, points in curves.items():
        axes.plot([p["seconds"] / 60 for p in points], [p["bleu"] for p in points], marker="o",
                  label=name)
    if mark:
        axes.axhline(mark["bleu"], color="gray", linestyle=":", linewidth=1, label=mark["label"])
        if mark["minutes"] is not None:
            axes.plot([mark["minutes"]], [mark["bleu"]], marker="x", color="black",
                      markersize=9, linestyle="none")
    axes.set_xlabel("training minutes (from the start of the training loop)")
    axes.set_ylabel("dev BLEU (greedy)")
    axes.set_title(title, fontsize=9)
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path + ".tmp", format="png")
    pyplot.close(figure)
    os.replace(path + ".tmp", path)
