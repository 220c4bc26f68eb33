"""What train_speed.py and profile_step.py know of a t2t_lite training step: the seeded training
batches, a fresh model trained as t2t_lite-trainer trains it, the in-process clock of
profile_step.py (a step timed until its counts are read back), the trainer's progress lines
that train_speed.py times (`parse_trainer_log`, with the tokens they leave out counted on the
same batches: `update_tokens`), the shapes of a step's dense layers, and the model FLOPs that
MFU counts."""
import collections
import datetime
import math
import re
import time

import keras

from t2t_lite.data.vocab import PAD_ID
from t2t_lite.models.building import build_model
from t2t_lite.training import trainer
from t2t_lite.training.step import TrainingSteps

import harness

TRAINER_SEED = 1  # t2t_lite-trainer's default --seed; train_speed.py passes it explicitly


def define_flags(flags):
    harness.define_data_flags(flags)
    flags.DEFINE_string("hparams_set", harness.HPARAMS_SET, "Registered hparams set.")
    flags.DEFINE_string("hparams", "", 'Overrides, e.g. "batch_size=2048".')


def training_steps(hparams, vocab_size: int, jit_compile: bool) -> TrainingSteps:
    """A fresh model (seed 1) and optimizer; `.model` is the Keras model."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(1)
    model = build_model("transformer", hparams, vocab_size)
    return TrainingSteps(model, trainer.make_optimizer(hparams), hparams, jit_compile=jit_compile)


def trainer_batches(problem, data_dir: str, hparams, seed: int = TRAINER_SEED):
    """The training batches in the order t2t_lite-trainer --seed=`seed` trains on them: it sets
    Keras's seed (TensorFlow's global one among them) before it builds the dataset with the
    same seed, and the shuffling depends on both."""
    keras.utils.set_random_seed(seed)
    return problem.dataset("train", data_dir, hparams, training=True, seed=seed)


def update_tokens(batches, updates: int, batches_per_update: int = 1) -> list:
    """Each of the first `updates` updates' {"source", "target" (real tokens with EOS, as
    TrainingSteps counts them), "positions" (padding included), "shapes" ([rows, source length,
    target length] of each batch)}."""
    result, iterator = [], iter(batches)
    for _ in range(updates):
        update = {"source": 0, "target": 0, "positions": 0, "shapes": []}
        for _ in range(batches_per_update):
            batch = next(iterator)
            inputs, targets = batch["inputs"].numpy(), batch["targets"].numpy()
            update["source"] += int((inputs != PAD_ID).sum())
            update["target"] += int((targets != PAD_ID).sum())
            update["positions"] += inputs.size + targets.size
            update["shapes"].append([*inputs.shape, targets.shape[1]])
        result.append(update)
    return result


# t2t_lite-trainer's lines on stderr after absl's prefix (level, month and day, local time,
# thread, file:line): "training transformer on translate_multi30k_deen from step 0 to 80
# (7618560 parameters, 1 replicas, XLA off)", then "step 30/80  loss 8.3931  lr 3.49e-07  1152
# target tok/s  0.30 steps/s  3m20s left", whose rates cover the updates since the line before.
_ABSL_PREFIX = r"^[IWEF](?P<month>\d\d)(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d\.\d+) +\d+ \S+\] "
TRAINING_LINE = re.compile(_ABSL_PREFIX + r"training \S+ on \S+ from step (?P<step>\d+) to "
                           r"(?P<total>\d+) \((?P<parameters>\d+) parameters", re.M)
PROGRESS_LINE = re.compile(
    _ABSL_PREFIX + r"step (?P<step>\d+)/(?P<total>\d+) +loss (?P<loss>\S+) +lr "
    r"(?P<learning_rate>\S+) +(?P<target>\d+) target tok/s +(?:(?P<source>\d+) source tok/s +)?"
    r"(?P<steps_per_s>[\d.]+) steps/s", re.M)


def parse_trainer_log(text: str, year: int) -> dict:
    """The last run's "training" line ("start" None without one) and progress lines in
    t2t_lite-trainer's `text` (`year`: that of its first line), times in seconds since the
    epoch; a line without a source rate has "logged_source_tokens_per_s" None."""
    result = {"start": None, "first_step": None, "parameters": None, "lines": []}
    month = 0
    for match in sorted([*TRAINING_LINE.finditer(text), *PROGRESS_LINE.finditer(text)],
                        key=lambda match: match.start()):
        year += int(match["month"]) < month  # a log that runs past New Year
        month = int(match["month"])
        seconds = datetime.datetime.strptime(f"{year}-{month}-{match['day']} {match['time']}",
                                             "%Y-%m-%d %H:%M:%S.%f").timestamp()
        if "parameters" in match.re.groupindex:
            result.update(start=seconds, first_step=int(match["step"]),
                          parameters=int(match["parameters"]), lines=[])  # the last run's
            continue
        result["lines"].append({
            "step": int(match["step"]), "seconds": seconds, "loss": float(match["loss"]),
            "learning_rate": float(match["learning_rate"]),
            "logged_target_tokens_per_s": float(match["target"]),
            "logged_source_tokens_per_s": match["source"] and float(match["source"]),
            "logged_steps_per_s": float(match["steps_per_s"])})
    return result


def trainer_windows(log: dict, updates: list) -> list:
    """One window a progress line of a parsed trainer log, from the line before (the first from
    the "training" line), with the tokens of `updates` (the batches it trained on, from update
    1), their rates, "new_shapes" (updates of a batch shape no earlier one had), "count_check"
    (the trainer's own target tokens/s over the counted one, minus 1) and the line's values."""
    if log["start"] is None:
        raise ValueError("no \"training ... from step\" line in t2t_lite-trainer's log")
    seen, new_at = set(), []
    for update in updates:
        shapes = {tuple(shape) for shape in update["shapes"]}
        new_at.append(bool(shapes - seen))
        seen |= shapes
    windows, previous = [], (log["first_step"], log["start"])
    for line in log["lines"]:
        first, step = previous[0] + 1, line["step"]
        if step > len(updates):
            raise ValueError(f"t2t_lite-trainer logged update {step}, but only {len(updates)} "
                             f"updates were counted")
        seconds = line["seconds"] - previous[1]
        counted = updates[first - 1:step]
        window = {"first_step": first, "step": step, "seconds": seconds,
                  "target_tokens": sum(u["target"] for u in counted),
                  "source_tokens": sum(u["source"] for u in counted),
                  "positions": sum(u["positions"] for u in counted),
                  "new_shapes": sum(new_at[first - 1:step]), **{
                      key: line[key] for key in line if key not in ("step", "seconds")}}
        if seconds > 0 and counted:
            window.update(target_tokens_per_s=window["target_tokens"] / seconds,
                          source_tokens_per_s=window["source_tokens"] / seconds,
                          steps_per_s=len(counted) / seconds)
            window["count_check"] = (line["logged_target_tokens_per_s"]
                                     / max(window["target_tokens_per_s"], 1e-9) - 1)
        windows.append(window)
        previous = (step, line["seconds"])
    return windows


def timed_steps(steps: TrainingSteps, batches) -> list:
    """Each step's seconds and real source and target tokens."""
    timed = []
    for batch in batches:
        start = time.perf_counter()
        counts = {name: float(value) for name, value in steps.train_step(batch).items()}
        timed.append({"seconds": time.perf_counter() - start,
                      "targets_real": counts["target_tokens"],
                      "inputs_real": counts["real_tokens"] - counts["target_tokens"]})
    return timed


def dense_shapes(batch, hparams, vocab_size) -> collections.Counter:
    """{(m, k, n): matmuls of that shape in one forward pass}: the dense layers of a step on
    `batch` over every padded position (backward: the same sizes, transposed); the pre-softmax
    projection over the real targets in chunks of `output_layer_chunk_rows` when set."""
    rows, source = batch["inputs"].shape
    source, target = rows * source, rows * batch["targets"].shape[1]
    d, f = hparams.hidden_size, hparams.filter_size
    shapes = collections.Counter()
    shapes[source, d, d] += 4 * hparams.encoder_layers + 2 * hparams.decoder_layers  # + memory k, v
    shapes[target, d, d] += 6 * hparams.decoder_layers  # self-attention q, k, v, out; q, out
    for tokens, layers in ((source, hparams.encoder_layers), (target, hparams.decoder_layers)):
        shapes[tokens, d, f] += layers
        shapes[tokens, f, d] += layers
    chunk_rows = getattr(hparams, "output_layer_chunk_rows", 0)
    if chunk_rows:
        real_targets = int((batch["targets"].numpy() != 0).sum())
        shapes[chunk_rows, d, vocab_size] += math.ceil(real_targets / chunk_rows)
    else:
        shapes[target, d, vocab_size] += 1  # the pre-softmax projection
    return shapes


def shape_flops(shapes) -> dict:
    return {(m, k, n): 2 * m * k * n * count for (m, k, n), count in shapes.items()}


def parameter_counts(model, hparams, vocab_size) -> dict:
    """The weights a token passes through, as MFU counts them (benchmarks/README.md): {
    "source_side": N_src (the encoder and the encoder-decoder attention's keys and values),
    "target_side": N_tgt (the rest of the decoder), "softmax_d_times_v": d · V, "embedding",
    "total"}."""
    counts = {"source_side": 0, "target_side": 0, "embedding": 0}
    for variable in model.trainable_variables:
        path = variable.path  # e.g. transformer/decoder_layer_0/self_attention/query/kernel
        source = path.split("/")[1].startswith("encoder_") or any(
            f"encoder_decoder_attention/{name}/" in path for name in ("key", "value"))
        group = "source_side" if source else "target_side"
        counts["embedding" if path.endswith("/embeddings") else group] += int(
            math.prod(variable.shape))
    return {**counts, "total": model.count_params(),
            "softmax_d_times_v": hparams.hidden_size * vocab_size}


def model_flops(parameters, source_tokens, target_tokens) -> float:
    """6 · (N_src · S + (N_tgt + d · V) · T): 2 FLOPs forward and 4 backward per weight and
    token, for S source and T target tokens (or tokens per second)."""
    return 6 * (parameters["source_side"] * source_tokens + (
        parameters["target_side"] + parameters["softmax_d_times_v"]) * target_tokens)
