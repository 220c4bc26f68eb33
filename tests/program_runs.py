"""Running t2t_lite's programs as a user does, each in a process of its own, for the tests of
what they check before working and what they leave behind when they fail; the small models the
tests build and train (hparams overrides of transformer_tiny); the files of a folder to compare
before and after."""
import hashlib
import subprocess
import sys

import forked_programs

# A model too small to learn anything, for what does not need learning (saving, decoding,
# exporting, the steps of a run).
TINY_MODEL = "hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1"
# The smallest model that learns the copy task.
SMALL_MODEL = "hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1"
# One bucket of 22 tokens, which every copy-task example fits (up to 20 symbols and EOS).
COPY_BUCKET = "max_length=22,min_length_bucket=22"
NO_DROPOUT = "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0"


def joined(*overrides: str) -> str:
    """One hparams override string of several, each naming other hparams."""
    return ",".join(part for part in overrides if part)


# The copy-task runs of the trainer program in these tests, and of its tiny model.
SMALL = joined(SMALL_MODEL, "batch_size=256", COPY_BUCKET)
TINY = joined(TINY_MODEL, "batch_size=128", COPY_BUCKET)


def hparams_of(*overrides: str):
    """transformer_tiny's HParams with the overrides (joined)."""
    from t2t_lite import registry
    return registry.hparams("transformer_tiny").override_from_string(joined(*overrides))


def program_command(program: str, *flags) -> list:
    """The command line of `python -m t2t_lite.bin.<program> flags...`."""
    return [sys.executable, "-m", f"t2t_lite.bin.{program}", *map(str, flags)]


def run_program(program: str, *flags, timeout: float = 600, **options):
    """The subprocess.CompletedProcess of the program run to its end, stdout and stderr apart
    (`options`: subprocess.run's env, cwd, preexec_fn): forked from a process that has
    imported TensorFlow (forked_programs) where only env and cwd are given and TensorFlow's
    import reads nothing of env, a fresh Python otherwise."""
    command = program_command(program, *flags)
    if set(options) <= {"env", "cwd"} and forked_programs.forkable(options.get("env")):
        return forked_programs.run(f"t2t_lite.bin.{program}", flags, command, timeout=timeout,
                                   **options)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **options)


def run(program: str, *flags, **options) -> tuple:
    """(exit status, stdout and stderr) of `python -m t2t_lite.bin.<program> flags...`."""
    result = run_program(program, *flags, **options)
    return result.returncode, result.stdout + result.stderr


def run_expecting(program: str, *flags, expect_failure: bool = False, **options) -> tuple:
    """`run`, asserting that the program failed (a nonzero status) exactly when
    `expect_failure`."""
    status, output = run(program, *flags, **options)
    assert (status != 0) == expect_failure, output
    return status, output


def error_lines(output: str) -> list:
    """The `error:` lines of a program's output (a user's mistake is exactly one)."""
    return [line for line in output.splitlines() if line.startswith("error:")]


def trainer_flags(data_dir, output_dir, steps: int = 1, hparams: str = SMALL,
                  checkpoint_every: int = 1) -> list:
    """t2t_lite-trainer's flags for `steps` steps of the copy task, a checkpoint every
    `checkpoint_every` steps (None: the trainer's default), no evaluation (of the dev loss or
    BLEU: tests/bin/test_end_to_end.py has them)."""
    flags = ["--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
             f"--hparams={hparams}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
             f"--train_steps={steps}", "--eval_steps=0", "--eval_bleu_sentences=0",
             "--log_every_steps=1"]
    if checkpoint_every is not None:
        flags.append(f"--save_checkpoints_steps={checkpoint_every}")
    return flags


def file_hashes(folder) -> dict:
    """{path inside folder: sha256} of every file under the pathlib.Path `folder`."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}
