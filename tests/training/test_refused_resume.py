"""A trainer rerun on a folder that holds another run is refused before it writes anything, and
a damaged hparams.json is one error in every program: the checkpoints of a run are never left
beside a record that does not describe them (issue 35). The same command rerun resumes; other
training settings on resume are recorded once a checkpoint holds them."""
import json
import shutil

import pytest
import tensorflow as tf

from t2t_lite.hparams_lib import HParams
from t2t_lite.storage.run_description import RunDescriptionError, save_run_description, saved_run
from t2t_lite.training.trainer import ResumeError, resumable_hparams

from program_runs import SMALL, error_lines, file_hashes, hparams_of, run, trainer_flags


def decoder_flags(data_dir, output_dir):
    return [f"--data_dir={data_dir}", f"--output_dir={output_dir}", "--decode_from_file=/dev/null"]


@pytest.fixture
def run_copy(trained_dir, tmp_path):
    """A copy of conftest's trained_dir: two steps, a checkpoint at each."""
    copy = tmp_path / "run"
    shutil.copytree(trained_dir, copy)
    return copy


def test_other_hparams_are_refused_before_anything_is_written(data_dir, run_copy):
    before = file_hashes(run_copy)
    code, out = run("trainer", *trainer_flags(data_dir, run_copy, 4,
                                              SMALL.replace("hidden_size=32", "hidden_size=64")))
    assert code == 2, out
    assert len(error_lines(out)) == 1 and "Traceback" not in out, out
    assert f"hidden_size: 32 in {run_copy}/hparams.json, 64 requested" in out
    assert "--output_dir" in error_lines(out)[0]  # how to proceed: a new folder
    assert file_hashes(run_copy) == before  # hparams.json, learning_rate.png, checkpoints, events

    # Another hparams set: every value that differs is named.
    code, out = run("trainer", *trainer_flags(data_dir, run_copy, 4, hparams=""),
                    "--hparams_set=transformer_small")
    assert code == 2, out
    for name in ("hidden_size", "filter_size", "num_heads", "num_hidden_layers", "batch_size"):
        assert f"{name}: " in error_lines(out)[0], name
    # Byte for byte the run (trained_dir) that tests/bin/test_checked_before_work.py decodes.
    assert file_hashes(run_copy) == before


def test_other_training_settings_are_recorded_once_a_checkpoint_holds_them(data_dir,
                                                                           run_copy):
    """A change that fails before a checkpoint holds it (a NaN loss, which stops training with
    one error naming the last good checkpoint, and keeps it) is not recorded. The learning rate
    and label smoothing changed at step 2 are: hparams.json still says what steps 1-2 trained
    with, and from which step the new values hold; the decoder reads the last ones (the model
    is the same)."""
    record = run_copy / "hparams.json"
    before = json.loads(record.read_text())
    hashes = file_hashes(run_copy)
    # Step 3's update makes the weights infinite, step 4's loss NaN; no checkpoint between.
    code, out = run("trainer", *trainer_flags(data_dir, run_copy, 4,
                                              SMALL + ",learning_rate_constant=1e30",
                                              checkpoint_every=10))
    assert code == 2, out
    assert error_lines(out) == [
        f"error: the training loss became NaN or infinite at step 4; stopped. The last good "
        f"checkpoint is {run_copy}/model.ckpt-2. Lower the learning rate "
        f"(learning_rate_constant) or lengthen the warmup, then run again."], out
    written = [path for path, digest in file_hashes(run_copy).items()
               if hashes.get(path) != digest]
    # hparams.json and the checkpoints as they were (no NaN saved); new events only.
    assert all(path.startswith(("train/", "eval/")) for path in written), written
    assert tf.train.latest_checkpoint(str(run_copy)) == f"{run_copy}/model.ckpt-2"

    changed = SMALL + ",learning_rate_constant=0.5,label_smoothing=0.0"
    code, out = run("trainer", *trainer_flags(data_dir, run_copy, 3, changed))
    assert code == 0, out
    assert "resuming with other training settings" in out and "from step 2 to 3" in out
    description = json.loads(record.read_text())
    assert description["hparams"] == before["hparams"]  # steps 1-2: learning_rate_constant 2.0
    assert description["changes"] == [
        {"step": 2, "hparams": {"learning_rate_constant": 0.5, "label_smoothing": 0.0}}]
    last = HParams.from_dict(before["hparams"]).replace(learning_rate_constant=0.5,
                                                        label_smoothing=0.0)
    assert saved_run(str(run_copy))["hparams"] == last

    code, out = run("trainer", *trainer_flags(data_dir, run_copy, 4, changed))
    assert code == 0 and "resuming with other training settings" not in out, out
    assert json.loads(record.read_text()) == description  # nothing changed at step 3
    code, out = run("decoder", *decoder_flags(data_dir, run_copy))
    assert code == 0, out


def test_checkpoints_without_a_record_are_checked_before_one_is_written(data_dir, run_copy):
    (run_copy / "hparams.json").unlink()
    code, out = run("trainer", *trainer_flags(data_dir, run_copy, 4,
                                              SMALL.replace("filter_size=64", "filter_size=48")))
    assert code == 2 and "feed_forward/filter/kernel" in out and "shape" in out, out
    assert not (run_copy / "hparams.json").exists()  # no record of a model that is not there


def test_a_damaged_record_is_one_error_in_every_program(data_dir, run_copy, tmp_path):
    record = run_copy / "hparams.json"
    record.write_text("{garbage")
    before = file_hashes(run_copy)
    expected = f"error: {record} cannot be read: not valid JSON (Expecting property name"
    for program, flags in [
            ("trainer", trainer_flags(data_dir, run_copy, 4)),
            ("decoder", decoder_flags(data_dir, run_copy)),
            ("exporter", [f"--data_dir={data_dir}", f"--output_dir={run_copy}",
                          f"--export_dir={tmp_path / 'export'}"])]:
        code, out = run(program, *flags)
        assert code == 2 and "Traceback" not in out, (program, out)
        assert len(error_lines(out)) == 1 and expected in out, (program, out)
        assert "line 1 column 2" in out, (program, out)
        assert file_hashes(run_copy) == before, program  # the trainer did not rewrite it


def test_a_damaged_record_is_refused_even_without_checkpoints(data_dir, tmp_path):
    """The trainer never replaces a record it cannot read: the folder may be another run's."""
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    (output_dir / "hparams.json").write_text('{"problem": "algorithmic_copy"}')
    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 1))
    assert code == 2 and "has no 'model'" in out, out
    assert (output_dir / "hparams.json").read_text() == '{"problem": "algorithmic_copy"}'


def tiny():
    return hparams_of(SMALL)


def write_record(folder, text):
    (folder / "hparams.json").write_text(text)
    return str(folder / "hparams.json")


# The record of the copy task's vocabulary, made in code (no file).
COPY_VOCABULARY = {"data_dir": "", "vocab_size": 12, "files": []}


def valid_record() -> dict:
    return {"problem": "algorithmic_copy", "model": "transformer", "vocabulary": COPY_VOCABULARY,
            "hparams": tiny().to_dict()}


@pytest.mark.parametrize("damage, message", [
    (lambda record: record.pop("hparams"), "has no 'hparams'"),
    (lambda record: record.pop("vocabulary"), "has no 'vocabulary'"),
    (lambda record: record.update(problem=3), "'problem' is 3: expected a name"),
    (lambda record: record.update(hparams=[1]), "'hparams' is [1]: expected an object"),
    (lambda record: record["hparams"].update(hidden_sise=32),
     "unknown hparam 'hidden_sise'. Did you mean 'hidden_size'?"),
    (lambda record: record["hparams"].update(hidden_size="32"),
     "hparam hidden_size='32': expected int"),
    (lambda record: record["hparams"].update(learning_rate_schedule="constant"),
     "hparam learning_rate_schedule='constant': expected a list of names"),
    (lambda record: record["hparams"].update(num_heads=3), "hidden_size=32 is not divisible"),
    (lambda record: record.update(changes={}), "'changes' is {}: expected a list"),
    (lambda record: record.update(changes=[{"hparams": {"relu_dropout": 0.0}}]),
     "the change {'hparams': {'relu_dropout': 0.0}} is not an object with a \"step\" number"),
    (lambda record: record.update(changes=[{"step": 2, "hparams": {"relu_dropout": "0"}}]),
     "hparam relu_dropout='0': expected float"),
])
def test_a_hand_edited_record_names_the_key(tmp_path, damage, message):
    record = valid_record()
    damage(record)
    path = write_record(tmp_path, json.dumps(record))
    with pytest.raises(RunDescriptionError) as raised:
        saved_run(str(tmp_path))
    assert str(raised.value).startswith(f"{path} cannot be read: ")
    assert message in str(raised.value)


def test_a_record_of_an_earlier_version_takes_the_defaults_of_hparams_added_since(tmp_path):
    record = valid_record()
    del record["hparams"]["output_layer_chunk_rows"]
    write_record(tmp_path, json.dumps(record))
    assert saved_run(str(tmp_path))["hparams"] == tiny()


def test_a_record_round_trips(tmp_path):
    save_run_description(str(tmp_path), "algorithmic_copy", "transformer", tiny(),
                         COPY_VOCABULARY)
    assert saved_run(str(tmp_path)) == {"problem": "algorithmic_copy", "model": "transformer",
                                        "vocabulary": COPY_VOCABULARY, "hparams": tiny()}
    assert saved_run(str(tmp_path / "none")) == {}


def test_a_resumed_run_keeps_the_recorded_length_bucketing(tmp_path):
    """The trainer records "auto" resolved (each without XLA, longer under XLA); a rerun asking
    for "auto" resumes with the recorded choice, so that its batches continue the same stream
    whichever --jit_compile it runs with."""
    save_run_description(str(tmp_path), "algorithmic_copy", "transformer",
                         tiny().replace(length_bucketing="longer"), COPY_VOCABULARY)
    resumed = resumable_hparams(str(tmp_path), "algorithmic_copy", "transformer", tiny())
    assert resumed == tiny().replace(length_bucketing="longer")
    with pytest.raises(ResumeError, match="length_bucketing: 'longer' in .*, 'each' requested"):
        resumable_hparams(str(tmp_path), "algorithmic_copy", "transformer",
                          tiny().replace(length_bucketing="each"))


def test_training_settings_may_change_on_resume_but_not_the_model_or_the_data(tmp_path):
    """What neither changes the variables, the function the checkpoints compute nor the order
    of the batches (the learning rate after a NaN loss, dropout) may change on resume."""
    save_run_description(str(tmp_path), "algorithmic_copy", "transformer", tiny(),
                         COPY_VOCABULARY)
    changed = tiny().replace(learning_rate_constant=0.5, learning_rate_warmup_steps=100,
                             relu_dropout=0.0, label_smoothing=0.0)
    assert resumable_hparams(str(tmp_path), "algorithmic_copy", "transformer",
                             changed) == changed
    for name, value in [("batch_size", 128), ("timing_signal", "interleaved"),
                        ("norm_epsilon", 1e-5), ("mixed_precision", "bfloat16")]:
        with pytest.raises(ResumeError, match=f"{name}: "):
            resumable_hparams(str(tmp_path), "algorithmic_copy", "transformer",
                              tiny().replace(**{name: value}))
    with pytest.raises(ResumeError, match="problem: 'algorithmic_copy' in .*, "
                                          "'algorithmic_reverse' requested"):
        resumable_hparams(str(tmp_path), "algorithmic_reverse", "transformer", tiny())
