"""t2t_lite's programs run as `python -m t2t_lite.bin.<program>` would run them, each in a
process of its own, but forked from a server process of this test process that has imported
TensorFlow once: a run then starts in a fraction of a second instead of the seconds TensorFlow's
import takes (most of a refused run's time). Only runs whose environment TensorFlow's import
does not read are forked (`forkable`); the others, and every run that sends signals, sets
limits or feeds stdin, start a fresh Python (program_runs)."""
import atexit
import json
import os
import runpy
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

# Variables read while TensorFlow and its native libraries load: a run that sets one of these
# otherwise than the server's environment starts a fresh Python.
_READ_AT_IMPORT = ("TF_", "XLA_", "OMP_", "KMP_", "MKL", "ONEDNN", "DNNL", "CUDA", "LD_",
                   "PYTHON", "MALLOC", "GLIBC")

_server = None  # (the server's Popen, its socket path, the environment it started with)


def forkable(env) -> bool:
    """Whether a run with environment `env` (None: this process') may be forked."""
    if env is None:
        return True
    base = _server[2] if _server else dict(os.environ)
    keys = {key for key in set(env) | set(base) if key.startswith(_READ_AT_IMPORT)}
    return all(env.get(key) == base.get(key) for key in keys)


def run(module: str, args: list, command: list, env=None, cwd=None, timeout: float = 600):
    """subprocess.run(command, capture_output=True, text=True, ...)'s CompletedProcess of
    `python -m module args`, forked from the server (started at the first run)."""
    path = _started_server()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            open(os.devnull, "rb") as stdin, socket.socket(socket.AF_UNIX) as connection:
        connection.connect(path)
        request = {"module": module, "argv": [module, *map(str, args)],
                   "env": dict(os.environ if env is None else env),
                   "cwd": os.fspath(cwd or os.getcwd())}
        socket.send_fds(connection, [json.dumps(request).encode() + b"\n"],
                        [stdin.fileno(), out.fileno(), err.fileno()])
        reply = connection.makefile("r")
        pid = int(reply.readline())
        connection.settimeout(timeout)
        try:
            status = int(reply.readline())
        except (TimeoutError, socket.timeout):
            os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(command, timeout) from None
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, status, out.read().decode(),
                                           err.read().decode())


def _started_server() -> str:
    global _server
    if _server is None or _server[0].poll() is not None:
        path = os.path.join(tempfile.mkdtemp(prefix="t2t_lite-programs."), "socket")
        process = subprocess.Popen([sys.executable, __file__, path], stdin=subprocess.DEVNULL)
        deadline = time.time() + 300
        while not os.path.exists(path):
            if process.poll() is not None or time.time() > deadline:
                raise RuntimeError("the program server did not start")
            time.sleep(0.05)
        atexit.register(process.kill)
        _server = (process, path, dict(os.environ))
    return _server[1]


def _serve(path: str):
    """Imports TensorFlow, then forks a process for each request on the socket at `path` and
    answers the child's pid, then its exit status (negative: the signal that ended it)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parent = os.getppid()
    import tensorflow  # noqa: F401  what each run would import first
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path + ".new")
    listener.listen(16)
    listener.settimeout(1.0)
    os.rename(path + ".new", path)
    while os.getppid() == parent:  # ends with the test process
        try:
            connection, _ = listener.accept()
        except (TimeoutError, socket.timeout):
            continue
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            listener.close()
            connection.close()
            _run_forked(request, fds)
        for fd in fds:
            os.close(fd)
        connection.sendall(f"{pid}\n".encode())
        threading.Thread(target=_answer_status, args=(connection, pid), daemon=True).start()


def _answer_status(connection, pid: int):
    _, status = os.waitpid(pid, 0)
    with connection:
        connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())


def _run_forked(request: dict, fds: list):
    """The child: the request's stdio, environment, folder and argv, then the module as
    `python -m` runs it; exits as that process would."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]
    sys.argv = request["argv"]
    code = 0
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code
    sys.exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1])
