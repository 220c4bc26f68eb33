"""Ctrl-C (SIGINT) to t2t_lite-decoder, in each of its phases (loading TensorFlow and the
model, decoding a file, waiting for a line of stdin in --decode_interactive), ends it with no
traceback, one `stopped by SIGINT` line and exit status 130; --decode_to_file is not created,
and the lines done are kept in OUT.partial as on any failure (docs/checks.md). Interactive
warnings name the line of stdin they are about."""
import os
import signal
import subprocess
import time

import pytest

from program_runs import program_command

STOPPED = ("stopped by SIGINT before the end: no output file was completed; the same command "
           "starts again")


def decoder(untrained_model_dir, *flags, **options):
    data_dir, output_dir = untrained_model_dir
    return subprocess.Popen(
        program_command("decoder", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                        *flags), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, **options)


def wait_for(condition, process, seconds: float = 300):
    """Polls `condition()` until it holds, the process still running."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def stopped(process) -> str:
    """SIGINT to the process; its stderr, once it has ended with status 130, no traceback and
    the one line saying it was stopped."""
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    err = err.decode()
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert [line for line in err.splitlines() if line.startswith("stopped by")] == [STOPPED], err
    assert err.rstrip("\n").endswith(STOPPED), err
    return err


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler of SIGTERM: the programs' own (common.start), which
    is in place before TensorFlow loads (Python itself handles only SIGINT)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & 1 << (signal.SIGTERM - 1))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_ctrl_c_while_loading_writes_nothing(untrained_model_dir, tmp_path):
    source = tmp_path / "source.txt"
    source.write_text("3 7 1\n")
    process = decoder(untrained_model_dir, f"--decode_from_file={source}",
                      f"--decode_to_file={tmp_path / 'out' / 'decoded.txt'}")
    wait_for(lambda: catches_sigterm(process.pid), process)
    stopped(process)
    assert sorted(os.listdir(tmp_path)) == ["source.txt"]


def test_ctrl_c_while_decoding_keeps_the_lines_done_and_not_the_output(untrained_model_dir,
                                                                       tmp_path):
    """Batches of one line: a window (64 batches) is written at a time, the temporary file
    created with the first; the signal comes once it exists."""
    lines = [" ".join(str(1 + (i * j) % 10) for j in range(1 + i % 9)) for i in range(3000)]
    source = tmp_path / "source.txt"
    source.write_text("".join(line + "\n" for line in lines))
    out = tmp_path / "decoded.txt"
    process = decoder(untrained_model_dir, f"--decode_from_file={source}",
                      f"--decode_to_file={out}", "--decode_hparams=batch_size=1")
    wait_for(lambda: (tmp_path / ".decoded.txt.incomplete").exists(), process)
    err = stopped(process)
    assert not out.exists() and not (tmp_path / ".decoded.txt.incomplete").exists()
    kept = (tmp_path / "decoded.txt.partial").read_text().splitlines()
    assert 0 < len(kept) < len(lines), err
    assert f"The translations of lines 1-{len(kept)} (of {len(lines)}) are kept in " \
           f"{out}.partial" in err


def test_ctrl_c_while_waiting_for_stdin_and_warnings_name_the_stdin_line(untrained_model_dir):
    process = decoder(untrained_model_dir, "--decode_interactive", stdin=subprocess.PIPE)
    err = b""
    while b"ready: translating stdin" not in err:
        chunk = os.read(process.stderr.fileno(), 65536)
        assert chunk, err.decode()
        err += chunk
    # Line 3 cannot be encoded; its warning names it, and the answers go on.
    process.stdin.write(b"3 7 1\n2\nabc\n")
    process.stdin.flush()
    while b"not translated" not in err:
        chunk = os.read(process.stderr.fileno(), 65536)
        assert chunk, err.decode()
        err += chunk
    time.sleep(0.5)  # it waits for the next line of stdin
    rest = stopped(process)
    assert "stdin line 3 not translated: 'abc' is not a symbol" in err.decode() + rest
    assert "stdin line 1 not translated" not in err.decode() + rest
