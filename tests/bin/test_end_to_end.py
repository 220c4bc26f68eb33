"""The programs a user runs, as a user runs them: datagen -> trainer -> trainer again
(resumes) -> decoder, on the built-in copy problem with a very small model; the first training
on TensorFlow's defaults, with nothing measured, cached or announced about the CPU."""
import os
import re

import pytest

import program_runs
from program_runs import SMALL, joined

HPARAMS = joined(SMALL, "learning_rate_warmup_steps=50")


def run(program, *flags, expect_failure=False, environment=None):
    return program_runs.run_expecting(program, *flags, expect_failure=expect_failure,
                                      env=environment)[1]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("data"))
    run("datagen", "--problem=algorithmic_copy", f"--data_dir={data}",
        f"--tmp_dir={tmp_path_factory.mktemp('tmp')}")
    return data


def train(data_dir, output_dir, steps, *extra, environment=None):
    return run("trainer", "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
               f"--hparams={HPARAMS}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
               f"--train_steps={steps}", "--eval_every=20", "--eval_steps=2",
               "--save_checkpoints_steps=20", "--log_every_steps=10", "--eval_bleu_sentences=8",
               *extra, environment=environment)


def new_user_environment(cache_home) -> dict:
    """This environment as a user's who set no t2t_lite variable, with `cache_home` as the
    cache folder (XDG_CACHE_HOME)."""
    return {**{name: value for name, value in os.environ.items()
               if not name.startswith("T2T_LITE_")}, "XDG_CACHE_HOME": str(cache_home)}


def test_train_resume_and_decode(data_dir, tmp_path):
    output_dir = str(tmp_path / "train")
    cache_home = tmp_path / "cache"
    first = train(data_dir, output_dir, 20, environment=new_user_environment(cache_home))
    # No first-run measurement of the CPU, nothing cached for later runs, no line about it.
    assert not (cache_home / "t2t_lite").exists() and "CPU tuning" not in first
    assert re.search(r"step 10/20 +loss [\d.]+ +lr [\d.e-]+ +\d+ target tok/s", first)
    assert "dev loss" in first and "model.ckpt-20" in first
    assert re.search(r"step 20  dev BLEU = [\d.]+ .*8 sentences; nrefs:1\|", first)
    assert os.listdir(os.path.join(output_dir, "train"))  # TensorBoard events
    assert os.path.exists(os.path.join(output_dir, "learning_rate.png"))

    second = train(data_dir, output_dir, 40)
    assert "resuming from" in second and "model.ckpt-20" in second
    assert "from step 20 to 40" in second
    assert "step 30/40" in second and "step 10/" not in second
    assert os.path.exists(os.path.join(output_dir, "model.ckpt-40.index"))
    dev_losses = [float(x) for x in re.findall(r"dev loss ([\d.]+)", first + second)]
    assert len(dev_losses) == 2 and dev_losses[1] < dev_losses[0]

    decoded = str(tmp_path / "decoded.txt")
    texts = {feature: os.path.join(data_dir, f"algorithmic_copy-test.{feature}.txt")
             for feature in ("inputs", "targets")}
    out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
              f"--decode_from_file={texts['inputs']}", f"--decode_to_file={decoded}",
              f"--score_reference={texts['targets']}")
    assert re.search(r"exact match [\d.]+% \(100 sentences\)", out)
    assert "BLEU" in out
    with open(decoded) as handle:
        lines = handle.read().splitlines()
    assert len(lines) == 100
    assert all(set(line.split()) <= {str(s) for s in range(1, 11)} for line in lines)


def test_bad_flags_give_one_clear_line(data_dir, tmp_path):
    out = run("trainer", "--problem=algorithmic_cpy", "--hparams_set=transformer_tiny",
              f"--data_dir={data_dir}", f"--output_dir={tmp_path}", expect_failure=True)
    assert "error: unknown problem 'algorithmic_cpy'" in out and "algorithmic_copy" in out
    out = run("trainer", "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
              "--hparams=num_layers=2", f"--data_dir={data_dir}", f"--output_dir={tmp_path}",
              expect_failure=True)
    assert "unknown hparam 'num_layers'" in out
    out = run("trainer", "--problem=algorithmic_copy", "--hparams_set=transformer_tny",
              f"--data_dir={data_dir}", f"--output_dir={tmp_path}", expect_failure=True)
    assert "unknown hparams set 'transformer_tny'" in out and "transformer_tiny" in out
    out = run("decoder", f"--data_dir={data_dir}", f"--output_dir={tmp_path / 'none'}",
              "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
              expect_failure=True)
    assert "no checkpoint in" in out
