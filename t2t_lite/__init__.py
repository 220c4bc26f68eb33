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
