"""t2t_lite: the Transformer of "Attention Is All You Need" on TensorFlow 2 and Keras 3,
in the style of tensor2tensor.

setup.py installs the top-level folders bin/, problems/ and hparams/ as t2t_lite.bin,
t2t_lite.problems and t2t_lite.hparams. Python started in a clone finds the clone's t2t_lite/
first, ahead of the installed package (`python -m t2t_lite.bin.trainer` from the clone's
folder): the package then also looks for its subpackages in the clone's top folder, so that
they come from the same clone as the library.
"""
import os as _os

__version__ = "0.1.0"

_TOP_FOLDER = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
_INSTALLED_FROM_TOP = ("bin", "problems", "hparams")
if not _os.path.isdir(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "bin")) \
        and all(_os.path.isfile(_os.path.join(_TOP_FOLDER, name, "__init__.py"))
                for name in _INSTALLED_FROM_TOP) \
        and _os.path.isfile(_os.path.join(_TOP_FOLDER, "setup.py")):
    __path__.append(_TOP_FOLDER)


def load(folder: str, checkpoint: str = None, **options):
    """A trained model that translates and scores sentences (docs/python.md), from a run's
    output folder (checked as by the decoder) or a CTranslate2 folder of `export`.

    Args:
        checkpoint: a checkpoint prefix or folder, "best" or "averaged" (the run's folders of
            those names); None: the latest.
        options: data_dir (default: the one hparams.json records), hparams (only
            "mixed_precision=..."), seed (sampling's).
    Returns:
        decoding.trained_model.TranslationModel: translate(sentences, **decode_settings),
        score(sources, targets).
    """
    from t2t_lite.decoding import trained_model
    return trained_model.load(folder, checkpoint, **options)


def generate_data(problem: str, data_dir: str, tmp_dir: str, vocab_from: str = None,
                  **files):
    """Generates `problem`'s sharded TFRecords and vocabulary in data_dir (t2t_lite-datagen).
    vocab_from: a trained run, data folder or .model file whose vocabulary to encode with.
    files: translate_text_files' configure (train, dev, test, train_weights, ...)."""
    from t2t_lite import registry
    from t2t_lite.errors import FlagError
    instance = registry.problem(problem)
    if files:
        if not hasattr(instance, "configure"):
            raise FlagError(f"{', '.join(files)}: only for problems read from your own files "
                            f"(translate_text_files), not for {problem}")
        instance.configure(**files)
    instance.generate_data(data_dir, tmp_dir, vocab_from=vocab_from)


def export(folder: str, export_dir: str, format: str = "saved_model", checkpoint: str = None,
           data_dir: str = None, hparams="", quantization: str = "int8",
           jit_compile: bool = False, overwrite: bool = False, **decode_settings) -> str:
    """Exports a trained run (`folder`, `checkpoint`, `data_dir` as in `load`) to export_dir,
    whole or not at all: a SavedModel ("saved_model", searching with `decode_settings`, XLA if
    `jit_compile`) or a CTranslate2 folder ("ctranslate2"). Returns the checkpoint."""
    from t2t_lite.decoding import trained_model
    from t2t_lite.errors import FlagError
    from t2t_lite.serving import export_run
    if format == "ctranslate2" and (decode_settings or jit_compile):
        raise FlagError("decode settings and jit_compile apply to format='saved_model' only")
    search_hparams, _ = trained_model.decode_hparams(decode_settings)
    return export_run(trained_model.open_run(folder, data_dir, hparams=hparams), export_dir,
                      format, checkpoint, quantization, search_hparams, jit_compile, overwrite)


def average_checkpoints(output_dir: str, out: str, num_last: int = None,
                        checkpoints: list = None) -> tuple:
    """Averages the model variables of the last `num_last` (5) checkpoints of output_dir, or
    of the `checkpoints` listed (prefixes or folders of that run), into `out` (paper §6.1), as
    a unit. Returns (its checkpoint prefix, the paths averaged)."""
    from t2t_lite.errors import FlagError
    from t2t_lite.storage import output_paths, outputs
    from t2t_lite.training import averaging
    if checkpoints is not None and num_last is not None:
        raise FlagError("--checkpoints and --num_last both choose the checkpoints to "
                        "average: give one of them")
    paths = (averaging.listed_checkpoints(checkpoints) if checkpoints is not None
             else averaging.last_checkpoints(output_dir, num_last or 5))
    averaging.check_one_run(paths)  # before anything is written
    if checkpoints is not None:
        averaging.check_of_output_run(paths, output_dir)
    # The average replaces the one in `out` as a unit: the lock is in the folder that holds it.
    output = outputs.Output.folder(out, "out", lock_folder=output_paths.parent_folder(out))
    with outputs.opened(output):
        averaging.check_out(out)
        return averaging.average(output_dir, paths, out), paths


def train(problem, data_dir, output_dir, *, model="transformer", hparams_set="transformer_base",
          hparams="", callbacks=(), **settings):
    """Trains `model` (`hparams_set` with the `hparams` overrides, "a=1,b=2" or a dict) on
    `problem`'s data in data_dir into output_dir, resuming from its checkpoints, with the Keras
    `callbacks` in the loop; `settings`: t2t_lite-trainer's flags by name (train_steps=1000,
    keep_best="bleu", ...). Returns a TrainingResult: the model, the step reached and the
    evaluations (t2t_lite.training.trainer.train_problem)."""
    from t2t_lite.decoding.dev_bleu import DevBleu  # the dev BLEU of eval_bleu_sentences
    from t2t_lite.training.trainer import train_problem
    return train_problem(problem, data_dir, output_dir, model=model, hparams_set=hparams_set,
                         hparams=hparams, callbacks=callbacks, dev_bleu=DevBleu, **settings)
