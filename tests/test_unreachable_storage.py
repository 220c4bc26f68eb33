"""Storage that cannot be reached is one error naming the path and the cause, before any work and
within 30 s: a gs:// bucket without a network (the host does not resolve: TensorFlow fails at
once) and one behind a network that never answers (TensorFlow's GCS client retries for
minutes: output_paths.check_reachable gives up after REACH_SECONDS). The lock of a folder that
cannot be read is an error too, never "no lock"."""
import os
import socket
import threading
import time

import pytest
import tensorflow as tf

from t2t_lite.storage import output_lock, output_paths
from t2t_lite.errors import FlagError
from t2t_lite.storage.output_lock import OutputLock, OutputLockedError
from t2t_lite.storage.storage_errors import StorageError

from program_runs import error_lines, run_program

BUCKET_PATH = "gs://t2t-lite-no-such-bucket/x"


def train_into(output_dir: str, data_dir: str, env: dict = None):
    """t2t_lite-trainer on a tiny copy model into output_dir: (completed process, seconds)."""
    start = time.monotonic()
    result = run_program("trainer", "--problem=algorithmic_copy",
                         "--hparams_set=transformer_tiny", f"--data_dir={data_dir}",
                         f"--output_dir={output_dir}", "--train_steps=1", timeout=120, env=env)
    return result, time.monotonic() - start


def assert_one_error_naming(result, path: str):
    errors = error_lines(result.stderr)
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(errors) == 1 and path in errors[0], result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_the_trainer_refuses_a_bucket_it_cannot_reach_at_once(data_dir):
    """No network here: the host does not resolve. (With a network and no such bucket the folder
    cannot be created: the same one error naming the path.)"""
    result, seconds = train_into(BUCKET_PATH, data_dir)
    assert_one_error_naming(result, BUCKET_PATH)
    assert seconds < 30


@pytest.fixture
def silent_proxy():
    """The address of a proxy that accepts connections and never answers (a network that drops
    the requests: TensorFlow's GCS client then waits and retries for minutes)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_the_trainer_gives_up_on_storage_that_does_not_answer(data_dir, silent_proxy):
    env = {name: value for name, value in os.environ.items()
           if name.lower() not in ("no_proxy", "all_proxy")}
    env.update(https_proxy=silent_proxy, http_proxy=silent_proxy, HTTPS_PROXY=silent_proxy,
               HTTP_PROXY=silent_proxy)
    result, seconds = train_into(BUCKET_PATH, data_dir, env)
    assert_one_error_naming(result, BUCKET_PATH)
    assert f"no answer within {output_paths.REACH_SECONDS} s" in result.stderr
    assert seconds < 30  # the thread left asking does not keep the program from ending


def failing_exists(error_type):
    def exists(path):
        raise error_type(None, None, f"Error executing an HTTP request: libcurl code 6\n\t "
                                     f"when reading metadata of {path}")
    return exists


@pytest.mark.parametrize("prepare", [output_paths.prepare_output_folder,
                                     output_paths.prepare_parent_folder,
                                     output_paths.prepare_output_file])
def test_every_output_path_is_checked_for_storage_that_cannot_be_reached(prepare, monkeypatch):
    """The decoder's --decode_to_file and --attention_dir, the exporter's --export_dir and the
    averager's --out go through these, as the trainer's --output_dir does."""
    monkeypatch.setattr(tf.io.gfile, "exists", failing_exists(tf.errors.FailedPreconditionError))
    with pytest.raises(StorageError) as refused:
        prepare("gs://bucket/run/out.txt", "flag")
    message = str(refused.value)
    assert message.startswith("--flag=gs://bucket/run/out.txt: cannot reach gs://bucket/run")
    assert "libcurl code 6 when reading metadata of gs://bucket/run" in message
    assert "\n" not in message


def test_a_question_without_answer_is_given_up(monkeypatch):
    """The answer comes only after the error: a check that waited for it would get "no" and
    raise nothing."""
    answered = threading.Event()
    monkeypatch.setattr(tf.io.gfile, "exists", lambda path: answered.wait(60) and False)
    try:
        with pytest.raises(StorageError, match=r"^--out=gs://b/avg: cannot reach gs://b: no "
                                               r"answer within 0.2 s"):
            output_paths.check_reachable("gs://b", "--out=gs://b/avg", seconds=0.2)
    finally:
        answered.set()


def test_a_folder_found_reachable_is_asked_about_once_per_process(tmp_path, monkeypatch):
    """A trainer's start: the lock's quick refusal, the folder's preparation and taking the
    lock each check the folder; it is asked about the first time only. An answer that was an
    error is not kept: the next check asks again."""
    folder = str(tmp_path / "run")
    asked = []
    exists = tf.io.gfile.exists

    def counted(path):
        if threading.current_thread().name.startswith("reach "):
            asked.append(path)
        return exists(path)

    monkeypatch.setattr(tf.io.gfile, "exists", counted)
    lock = OutputLock.of_folder(folder)
    lock.refuse_if_held()
    output_paths.prepare_output_folder(folder, "output_dir")
    with lock:
        pass
    output_paths.check_reachable(folder + "/", "--output_dir")
    assert asked == [folder]

    later = str(tmp_path / "later")
    monkeypatch.setattr(tf.io.gfile, "exists", failing_exists(tf.errors.UnavailableError))
    with pytest.raises(StorageError):
        output_paths.check_reachable(later, "--out")
    monkeypatch.setattr(tf.io.gfile, "exists", counted)
    output_paths.check_reachable(later, "--out")
    assert asked == [folder, later]


def test_a_lock_that_cannot_be_read_is_an_error_not_no_lock(tmp_path, monkeypatch):
    lock_path = str(tmp_path / output_lock.LOCK_NAME)
    (tmp_path / output_lock.LOCK_NAME).write_text("{}")
    opened = tf.io.gfile.GFile

    def unreadable(path, mode="r"):
        if path == lock_path and "r" in mode:
            raise tf.errors.PermissionDeniedError(None, None, f"{path}; Permission denied")
        return opened(path, mode)

    monkeypatch.setattr(tf.io.gfile, "GFile", unreadable)
    lock = OutputLock.of_folder(str(tmp_path), f"train in --output_dir={tmp_path}")
    for attempt in (lock.refuse_if_held, lock.acquire):
        with pytest.raises(StorageError, match=f"cannot train in --output_dir={tmp_path}: cannot "
                                               f"read its lock {lock_path}: .*Permission denied"):
            attempt()


def test_a_folder_that_is_a_file_holds_no_lock(tmp_path):
    """Reading its lock would fail ("Not a directory"), but there is none: the program goes on
    to prepare the folder, which names the file in the way, and the file stays as it was."""
    taken = tmp_path / "taken"
    taken.write_text("a file")
    lock = OutputLock.of_folder(str(taken), f"train in --output_dir={taken}")
    lock.refuse_if_held()  # no refusal, no StorageError
    with pytest.raises(FlagError, match=f"^--output_dir={taken} is a file, not a folder"):
        output_paths.prepare_output_folder(str(taken), "output_dir")
    assert taken.read_text() == "a file" and os.listdir(tmp_path) == ["taken"]


@pytest.mark.parametrize("content", ["", '{"program": "t2t_lite-tr', "[1, 2]", "{}"])
def test_a_lock_that_does_not_parse_is_refused_not_taken(tmp_path, content):
    """The lock is renamed into place whole: one that does not parse is not one being written,
    and whether its writer still runs cannot be told."""
    (tmp_path / output_lock.LOCK_NAME).write_text(content)
    lock = OutputLock.of_folder(str(tmp_path), f"write --out={tmp_path}/model.ckpt")
    for attempt in (lock.refuse_if_held, lock.acquire):
        with pytest.raises(OutputLockedError, match="is not a lock a t2t_lite program wrote.* "
                                                    "delete the lock file"):
            attempt()
    assert (tmp_path / output_lock.LOCK_NAME).read_text() == content


def test_a_lock_on_a_full_disk_is_one_error_and_leaves_no_temporary(small_filesystem):
    folder = small_filesystem(1)
    with open(os.path.join(folder, "filler"), "wb") as handle:
        handle.write(bytes(1 << 20))  # all of it
    with pytest.raises(StorageError, match=f"^{folder}: no space left on its file system"):
        OutputLock.of_folder(folder).acquire()
    assert os.listdir(folder) == ["filler"]
