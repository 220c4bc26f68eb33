"""What train_speed.py and profile_step.py share: their data and hparams flags, a fresh
`transformer` trained as t2t_lite-trainer trains it (TrainingSteps) on the seeded training
batches, the clock of every training-speed figure (a step is timed until its counts are read
back), the matrix-multiply shapes of a step's dense layers (whose rates alone bound the
step), and the model FLOPs that MFU counts."""
import collections
import math
import os
import time

import keras

from t2t_lite.bin.common import FLAGS, flags
from t2t_lite.models.building import build_model
from t2t_lite.training import trainer
from t2t_lite.training.step import TrainingSteps

PROBLEM = "translate_multi30k_deen"
DEFAULT_TMP_DIR = os.path.abspath(os.path.join(__file__, "../../../shared/data/multi30k"))


def define_flags():
    flags.DEFINE_string("data_dir", None,
                        "Folder of the generated TFRecords (generated if absent).")
    flags.DEFINE_string("tmp_dir", DEFAULT_TMP_DIR, "Folder of the raw Multi30k files.")
    flags.DEFINE_string("hparams_set", "transformer_small", "Registered hparams set.")
    flags.DEFINE_string("hparams", "", 'Overrides, e.g. "batch_size=2048".')
    flags.mark_flags_as_required(["data_dir"])


def training_steps(hparams, vocab_size: int, jit_compile: bool) -> TrainingSteps:
    """A fresh model (seed 1) and optimizer; `.model` is the Keras model."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(1)
    model = build_model("transformer", hparams, vocab_size)
    return TrainingSteps(model, trainer.make_optimizer(hparams), hparams,
                         jit_compile=jit_compile)


def training_batches(problem, hparams):
    """The training batches, shuffled with seed 1: every run and mode sees the same ones."""
    return problem.dataset("train", FLAGS.data_dir, hparams, training=True, seed=1)


def timed_steps(steps: TrainingSteps, batches) -> list:
    """Each step's input shape, real source and target tokens, all positions, and seconds."""
    timed = []
    for batch in batches:
        start = time.perf_counter()
        counts = {name: float(value) for name, value in steps.train_step(batch).items()}
        seconds = time.perf_counter() - start
        timed.append({"shape": list(batch["inputs"].shape), "seconds": seconds,
                      "targets_real": counts["target_tokens"],
                      "inputs_real": counts["real_tokens"] - counts["target_tokens"],
                      "tensor": counts["padded_tokens"]})
    return timed


def dense_shapes(batch, hparams, vocab_size) -> collections.Counter:
    """{(m, k, n): matmuls of that shape in one forward pass}: the dense layers of a step on
    `batch` over every padded position, as the ops compute them (the backward pass multiplies
    the same sizes, transposed). With `output_layer_chunk_rows`, the pre-softmax projection
    runs over the real target positions only, that many rows at a time."""
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
    """{(m, k, n): FLOPs of all the matmuls of that shape}."""
    return {(m, k, n): 2 * m * k * n * count for (m, k, n), count in shapes.items()}


def parameter_counts(model, hparams, vocab_size) -> dict:
    """The weights a token passes through, as MFU counts them (train_speed.py's docstring):
    {"source_side": N_src (the encoder, and the key and value projections of the
    encoder-decoder attention), "target_side": N_tgt (the rest of the decoder),
    "softmax_d_times_v": d · V (the pre-softmax projection), "embedding", "total"}."""
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
