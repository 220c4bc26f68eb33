"""With optimizer_multistep_accumulate_steps=2 (two batches per update) evaluations come at
the same updates as with one batch per update: the dev loss every eval_every updates, the best
checkpoint of the same step and early stopping at the same step (a metric reporting a
scripted dev BLEU by step, through the DevMetric interface DevBleu uses)."""
import json

import keras
import pytest

from t2t_lite import checkpoints
from t2t_lite.training import trainer
from t2t_lite.training.loop import DevMetric

from program_runs import TINY, hparams_of, joined

# Dev BLEU by step: best at 4, then two evaluations without improvement (patience 2).
BLEU = {2: 10.0, 4: 20.0, 6: 15.0, 8: 14.0, 10: 30.0, 12: 5.0}


class ScriptedBleu(DevMetric):
    names = ("val_bleu",)

    def measure(self, model, step):
        return {"val_bleu": BLEU[step]}


class EvaluatedSteps(keras.callbacks.Callback):
    """The step of each epoch end whose logs hold a dev loss."""

    def __init__(self):
        super().__init__()
        self.steps = []

    def on_epoch_end(self, epoch, logs=None):
        if "val_loss" in logs:
            self.steps.append(int(self.model.optimizer.iterations.numpy()))


@pytest.fixture(scope="module", params=[1, 2], ids=["one batch", "two batches per update"])
def run(request, data_dir, tmp_path_factory):
    """(output_dir, evaluated steps) of a run accumulating `param` batches per update."""
    output_dir = tmp_path_factory.mktemp(f"accumulate_{request.param}")
    evaluated = EvaluatedSteps()
    keras.backend.clear_session()
    hparams = hparams_of(joined(TINY, f"optimizer_multistep_accumulate_steps={request.param}"))
    trainer.train("algorithmic_copy", "transformer", hparams, data_dir, str(output_dir),
                  trainer.RunConfig(train_steps=12, eval_every=2, eval_steps=1,
                                    save_checkpoints_steps=2, log_every_steps=100,
                                    keep_best="bleu", early_stopping_patience=2),
                  [ScriptedBleu(), evaluated])
    return output_dir, evaluated.steps


def test_evaluations_best_and_stop_come_at_the_same_updates(run):
    output_dir, evaluated = run
    assert evaluated == [2, 4, 6, 8]
    recorded = json.loads((output_dir / "evaluations.json").read_text())["evaluations"]
    assert [entry["step"] for entry in recorded] == [2, 4, 6, 8]
    assert all("val_loss" in entry for entry in recorded)
    best = json.loads((output_dir / "best" / "best.json").read_text())
    assert (best["step"], best["score"]) == (4, 20.0)
    assert checkpoints.latest(str(output_dir / "best")) == f"{output_dir}/best/model.ckpt-4"
    assert checkpoints.latest(str(output_dir)) == f"{output_dir}/model.ckpt-8"  # stopped there
