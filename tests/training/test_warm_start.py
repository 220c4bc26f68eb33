"""Fine-tuning from a trained model (t2t_lite-trainer --warm_start_from, issue 53): the new run
starts from the parent's weights at step 0 with a fresh Adam and its own hparams; another
vocabulary, another model shape and a damaged source are refused before anything is written;
a resume keeps the record of the start; averaging, decoding and the export work on the run."""
import json
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import checkpoints, registry
from t2t_lite.checkpoints import CheckpointError, DamagedCheckpointError
from t2t_lite.errors import FlagError
from t2t_lite.decoding import decoder, trained_model
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.models.building import build_model
from t2t_lite.serving import export
from t2t_lite.storage.run_description import save_run_description, vocabulary_record
from t2t_lite.training import averaging, losses, trainer, warm_start

from program_runs import (NO_DROPOUT, SMALL, error_lines, hparams_of, joined, run,
                          trainer_flags)

# The parent is conftest's trained_dir (SMALL, default dropout, two updates); the fine-tuned
# run changes what may change: no dropout, float32, another seed (another initialisation).
FINE_TUNED = joined(SMALL, NO_DROPOUT, "mixed_precision=float32,length_bucketing=each")
SEED = 7


class FirstLoss(keras.callbacks.Callback):
    """The training loss of the first update (computed before the update is applied)."""

    loss = None

    def on_train_batch_end(self, batch, logs=None):
        if self.loss is None:
            self.loss = float(logs["loss"])


def fine_tune(data_dir, source, output_dir, steps: int, callbacks=()):
    config = trainer.RunConfig(train_steps=steps, eval_steps=0, save_checkpoints_steps=1,
                               log_every_steps=1, seed=SEED, warm_start_from=str(source))
    return trainer.train("algorithmic_copy", "transformer", hparams_of(FINE_TUNED), data_dir,
                         str(output_dir), config, list(callbacks))


@pytest.fixture(scope="module")
def fine_tuned(data_dir, trained_dir, tmp_path_factory):
    """(output_dir, first training loss) of two updates warm-started from trained_dir, a
    checkpoint at each."""
    output_dir = tmp_path_factory.mktemp("fine_tuned") / "run"
    first = FirstLoss()
    fine_tune(data_dir, trained_dir, output_dir, 2, [first])
    return output_dir, first.loss


def parent_loss_on_first_batch(data_dir, trained_dir) -> float:
    """The parent's loss (label-smoothed, per target token) on the fine-tuned run's first
    batch, the parent restored into the model the fine-tuned hparams build (dropout 0)."""
    hparams = hparams_of(FINE_TUNED)
    problem = registry.problem("algorithmic_copy")
    model = build_model("transformer", hparams, problem.vocab_size(data_dir))
    checkpoints.restore(checkpoints.latest(str(trained_dir)), model)
    batch = next(iter(problem.dataset("train", data_dir, hparams, training=True,
                                      num_replicas=1, seed=SEED)))
    loss_sum, tokens = losses.loss_sum_and_tokens(model(batch, training=False),
                                                  batch["targets"], hparams.label_smoothing)
    return float(loss_sum / tokens)


def test_the_fine_tuned_run_starts_from_the_parents_weights(data_dir, trained_dir, fine_tuned):
    output_dir, first_loss = fine_tuned
    assert first_loss == pytest.approx(parent_loss_on_first_batch(data_dir, trained_dir),
                                       rel=1e-5)


def test_its_optimizer_is_fresh_and_its_steps_count_from_zero(trained_dir, fine_tuned):
    """After one update from zero moments, Adam's m = (1 - beta1) g and v = (1 - beta2) g², so
    m² / v = (1 - beta1)² / (1 - beta2) for every element, whatever the gradient g; moments
    carried over from the parent would give other ratios."""
    output_dir, _ = fine_tuned
    hparams = hparams_of(FINE_TUNED)
    stored = checkpoints.reader(str(output_dir / "model.ckpt-1"))
    keys = stored.get_variable_to_shape_map()
    iteration = [key for key in keys if key.startswith("optimizer/") and "iteration" in key]
    assert [int(stored.get_tensor(key)) for key in iteration] == [1]
    expected = (1 - hparams.optimizer_adam_beta1) ** 2 / (1 - hparams.optimizer_adam_beta2)
    momenta = [key for key in keys if key.endswith("_momentum" + checkpoints.VALUE_KEY_SUFFIX)]
    assert momenta
    for key in momenta:
        m = stored.get_tensor(key).astype(np.float64)
        v = stored.get_tensor(key.replace("_momentum/", "_velocity/")).astype(np.float64)
        moved = v > 1e-24
        np.testing.assert_allclose(m[moved] ** 2 / v[moved], expected, rtol=1e-3)
    # A run of its own: another run id than the parent's, which its checkpoints share.
    parent_id = checkpoints.run_id_of(str(trained_dir / "model.ckpt-2"))
    run_ids = {checkpoints.run_id_of(str(output_dir / f"model.ckpt-{step}")) for step in (1, 2)}
    assert len(run_ids) == 1 and parent_id not in run_ids


def test_hparams_json_records_the_start_and_a_resume_keeps_it(data_dir, trained_dir, fine_tuned,
                                                              tmp_path, caplog):
    output_dir, _ = fine_tuned
    recorded = json.loads((output_dir / "hparams.json").read_text())
    start = {"checkpoint": str(trained_dir / "model.ckpt-2"), "step": 2,
             "run_dir": str(trained_dir)}
    assert recorded["warm_start"] == start
    assert recorded["hparams"]["hidden_size"] == 32 and recorded["problem"] == "algorithmic_copy"

    # The same command again resumes the run (its optimizer and step), not the warm start.
    resumed = tmp_path / "run"
    shutil.copytree(output_dir, resumed)
    keras.backend.clear_session()  # a resume restores by the variables' names, as a new process
    fine_tune(data_dir, trained_dir, resumed, 3)
    assert "is not used" in caplog.text and f"resumes from {resumed}/model.ckpt-2" in caplog.text
    stored = checkpoints.reader(str(resumed / "model.ckpt-3"))
    iteration = [key for key in stored.get_variable_to_shape_map()
                 if key.startswith("optimizer/") and "iteration" in key]
    assert [int(stored.get_tensor(key)) for key in iteration] == [3]
    assert json.loads((resumed / "hparams.json").read_text())["warm_start"] == start


def test_another_vocabulary_is_one_error_and_nothing_is_written(data_dir, trained_dir, tmp_path):
    """A parent trained on a vocabulary file (a translate_text_files model, say) and a data
    folder of the copy task's symbols."""
    source = tmp_path / "parent"
    shutil.copytree(trained_dir, source)
    record = json.loads((source / "hparams.json").read_text())
    record["vocabulary"]["files"] = [{"name": "vocab.translate_text_files.bpe.model",
                                      "sha256": "ab" * 32}]
    (source / "hparams.json").write_text(json.dumps(record))
    new = tmp_path / "new"
    code, out = run("trainer", *trainer_flags(data_dir, new, 1, FINE_TUNED),
                    f"--warm_start_from={source}")
    assert code == 2, out
    assert len(error_lines(out)) == 1 and "Traceback" not in out, out
    line = error_lines(out)[0]
    for named in (f"--warm_start_from={source}", f"--data_dir={data_dir}",
                  f"{data_dir}/vocab.translate_text_files.bpe.model (sha256 ababab",
                  f"{source}/hparams.json", "--vocab_from="):
        assert named in line, named
    assert not new.exists() or not any(new.iterdir())


def test_another_model_shape_is_one_error_and_nothing_is_written(data_dir, trained_dir,
                                                                 tmp_path):
    new = tmp_path / "new"
    code, out = run("trainer", *trainer_flags(data_dir, new, 1,
                                              FINE_TUNED.replace("hidden_size=32",
                                                                 "hidden_size=64")),
                    f"--warm_start_from={trained_dir}/model.ckpt-1")
    assert code == 2, out
    assert len(error_lines(out)) == 1 and "Traceback" not in out, out
    line = error_lines(out)[0]
    for named in (f"--warm_start_from={trained_dir}/model.ckpt-1", "has shape",
                  "hidden_size (32 there, 64 here)", f"{trained_dir}/hparams.json"):
        assert named in line, named
    assert not new.exists() or not any(new.iterdir())


def test_a_layer_the_model_has_not_is_refused(data_dir, tmp_path):
    """Fewer layers than the parent's: every variable of the new model is in the checkpoint
    with its shape, but the checkpoint holds a layer more, which a restore would drop."""
    problem = registry.problem("algorithmic_copy")
    two_layers = hparams_of(FINE_TUNED, "num_hidden_layers=2")
    parent = tmp_path / "two_layers"
    model = build_model("transformer", two_layers, problem.vocab_size(data_dir))
    checkpoints.make_manager(str(parent), model).save(checkpoint_number=5)
    save_run_description(str(parent), "algorithmic_copy", "transformer", two_layers,
                         vocabulary_record(problem, data_dir))
    new = tmp_path / "new"
    with pytest.raises(CheckpointError, match=r"has the variable '.*layer_1.*' and \d+ more, "
                                              r"which the model built from these hparams "
                                              r"has not.*num_hidden_layers \(2 there, 1 here\)"):
        fine_tune(data_dir, parent, new, 1)
    assert not new.exists() or not any(new.iterdir())


def test_hparams_that_change_the_function_but_no_shape_are_refused(data_dir, trained_dir,
                                                                   tmp_path):
    """num_heads splits the same query, key and value matrices otherwise: every variable
    fits, yet the parent's weights would compute another function."""
    heads = hparams_of(FINE_TUNED).num_heads
    config = trainer.RunConfig(train_steps=1, eval_steps=0, warm_start_from=str(trained_dir))
    new = tmp_path / "new"
    with pytest.raises(CheckpointError, match=rf"the same variables, computing another "
                                              rf"function.*num_heads \({heads} there, "
                                              rf"{heads // 2} here\)"):
        trainer.train("algorithmic_copy", "transformer",
                      hparams_of(FINE_TUNED, f"num_heads={heads // 2}"), data_dir, str(new),
                      config)
    assert not new.exists() or not any(new.iterdir())


def test_a_source_without_a_checkpoint_or_its_hparams_json_is_refused(data_dir, trained_dir,
                                                                      tmp_path):
    problem = registry.problem("algorithmic_copy")
    hparams = hparams_of(FINE_TUNED)
    with pytest.raises(CheckpointError, match=f"--warm_start_from={tmp_path}: no checkpoint "
                                              f"there"):
        warm_start.checked_source(str(tmp_path), str(tmp_path / "new"), warm_start.NewRun(
                                  problem, data_dir, "transformer", hparams))
    alone = tmp_path / "alone" / "run"
    shutil.copytree(trained_dir, alone)
    (alone / "hparams.json").unlink()
    with pytest.raises(CheckpointError, match=f"no hparams.json beside {alone}/model.ckpt-2 "
                                              f"\\(in {alone} or {alone.parent}\\)"):
        warm_start.checked_source(str(alone), str(tmp_path / "new"), warm_start.NewRun(
                                  problem, data_dir, "transformer", hparams))


def test_a_damaged_source_is_refused_naming_one_that_restores(data_dir, trained_dir,
                                                               tmp_path):
    source = tmp_path / "parent"
    shutil.copytree(trained_dir, source)
    data_file = next(source.glob("model.ckpt-2.data-*"))
    data_file.write_bytes(data_file.read_bytes()[:100])
    new = tmp_path / "new"
    with pytest.raises(DamagedCheckpointError) as raised:
        fine_tune(data_dir, source, new, 1)
    message = str(raised.value)
    assert str(data_file) in message
    assert f"--warm_start_from={source}/model.ckpt-1 starts from it" in message
    assert not new.exists() or not any(new.iterdir())


def test_averaging_decoding_and_export_work_on_the_fine_tuned_run(data_dir, trained_dir,
                                                                  fine_tuned, tmp_path):
    output_dir, _ = fine_tuned
    first, second = (str(output_dir / f"model.ckpt-{step}") for step in (1, 2))
    # --checkpoints names a prefix and a folder (its latest); the parent's is another run.
    out = tmp_path / "averaged" / "model.ckpt"
    code, printed = run("avg_checkpoints", f"--output_dir={output_dir}",
                        f"--checkpoints={first},{output_dir}", "--num_last=2", f"--out={out}")
    assert code == 2 and error_lines(printed) == [
        "error: --checkpoints and --num_last both choose the checkpoints to average: give one "
        "of them"], printed
    listed = averaging.listed_checkpoints([str(output_dir), first])
    assert listed == [first, second]  # oldest first, whatever the order given
    averaging.check_of_output_run(listed, str(output_dir))
    with pytest.raises(CheckpointError, match=r"--checkpoints: .*model.ckpt-2 is of run .*, "
                                              r"not of the run in --output_dir="):
        averaging.check_of_output_run([str(trained_dir / "model.ckpt-2")], str(output_dir))
    with pytest.raises(FlagError, match="named twice"):
        averaging.listed_checkpoints([second, str(output_dir)])
    averaging.check_one_run(listed)
    with pytest.raises(CheckpointError, match="different runs"):
        averaging.check_one_run([str(trained_dir / "model.ckpt-2"), first])
    averaging.average(str(output_dir), listed, str(out))
    average, one, two = (checkpoints.reader(path) for path in
                         (checkpoints.latest(str(out)), first, second))
    for key in average.get_variable_to_shape_map():
        if checkpoints.is_model_key(key):
            np.testing.assert_allclose(average.get_tensor(key),
                                       (one.get_tensor(key) + two.get_tensor(key)) / 2,
                                       rtol=1e-6, atol=1e-7)

    hparams = hparams_of(FINE_TUNED)
    sources = f"{data_dir}/algorithmic_copy-test.inputs.txt"
    decoded = tmp_path / "decoded.txt"
    greedy = SearchHParams(beam_size=1)
    trained_run = trained_model.open_run(str(output_dir), data_dir)
    assert trained_run.hparams == hparams
    lines = open(sources).read().splitlines()
    translations = decoder.write_translations(
        trained_model.TranslationModel(trained_run).translator(greedy, decoder.TranslatorHParams()),
        lines, str(decoded), show_progress=False)
    references = open(f"{data_dir}/algorithmic_copy-test.targets.txt").read().splitlines()
    assert 0 <= decoder.score(translations, references)["exact_match"] <= 1
    assert len(decoded.read_text().splitlines()) == len(lines)

    export_dir = tmp_path / "serving"
    assert export.export(trained_run, str(export_dir), greedy) == second
    served = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
    texts = served(inputs=tf.constant(lines[:3]))["outputs"].numpy()
    assert [text.decode() for text in texts] == decoded.read_text().splitlines()[:3]
