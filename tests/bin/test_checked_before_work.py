"""What the programs check before they start working, so that a mistake costs seconds and
loses nothing: a second trainer on a locked folder, flags that must be positive, missing
data, output paths that cannot be written, a checkpoint that does not exist; and a bug still
shows its traceback."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from program_runs import SMALL, error_lines, program_command, run, run_program, trainer_flags


def test_a_second_trainer_on_the_same_folder_is_refused_naming_the_first(data_dir, tmp_path):
    first = subprocess.Popen(
        program_command("trainer",
                        *trainer_flags(data_dir, tmp_path, steps=1_000_000, checkpoint_every=None)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (tmp_path / "t2t_lite.lock").exists():
            assert first.poll() is None and time.time() < deadline, "the first never locked"
            time.sleep(0.1)
        code, out = run("trainer", *trainer_flags(data_dir, tmp_path))
        assert code == 2, out
        assert f"error: cannot train in --output_dir={tmp_path}" in out
        assert f"pid {first.pid}" in out and "started" in out
        assert first.poll() is None  # the first trains on
        assert not list(tmp_path.glob("model.ckpt-1.*"))  # nor did the second write a step
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()


def test_flags_that_must_be_positive_are_refused_before_anything_is_written(data_dir, tmp_path):
    code, out = run("trainer", *trainer_flags(data_dir, tmp_path / "out"), "--train_steps=0")
    assert code == 2 and "--train_steps" in out and "not a positive integer" in out, out
    assert not (tmp_path / "out").exists()
    code, out = run("avg_checkpoints", f"--output_dir={tmp_path}", "--num_last=0",
                    f"--out={tmp_path}/avg/model.ckpt")
    assert code == 2 and "--num_last" in out and not (tmp_path / "avg").exists(), out


def test_missing_data_leaves_the_output_folder_untouched(tmp_path):
    code, out = run("trainer", *trainer_flags(tmp_path / "no_data", tmp_path / "out"))
    assert code == 2 and "error: no train data matches" in out, out
    assert "Traceback" not in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_truncated_or_deleted_shard_is_refused_before_training(data_dir, tmp_path, damage):
    damaged = tmp_path / "data"
    shutil.copytree(data_dir, damaged)
    shard = damaged / "algorithmic_copy-train-00003-of-00010"
    if damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:100])
    else:
        shard.unlink()
    code, out = run("trainer", *trainer_flags(damaged, tmp_path / "out"))
    assert code == 2 and f"error: the shard {shard}" in out, out
    assert "rerun t2t_lite-datagen --problem=algorithmic_copy" in out
    assert not (tmp_path / "out").exists()


def test_a_record_damaged_after_the_check_is_named_by_the_trainer(data_dir, tmp_path,
                                                                  monkeypatch):
    """A shard that breaks while training runs (the check before training passed): TensorFlow's
    DataLossError names no file; the trainer's error names the shard."""
    from t2t_lite import registry
    from t2t_lite.data.problem import Problem
    from t2t_lite.errors import DataError
    from t2t_lite.training import trainer
    damaged = tmp_path / "data"
    shutil.copytree(data_dir, damaged)
    shard = damaged / "algorithmic_copy-train-00001-of-00010"
    content = bytearray(shard.read_bytes())
    content[len(content) // 2] ^= 0xFF
    shard.write_bytes(bytes(content))
    monkeypatch.setattr(Problem, "check_data", lambda *args, **kwargs: None)
    hparams = registry.hparams("transformer_tiny").override_from_string(SMALL)
    with pytest.raises(DataError, match=f"the shard {shard} is damaged"):
        trainer.train("algorithmic_copy", "transformer", hparams, str(damaged),
                      str(tmp_path / "out"), trainer.RunConfig(train_steps=200, eval_steps=0))


def test_an_output_dir_that_is_a_file_names_the_flag(data_dir, tmp_path):
    (tmp_path / "taken").write_text("a file")
    code, out = run("trainer", *trainer_flags(data_dir, tmp_path / "taken"))
    assert code == 2 and f"error: --output_dir={tmp_path / 'taken'} is a file" in out, out


def test_decode_to_file_in_a_new_folder_is_created_and_a_bad_one_refused_first(
        data_dir, trained_dir, tmp_path):
    source = tmp_path / "source.txt"
    source.write_text("3 7 1\n2 2\n")
    target = tmp_path / "new" / "folder" / "out.txt"
    code, out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={trained_dir}",
                    f"--decode_from_file={source}", f"--decode_to_file={target}")
    assert code == 0, out
    assert len(target.read_text().splitlines()) == 2
    (tmp_path / "a_file").write_text("")
    # No checkpoint in --output_dir either: the output path is checked before the model loads.
    code, out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={tmp_path}",
                    "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
                    f"--decode_from_file={source}",
                    f"--decode_to_file={tmp_path / 'a_file' / 'out.txt'}")
    assert code == 2 and "error: --decode_to_file=" in out and "is a file" in out, out
    code, out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={trained_dir}",
                    f"--decode_from_file={tmp_path / 'missing.txt'}")
    assert code == 2 and error_lines(out) == [
        f"error: --decode_from_file: missing file {tmp_path / 'missing.txt'}"], out


@pytest.mark.parametrize("flag", ["decode_from_file", "score_reference"])
def test_an_input_file_that_is_a_folder_is_refused_naming_the_flag(data_dir, trained_dir,
                                                                   tmp_path, flag):
    """A folder reads as no lines: the decoder ended with status 0 and an empty output."""
    source = tmp_path / "source.txt"
    source.write_text("3 7 1\n")
    inputs = {"decode_from_file": source, "score_reference": source, flag: tmp_path}
    decoded = tmp_path / "out.txt"
    code, out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={trained_dir}",
                    *[f"--{name}={path}" for name, path in inputs.items()],
                    f"--decode_to_file={decoded}")
    assert code == 2 and error_lines(out) == [
        f"error: --{flag}={tmp_path} is a folder: give a file of sentences, one a line"], out
    assert sorted(os.listdir(tmp_path)) == ["source.txt"]


# A file system TensorFlow has none for: refused at once, without a network (a gs:// bucket
# that cannot be reached goes the same way: tests/test_unreachable_storage.py).
UNREACHABLE = "nosuchfs://bucket/x"


@pytest.mark.parametrize("program, flags, flag", [
    ("decoder", ["--data_dir=D", "--output_dir=O", "--problem=algorithmic_copy",
                 "--hparams_set=transformer_tiny"], "decode_from_file"),
    ("decoder", ["--data_dir=D", "--output_dir=O", "--decode_from_file=/dev/null",
                 "--problem=algorithmic_copy", "--hparams_set=transformer_tiny"],
     "score_reference"),
    ("decoder", ["--data_dir=D", "--decode_from_file=/dev/null"], "output_dir"),
    ("exporter", ["--data_dir=D", "--export_dir=E"], "output_dir"),
    ("avg_checkpoints", ["--out=A"], "output_dir"),
    ("trainer", ["--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
                 "--output_dir=O"], "data_dir"),
    ("datagen", ["--problem=algorithmic_copy", "--data_dir=D"], "tmp_dir"),
])
def test_an_input_that_cannot_be_reached_is_one_error_naming_the_flag(tmp_path, program, flags,
                                                                       flag):
    """Relative D, O, E and A, in tmp_path: nothing is written there either."""
    result = run_program(program, *flags, f"--{flag}={UNREACHABLE}", cwd=tmp_path)
    errors = error_lines(result.stderr)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith(f"error: --{flag}={UNREACHABLE}: cannot reach {UNREACHABLE}: "
                                f"File system scheme 'nosuchfs' not implemented"), errors
    assert os.listdir(tmp_path) == []


def test_a_checkpoint_from_other_hparams_is_named_and_leaves_no_output_folder(
        data_dir, trained_dir, tmp_path):
    """The output folders are made before the checkpoint is read; a failure removes them.
    Without an hparams.json the flags alone give the hparams."""
    unrecorded = tmp_path / "unrecorded"
    shutil.copytree(trained_dir, unrecorded, ignore=shutil.ignore_patterns("hparams.json"))
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    code, out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={unrecorded}",
                    "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
                    f"--hparams={SMALL.replace('filter_size=64', 'filter_size=48')}",
                    "--decode_from_file=/dev/null",
                    f"--decode_to_file={outputs}/decoded/deep/out.txt",
                    f"--attention_dir={outputs}/pictures")
    assert code == 2 and "feed_forward/filter/kernel" in out and "shape" in out, out
    assert os.listdir(outputs) == []


def test_an_override_of_the_trained_models_shape_is_refused_naming_both_values(
        data_dir, trained_dir, tmp_path):
    """hparams.json gives a trained model's shape: --hparams (decoder) or --hparams_set
    (exporter) that would change it are refused before anything is written, naming the
    hparam, the recorded and the requested value and the hparams.json; a checkpoint restored
    into fewer layers would drop the others' weights without a word."""
    recorded = f"{trained_dir}/hparams.json"
    decoded = tmp_path / "out.txt"
    code, out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={trained_dir}",
                    "--hparams=num_hidden_layers=2,mixed_precision=float32",
                    "--decode_from_file=/dev/null", f"--decode_to_file={decoded}")
    assert code == 2 and error_lines(out) == [
        "error: --hparams=num_hidden_layers=2,mixed_precision=float32 changes the trained "
        f"model: num_hidden_layers: 1 in {recorded}, 2 requested. A trained model is decoded "
        "and exported as it was trained (only mixed_precision may change): drop it from the "
        "flags"], out
    code, out = run("exporter", f"--data_dir={data_dir}", f"--output_dir={trained_dir}",
                    "--hparams_set=transformer_tiny", f"--export_dir={tmp_path}/export/1")
    errors = error_lines(out)
    assert code == 2 and len(errors) == 1, out
    assert errors[0].startswith("error: --hparams_set=transformer_tiny changes the trained "
                                f"model: hidden_size: 32 in {recorded}, 128 requested; "), out
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("program, flags, start", [
    ("trainer", ["--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
                 "--hparams=hiden_size=4"],
     "error: --hparams: unknown hparam 'hiden_size'. Did you mean 'hidden_size'? Known "
     "hparams: attention_dropout, "),
    ("decoder", ["--hparams=num_heads=two", "--decode_from_file=/dev/null"],
     "error: --hparams: num_heads='two': expected int"),
    ("exporter", ["--hparams_set=transformer_tny", "--export_dir=E"],
     "error: --hparams_set: unknown hparams set 'transformer_tny'. Did you mean "
     "'transformer_tiny'? Registered hparams sets: "),
])
def test_a_bad_hparams_override_or_set_names_its_flag(untrained_model_dir, tmp_path, program,
                                                      flags, start):
    """In every program, beside a record or not, before anything is written."""
    data_dir, output_dir = untrained_model_dir
    if program == "trainer":
        output_dir = tmp_path / "out"
    code, out = run(program, f"--data_dir={data_dir}", f"--output_dir={output_dir}", *flags,
                    cwd=tmp_path)
    errors = error_lines(out)
    assert code == 2 and len(errors) == 1 and errors[0].startswith(start), out
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("program, flags, refused", [
    ("decoder", ["--problem=algorithmic_reverse", "--decode_from_file=/dev/null",
                 "--decode_to_file=out.txt"],
     "--problem=algorithmic_reverse differs from the trained model: problem: "
     "'algorithmic_copy' in {}, 'algorithmic_reverse' requested"),
    ("exporter", ["--model=universal_transformer", "--export_dir=E"],
     "--model=universal_transformer differs from the trained model: model: 'transformer' in "
     "{}, 'universal_transformer' requested"),
])
def test_a_problem_or_model_other_than_the_records_is_refused(untrained_model_dir, tmp_path,
                                                              program, flags, refused):
    """The checkpoint holds the recorded model, trained on the recorded problem: a --problem
    was used as given, a --model ignored, without a word."""
    data_dir, output_dir = untrained_model_dir
    code, out = run(program, f"--data_dir={data_dir}", f"--output_dir={output_dir}", *flags,
                    cwd=tmp_path)
    assert code == 2 and error_lines(out) == [
        f"error: {refused.format(f'{output_dir}/hparams.json')}. A trained model is decoded "
        "and exported with the problem and model it was trained on: drop it from the "
        "flags"], out
    assert os.listdir(tmp_path) == []


def test_the_records_problem_and_model_may_be_repeated():
    from t2t_lite.decoding.trained_model import recorded_names
    from t2t_lite.errors import FlagError
    run = {"problem": "algorithmic_copy", "model": "transformer"}
    assert recorded_names(run, "O/hparams.json") == ("algorithmic_copy", "transformer")
    assert recorded_names(run, "O/hparams.json", "algorithmic_copy", "transformer") == \
        ("algorithmic_copy", "transformer")
    with pytest.raises(FlagError, match="^--problem=algorithmic_reverse --model=lstm differ "
                       "from the trained model: problem: 'algorithmic_copy' in O/hparams.json, "
                       "'algorithmic_reverse' requested; model: 'transformer' in "
                       "O/hparams.json, 'lstm' requested. .*: drop them from the flags$"):
        recorded_names(run, "O/hparams.json", "algorithmic_reverse", "lstm")


def test_inference_takes_the_record_with_its_own_precision():
    """Beside a record, mixed_precision is taken ("auto": the recorded choice) and what only
    training reads is ignored: the hparams are the record's."""
    from t2t_lite import registry
    from t2t_lite.decoding.trained_model import inference_hparams
    recorded = registry.hparams("transformer_tiny").override_from_string(
        "mixed_precision=bfloat16,length_bucketing=each,learning_rate_constant=1.0")
    requested = recorded.override_from_string(
        "mixed_precision=float32,batch_size=64,relu_dropout=0.3,length_bucketing=auto")
    assert inference_hparams(recorded, requested, "O/hparams.json", "--hparams=...") == \
        recorded.replace(mixed_precision="float32")
    as_trained = registry.hparams("transformer_tiny")  # mixed_precision="auto"
    assert inference_hparams(recorded, as_trained, "O/hparams.json", "--hparams_set=...") == \
        recorded


def test_an_address_space_limit_below_tensorflows_is_one_error_before_it_loads(data_dir,
                                                                              tmp_path):
    """Under ulimit -v of 1 GiB TensorFlow cannot even load (ImportError, or a native abort
    with no word of memory at a little more): refused at the start, naming the limit."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2**30, resource.RLIM_INFINITY))

    result = run_program("decoder", f"--data_dir={data_dir}", "--output_dir=O",
                         "--decode_from_file=/dev/null", "--decode_to_file=out.txt",
                         cwd=tmp_path, preexec_fn=limit)
    assert result.returncode == 2 and error_lines(result.stderr) == [
        "error: the address space is limited to 1,024 MB (ulimit -v) and TensorFlow takes "
        "about 1,536 MB of it to start, before any work: raise the limit (ulimit -v "
        "unlimited)"], result.stderr[-3000:]
    assert os.listdir(tmp_path) == []


def test_memory_errors_are_told_from_others():
    """What `memory_errors_reported` turns into one line; a full disk stays a storage error
    and a bug keeps its traceback."""
    import tensorflow as tf
    from t2t_lite.bin.memory_limits import is_out_of_memory
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("can't start new thread"))
    assert is_out_of_memory(tf.errors.ResourceExhaustedError(
        None, None, "OOM when allocating tensor with shape[32,4,512]"))
    assert is_out_of_memory(tf.errors.AbortedError(None, None, "Operation received an "
                                                   "exception: std::bad_alloc"))
    assert not is_out_of_memory(tf.errors.ResourceExhaustedError(
        None, None, "out.txt; No space left on device"))
    assert not is_out_of_memory(RuntimeError("dictionary changed size during iteration"))
    assert not is_out_of_memory(ValueError("OOM"))


def test_a_checkpoint_path_that_does_not_exist_lists_those_that_do(data_dir, trained_dir):
    wrong = f"{trained_dir}/model.ckpt-7"
    code, out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={trained_dir}",
                    f"--checkpoint_path={wrong}", "--decode_from_file=/dev/null")
    assert code == 2 and f"error: --checkpoint_path={wrong}: no such checkpoint" in out, out
    assert f"{trained_dir}/model.ckpt-1, {trained_dir}/model.ckpt-2" in out


def test_a_bug_keeps_its_traceback():
    """User errors are one `error:` line (the tests above); anything else is a bug to report."""
    program = ("from t2t_lite.bin import common\ndef main(argv):\n    raise ValueError('a bug')\n"
               "common.run_main(main)")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1 and "Traceback" in result.stderr
    assert "ValueError: a bug" in result.stderr and "error: a bug" not in result.stderr
