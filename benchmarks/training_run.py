"""What train_speed.py and profile_step.py share: their data and hparams flags, a fresh
`transformer` trained as t2t_lite-trainer trains it (TrainingSteps) on the seeded training
batches, and the clock of every training-speed figure: a step is timed until its counts are read
back."""
import os
import time

import keras

from t2t_lite.bin.common import FLAGS, flags
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
    model = trainer.build_model("transformer", hparams, vocab_size)
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
