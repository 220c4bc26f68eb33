"""The decoding race's pieces that need neither toolkit's environment: what CTranslate2 logs
about the CPU when it loads a model, CTranslate2 4.x's requirements and environment (made by the
peers' shared environment code), the CTranslate2 command with its compute type and threads, the
harness's two passes of a round, and decode.py's reading of onmt-main's thread flags."""
import importlib.util
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
PEERS = os.path.join(BENCHMARKS, "peers")
sys.path.insert(0, BENCHMARKS)
import harness  # noqa: E402  (it puts benchmarks/peers/ on sys.path)
import ctranslate2_runtime  # noqa: E402
import peer_environment  # noqa: E402

sys.path.insert(0, os.path.join(PEERS, "opennmt_tf"))
import decode  # noqa: E402  (peers/opennmt_tf/decode.py: the standard library only)

# CTranslate2 4.8.5 loading a float32 model with compute_type="int8" and CT2_VERBOSE=1, on an
# AMD EPYC with AVX-512, among other lines of the process's output.
LOG = """\
I1126 16:20:01.000000 1 something.py:1] a line of another library: with a colon
[2026-11-26 15:53:25.069] [ctranslate2] [thread 7647] [info] CPU: AuthenticAMD (SSE4.1=true, \
AVX=true, AVX2=true, AVX512=true)
[2026-11-26 15:53:25.069] [ctranslate2] [thread 7647] [info]  - Selected ISA: AVX2
[2026-11-26 15:53:25.069] [ctranslate2] [thread 7647] [info]  - Use Intel MKL: false
[2026-11-26 15:53:25.069] [ctranslate2] [thread 7647] [info]  - SGEMM backend: DNNL (packed: false)
[2026-11-26 15:53:25.069] [ctranslate2] [thread 7647] [info]  - GEMM_S16 backend: none \
(packed: false)
[2026-11-26 15:53:25.069] [ctranslate2] [thread 7647] [info]  - GEMM_S8 backend: DNNL \
(packed: false, u8s8 preferred: true)
[2026-11-26 15:53:25.145] [ctranslate2] [thread 7647] [info] Loaded model /w/ctranslate2 on \
device cpu:0
[2026-11-26 15:53:25.145] [ctranslate2] [thread 7647] [info]  - Binary version: 6
[2026-11-26 15:53:25.145] [ctranslate2] [thread 7647] [info]  - Model specification revision: 7
[2026-11-26 15:53:25.145] [ctranslate2] [thread 7647] [info]  - Selected compute type: \
int8_float32
[2026-11-26 15:53:26.000] [ctranslate2] [thread 7647] [info]  - Selected compute type: float32
DECODE {"seconds": 1.0}
"""


def test_the_logged_cpu_backends_and_compute_type():
    assert ctranslate2_runtime.logged_cpu(LOG) == {
        "cpu": "AuthenticAMD (SSE4.1=true, AVX=true, AVX2=true, AVX512=true)",
        "isa": "AVX2", "intel_mkl": "false", "sgemm_backend": "DNNL (packed: false)",
        "gemm_s16_backend": "none (packed: false)",
        "gemm_s8_backend": "DNNL (packed: false, u8s8 preferred: true)",
        "compute_type": "int8_float32"}  # the first one logged: the model's load
    assert ctranslate2_runtime.logged_cpu("DECODE {}\nno CTranslate2 here: none\n") == {}


def test_ctranslate2_4_has_requirements_of_its_own():
    assert ctranslate2_runtime.requirements() == [
        f"ctranslate2=={ctranslate2_runtime.CTRANSLATE2_VERSION}"]
    assert ctranslate2_runtime.CTRANSLATE2_VERSION.startswith("4.")
    peer = load_peer()  # the peer's own requirements are untouched
    assert f"ctranslate2=={peer.CTRANSLATE2_VERSION}" in peer.requirements()
    assert any(line.startswith("opennmt-tf==") for line in peer.requirements())


def test_an_environment_whose_marker_lists_the_requirements_is_reused(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    marker = tmp_path / peer_environment.REQUIREMENTS_MARKER
    marker.write_text("\n".join(ctranslate2_runtime.requirements()) + "\n", encoding="utf-8")
    assert ctranslate2_runtime.ensure_environment(str(tmp_path)) == str(tmp_path / "bin" / "python")


def test_without_a_python_the_environment_code_exits_with_status_3(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        ctranslate2_runtime.ensure_environment(str(tmp_path / "venv"), str(tmp_path / "none"))
    assert exit_.value.code == harness.NO_PYTHON_EXIT_STATUS == 3
    message = capsys.readouterr().err
    assert message.startswith(f"CTranslate2 {ctranslate2_runtime.CTRANSLATE2_VERSION}'s "
                              "environment not created")
    assert f"none was found ({tmp_path / 'none'})" in message


def load_peer():
    spec = importlib.util.spec_from_file_location(
        "opennmt_tf_peer_under_test", os.path.join(PEERS, "opennmt_tf", "run.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ctranslate2_command_has_its_runtime_compute_type_and_threads():
    peer = load_peer()
    setup = {"source": "/w/source.tokens", "latency_source": "/w/latency.tokens",
             "max_decoding_length": 150}
    command = peer.ctranslate2_command("/venvs/ctranslate2/bin/python", setup, "/w/ctranslate2",
                                       "/w/round1.tokens", 4, 0.6, 32, 1, 2, "int8")
    assert command[:3] == ["/venvs/ctranslate2/bin/python", peer.DECODE_SCRIPT, "ctranslate2"]
    assert "--compute_type=int8" in command and "--model_dir=/w/ctranslate2" in command
    assert "--intra_threads=1" in command and "--inter_threads=2" in command
    assert "--max_decoding_length=150" in command
    default = peer.ctranslate2_command("python", setup, "m", "o", 4, 0.6, 32, 1, 1)
    assert "--compute_type=float32" in default


def test_two_passes_compare_line_by_line():
    assert harness.differing_lines(["a", "b", "c"], ["a", "b", "c"]) == 0
    assert harness.differing_lines(["a", "b", "c"], ["a", "x", "c"]) == 1
    assert harness.differing_lines(["a", "b"], ["a", "b", "c", "d"]) == 2


def test_two_passes_write_the_first_and_time_the_second():
    passes, written, result = iter([["a", "b"], ["a", "c"]]), [], {}
    assert harness.two_passes(lambda: next(passes), written.append, result) == ["a", "b"]
    assert written == [["a", "b"]] and result["passes_differ"] == 1
    assert {"written_at", "first_pass_seconds", "seconds", "cpu_seconds"} <= set(result)


def test_onmt_main_thread_flags_as_given():
    args = ["--config", "c.yml", "--intra_op_parallelism_threads", "2",
            "--inter_op_parallelism_threads", "1", "infer"]
    assert decode.thread_settings(args) == {"intra_op_parallelism_threads": 2,
                                            "inter_op_parallelism_threads": 1}
    assert decode.thread_settings(["infer"]) == {"intra_op_parallelism_threads": 0,
                                                 "inter_op_parallelism_threads": 0}
