"""Training under MirroredStrategy on two logical CPU devices, with XLA."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from absl import logging
    logging.set_verbosity(logging.INFO)
    from t2t_lite import registry
    from t2t_lite.training import trainer
    problem = registry.problem("algorithmic_copy")
    problem.num_samples = {"train": 500, "dev": 50, "test": 10}
    problem.generate_data(DATA, DATA)
    hparams = registry.hparams("transformer_tiny").override_from_string(
        "hidden_size=16,filter_size=32,num_heads=2,num_hidden_layers=1,batch_size=128,"
        "max_length=22,min_length_bucket=22")
    trainer.train("algorithmic_copy", "transformer", hparams, DATA, OUT,
                  trainer.RunConfig(train_steps=4, eval_every=2, eval_steps=1,
                                    save_checkpoints_steps=2, log_every_steps=2))
""")


def test_trains_on_two_replicas_with_xla(tmp_path):
    script = f"DATA, OUT = {str(tmp_path / 'data')!r}, {str(tmp_path / 'out')!r}\n" + SCRIPT
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "2 replicas, XLA on" in output
    assert "step 4/4" in output and "model.ckpt-4" in output
