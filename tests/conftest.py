"""Test settings: quiet TensorFlow, on its own choice of CPU kernels as the programs run it,
and the shared fixtures."""
import os
import socket

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture
def free_ports():
    """A function returning n TCP ports on 127.0.0.1 that were free a moment ago (for the
    workers of a multi-worker TF_CONFIG)."""
    def pick(count: int) -> list:
        sockets = [socket.socket() for _ in range(count)]
        try:
            for sock in sockets:
                sock.bind(("127.0.0.1", 0))
            return [sock.getsockname()[1] for sock in sockets]
        finally:
            for sock in sockets:
                sock.close()
    return pick


@pytest.fixture(scope="session")
def copy_task_data(tmp_path_factory):
    """A function generating algorithmic_copy records of the given sizes into a new folder."""
    def generate(train: int, dev: int, test: int = 10) -> str:
        from t2t_lite import registry
        problem = registry.problem("algorithmic_copy")
        problem.num_samples = {"train": train, "dev": dev, "test": test}
        data = str(tmp_path_factory.mktemp("copy_data"))
        problem.generate_data(data, data)
        return data
    return generate


# A copy model that copies the held-out sequences after 300 steps (dev token accuracy 1.0).
COPY_MODEL_HPARAMS = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,"
                      "batch_size=512,max_length=22,min_length_bucket=22,"
                      "learning_rate_warmup_steps=100,learning_rate_constant=1.0,"
                      "layer_prepostprocess_dropout=0,attention_dropout=0,relu_dropout=0")


@pytest.fixture(scope="session")
def trained_copy_model(copy_task_data, tmp_path_factory):
    """(data_dir, output_dir, float32 hparams) of COPY_MODEL_HPARAMS trained in float32 for 300
    steps, once per test process: the decoding and serving tests read it and write nothing into
    output_dir (their exports go to folders of their own beside it)."""
    from t2t_lite import registry
    from t2t_lite.training import trainer
    data_dir = copy_task_data(10_000, 100, 100)
    output_dir = str(tmp_path_factory.mktemp("copy_model") / "train")
    hparams = registry.hparams("transformer_tiny").override_from_string(COPY_MODEL_HPARAMS)
    trainer.train("algorithmic_copy", "transformer", hparams, data_dir, output_dir,
                  trainer.RunConfig(train_steps=300, eval_every=300, eval_steps=1,
                                    save_checkpoints_steps=300, log_every_steps=100))
    return data_dir, output_dir, hparams


@pytest.fixture
def small_filesystem(tmp_path):
    """A function mounting a tmpfs of the given MiB at a new folder and returning its path (a
    disk that fills up); unmounted after the test. Skipped where mounting is not allowed (not
    root, or no tmpfs)."""
    import subprocess
    mounted = []

    def mount(mib: int) -> str:
        folder = tmp_path / f"small_{mib}mib_{len(mounted)}"
        folder.mkdir()
        if os.geteuid() != 0:
            pytest.skip("a full file system needs a tmpfs mount, which needs root")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs",
                               str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(folder)
        return str(folder)

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)
