"""A flag the parser refuses (out of bounds, unknown, not a number, missing) ends every program
as any mistake a user can fix does: one `error:` line naming the flag and exit status 2
(docs/checks.md), where absl's parser printed "FATAL Flags parsing error" with status 1. Help
still prints and exits 0."""
import os

import pytest

from program_runs import error_lines, run_program


def run(program, *flags):
    result = run_program(program, *flags)
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize("program, flags, message", [
    ("trainer", ["--train_steps=-5"], "flag --train_steps=-5: -5 is not a positive integer"),
    ("trainer", ["--train_stepz=5"],
     "Unknown command line flag 'train_stepz'. Did you mean: train_steps ?"),
    ("decoder", ["--data_dir=D", "--output_dir=O", "--attention_sentences=many"],
     "flag --attention_sentences=many: invalid literal for int()"),
    ("avg_checkpoints", ["--num_last=5"],
     "flag --output_dir=None: Flag --output_dir must have a value other than None; "
     "flag --out=None: Flag --out must have a value other than None"),
    ("exporter", ["--data_dir=D", "--output_dir=O", "--export_dir=E", "--overwrite=maybe"],
     "flag --overwrite=maybe"),
])
def test_a_flag_the_parser_refuses_is_one_error_line_with_status_2(program, flags, message):
    code, out, err = run(program, *flags)
    errors = error_lines(err)
    assert code == 2, err
    assert len(errors) == 1 and errors[0].startswith(f"error: {message}"), err
    assert errors[0].endswith("(--helpshort lists the flags)")
    assert "FATAL" not in err and "Traceback" not in err


@pytest.mark.parametrize("program", ["trainer", "datagen"])
def test_help_prints_and_exits_0(program):
    code, out, err = run(program, "--help")
    assert code == 0, err
    assert out.startswith(f"t2t_lite-{program}:") and "--data_dir" in out, out


def test_a_fresh_start_prints_the_error_line_alone():
    """In a Python of its own, TensorFlow's logging not quieted beforehand (most runs of the
    tests are forked from a process that has loaded it: forked_programs), a program's start
    prints nothing of TensorFlow's loading before its one error line."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = run_program("decoder", "--data_dir=D", env=environment)
    assert result.returncode == 2
    assert result.stderr.splitlines() == error_lines(result.stderr) and \
        len(error_lines(result.stderr)) == 1, result.stderr
