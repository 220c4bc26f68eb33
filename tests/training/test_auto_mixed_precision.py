"""mixed_precision=auto, the default: the trainer trains in bfloat16 on a CPU with bfloat16
matmul instructions and no GPU, in float32 elsewhere, records its choice, and a resumed run
keeps the recorded one; outside the trainer "auto" computes in float32 (issue 34). The CPU is
injected, so these hold on any machine."""
import keras
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.models.building import build_model
from t2t_lite.storage.run_description import saved_run
from t2t_lite.training import trainer

TINY = ("hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1,batch_size=256,"
        "max_length=22,min_length_bucket=22")


def tiny(overrides: str = ""):
    return registry.hparams("transformer_tiny").override_from_string(
        ",".join(filter(None, [TINY, overrides])))


def cpu_with_bfloat16(monkeypatch, has_it: bool):
    monkeypatch.setattr(trainer, "cpu_multiplies_in_bfloat16", lambda cpu_flags=None: has_it)


@pytest.mark.parametrize("cpu_flags, has_it", [
    (["avx2"], False),  # Zen 3
    (["avx2", "avx512f"], False),  # AVX-512 without its bfloat16 instructions
    (["avx2", "avx512f", "avx512_bf16"], True),  # Zen 4
    (["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"], True),  # Sapphire Rapids
    (["amx_tile", "amx_bf16"], True),  # AMX alone
    ([], False),  # no x86 flags
])
def test_which_cpus_multiply_in_bfloat16(cpu_flags, has_it):
    assert trainer.cpu_multiplies_in_bfloat16(cpu_flags) is has_it


@pytest.mark.parametrize("requested, has_it, trained_in", [
    ("auto", True, "bfloat16"), ("auto", False, "float32"),
    ("float32", True, "float32"), ("bfloat16", False, "bfloat16"), ("float16", True, "float16"),
])
def test_auto_is_bfloat16_only_on_a_cpu_with_it(monkeypatch, requested, has_it, trained_in):
    cpu_with_bfloat16(monkeypatch, has_it)
    hparams = tiny(f"mixed_precision={requested}")
    assert trainer.mixed_precision_for(hparams, tf.distribute.get_strategy()) == trained_in


def test_auto_stays_float32_where_a_gpu_runs_the_step(monkeypatch):
    cpu_with_bfloat16(monkeypatch, True)
    monkeypatch.setattr(trainer, "xla_pays", lambda strategy: True)  # a GPU among the devices
    assert trainer.mixed_precision_for(tiny(), tf.distribute.get_strategy()) == "float32"


def test_outside_the_trainer_auto_computes_in_float32():
    hparams = tiny()
    assert hparams.mixed_precision == "auto" and hparams.compute_dtype == "float32"
    model = build_model("transformer", hparams, 12)
    assert keras.config.dtype_policy().name == "float32"
    assert {layer.dtype_policy.name for layer in model._flatten_layers()} == {"float32"}


def train(data_dir, output_dir, steps, overrides=""):
    keras.backend.clear_session()  # a resume restores by the layers' names, as a new process
    trainer.train("algorithmic_copy", "transformer", tiny(overrides), data_dir, output_dir,
                  trainer.RunConfig(train_steps=steps, eval_steps=0, save_checkpoints_steps=1,
                                    log_every_steps=1, jit_compile=False))


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(200, 10)


def test_the_choice_is_recorded_and_a_resume_keeps_it_on_another_cpu(monkeypatch, data_dir,
                                                                     tmp_path):
    cpu_with_bfloat16(monkeypatch, True)
    train(data_dir, str(tmp_path / "zen4"), 1)
    assert saved_run(str(tmp_path / "zen4"))["hparams"].mixed_precision == "bfloat16"
    cpu_with_bfloat16(monkeypatch, False)  # resumed on a CPU without bfloat16: still bfloat16
    train(data_dir, str(tmp_path / "zen4"), 2)
    resumed = saved_run(str(tmp_path / "zen4"))
    assert resumed["hparams"].mixed_precision == "bfloat16" and "changes" not in resumed

    train(data_dir, str(tmp_path / "zen3"), 1)  # and the other way round
    cpu_with_bfloat16(monkeypatch, True)
    train(data_dir, str(tmp_path / "zen3"), 2)
    assert saved_run(str(tmp_path / "zen3"))["hparams"].mixed_precision == "float32"


def test_a_run_recorded_before_auto_resumes_in_its_float32(monkeypatch, data_dir, tmp_path):
    # hparams.json from before "auto" existed says float32; a bfloat16 CPU keeps it
    train(data_dir, str(tmp_path / "old"), 1, "mixed_precision=float32")
    cpu_with_bfloat16(monkeypatch, True)
    train(data_dir, str(tmp_path / "old"), 2)
    assert saved_run(str(tmp_path / "old"))["hparams"].mixed_precision == "float32"
