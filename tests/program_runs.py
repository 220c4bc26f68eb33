"""Running t2t_lite's programs as a user does, each in a process of its own, for the tests of
what they check before working and what they leave behind when they fail: a small copy-task
model (SMALL), its trainer flags, and the files of a folder to compare before and after."""
import hashlib
import subprocess
import sys

SMALL = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=256,"
         "max_length=22,min_length_bucket=22")


def run(program: str, *flags) -> tuple:
    """(exit status, stdout and stderr) of `python -m t2t_lite.bin.<program> flags...`."""
    result = subprocess.run([sys.executable, "-m", f"t2t_lite.bin.{program}", *flags],
                            capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout + result.stderr


def trainer_flags(data_dir, output_dir, steps: int = 1, hparams: str = SMALL,
                  checkpoint_every: int = 1) -> list:
    """t2t_lite-trainer's flags for `steps` steps of the copy task, a checkpoint every
    `checkpoint_every` steps (None: the trainer's default), no BLEU evaluation."""
    flags = ["--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
             f"--hparams={hparams}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
             f"--train_steps={steps}", "--eval_steps=1", "--eval_bleu_sentences=0",
             "--log_every_steps=1"]
    if checkpoint_every is not None:
        flags.append(f"--save_checkpoints_steps={checkpoint_every}")
    return flags


def file_hashes(folder) -> dict:
    """{path inside folder: sha256} of every file under the pathlib.Path `folder`."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}
