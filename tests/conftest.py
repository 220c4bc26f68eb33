"""Test settings: quiet TensorFlow, on its own choice of CPU kernels as the programs run it,
and the shared fixtures."""
import fcntl
import os
import pathlib
import shutil
import socket

import pytest

import program_runs

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def pytest_xdist_auto_num_workers(config):
    """-n auto (pyproject.toml): a test process per core and one more, which keeps the cores
    busy while tests wait on the programs they run; PYTEST_XDIST_AUTO_NUM_WORKERS still
    decides where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 1


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


def generate_copy_data(folder, train: int, dev: int, test: int = 10) -> str:
    """algorithmic_copy records of the given sizes in `folder`."""
    from t2t_lite import registry
    problem = registry.problem("algorithmic_copy")
    problem.num_samples = {"train": train, "dev": dev, "test": test}
    problem.generate_data(str(folder), str(folder))
    return str(folder)


@pytest.fixture(scope="session")
def copy_task_data(tmp_path_factory):
    """A function generating algorithmic_copy records of the given sizes into a new folder."""
    def generate(train: int, dev: int, test: int = 10) -> str:
        return generate_copy_data(tmp_path_factory.mktemp("copy_data"), train, dev, test)
    return generate


@pytest.fixture(scope="session")
def built_once(tmp_path_factory, worker_id):
    """A function (name, build) -> the folder `name` that build(folder) filled, once in a test
    session: of pytest-xdist's test processes the first to ask builds it, the others wait for it
    (a file lock) and read it. What the build wrote must stay as it was: tests work on copies
    of it or write beside it."""
    if worker_id == "master":  # the only test process
        def build_here(name: str, build) -> pathlib.Path:
            folder = tmp_path_factory.mktemp(name)
            build(folder)
            return folder
        return build_here
    root = tmp_path_factory.getbasetemp().parent  # the session's, above each process's own

    def build_or_wait(name: str, build) -> pathlib.Path:
        folder, built = root / name, root / f"{name}.built"
        with open(root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not built.exists():
                shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
                folder.mkdir()
                build(folder)
                built.touch()
        return folder
    return build_or_wait


@pytest.fixture(scope="session")
def data_dir(built_once):
    """algorithmic_copy records (300 train, 20 dev, 10 test), which the runs of the trainer
    program in the tests read (program_runs.trainer_flags); tests damage copies of it."""
    return str(built_once("copy_data", lambda folder: generate_copy_data(folder, 300, 20)))


@pytest.fixture(scope="session")
def trained_dir(data_dir, built_once):
    """The --output_dir of t2t_lite-trainer's two steps of program_runs.SMALL on data_dir, a
    checkpoint at each (model.ckpt-1 and model.ckpt-2). Tests read it or work on copies of it:
    one that wrote into it is an error at the end of the session."""
    def train(folder):
        code, out = program_runs.run("trainer",
                                     *program_runs.trainer_flags(data_dir, folder / "run", 2))
        assert code == 0, out

    output_dir = built_once("trained", train) / "run"
    written = program_runs.file_hashes(output_dir)
    yield output_dir
    assert program_runs.file_hashes(output_dir) == written, "a test wrote into trained_dir"


@pytest.fixture(scope="session")
def untrained_model_dir(data_dir, built_once):
    """(data_dir, output_dir) of an untrained program_runs.TINY_MODEL copy model: its
    checkpoint model.ckpt-1 and hparams.json, which the decoder and the exporter read as a
    trained run's (its translations are anything, in the copy task's symbols)."""
    def save(folder):
        from t2t_lite import checkpoints, registry
        from t2t_lite.models.building import build_model
        from t2t_lite.storage.run_description import save_run_description, vocabulary_record
        problem = registry.problem("algorithmic_copy")
        hparams = program_runs.hparams_of(program_runs.TINY_MODEL)
        model = build_model("transformer", hparams, problem.vocab_size(data_dir))
        checkpoints.make_manager(str(folder / "train"), model).save(checkpoint_number=1)
        save_run_description(str(folder / "train"), "algorithmic_copy", "transformer", hparams,
                             vocabulary_record(problem, data_dir))

    return data_dir, str(built_once("untrained", save) / "train")


# A copy model that copies the held-out sequences after 300 steps (dev token accuracy 1.0).
COPY_MODEL_HPARAMS = program_runs.joined(
    program_runs.SMALL_MODEL, "batch_size=512", program_runs.COPY_BUCKET,
    "learning_rate_warmup_steps=100,learning_rate_constant=1.0", program_runs.NO_DROPOUT)


@pytest.fixture(scope="session")
def trained_copy_model(built_once):
    """(data_dir, output_dir, float32 hparams) of COPY_MODEL_HPARAMS trained in float32 for 300
    steps, once in the test session: the decoding and serving tests read it and write nothing
    into output_dir (their exports go to folders of their own beside it)."""
    hparams = program_runs.hparams_of(COPY_MODEL_HPARAMS)

    def train(folder):
        from t2t_lite.training import trainer
        generate_copy_data(folder / "data", 10_000, 100, 100)
        trainer.train("algorithmic_copy", "transformer", hparams, str(folder / "data"),
                      str(folder / "train"),
                      trainer.RunConfig(train_steps=300, eval_every=300, eval_steps=1,
                                        save_checkpoints_steps=300, log_every_steps=100))

    folder = built_once("copy_model", train)
    return str(folder / "data"), str(folder / "train"), hparams


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
