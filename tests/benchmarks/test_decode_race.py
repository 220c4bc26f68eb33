"""The decoding race's pieces that need neither toolkit's environment: what CTranslate2 logs
about the CPU when it loads a model, CTranslate2 4.x's requirements and environment (made by the
peers' shared environment code), the CTranslate2 command with its compute type and threads,
decode.py's CTranslate2 passes on raw text through an exported sentencepiece.model (on a
stand-in translator), the harness's two passes of a round, and decode.py's reading of
onmt-main's thread flags."""
import importlib.metadata
import importlib.util
import io
import json
import os
import sys
import types

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
    # sentencepiece at t2t_lite's pin: it splits and joins the text of t2t_lite's exports
    assert ctranslate2_runtime.requirements() == [
        f"ctranslate2=={ctranslate2_runtime.CTRANSLATE2_VERSION}",
        f"sentencepiece=={importlib.metadata.version('sentencepiece')}"]
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
    assert not any(arg.startswith("--sentencepiece_model") for arg in default)
    exported = peer.ctranslate2_command("python", setup, "m", "o", 4, 0.6, 32, 1, 1, "int8",
                                        "/w/t2t_lite_ctranslate2_int8/sentencepiece.model")
    assert "--sentencepiece_model=/w/t2t_lite_ctranslate2_int8/sentencepiece.model" in exported


class EchoTranslator:
    """A stand-in for ctranslate2.Translator whose best hypothesis is its source's tokens."""
    batches = []

    def __init__(self, model_dir, device, compute_type, intra_threads, inter_threads):
        self.compute_type = compute_type

    def translate_batch(self, sources, **options):
        EchoTranslator.batches.append(sources)
        return [types.SimpleNamespace(hypotheses=[list(tokens)]) for tokens in sources]


def run_decode_ctranslate2(monkeypatch, capsys, arguments: list) -> dict:
    """decode.py ctranslate2 ARGUMENTS with the stand-in translator; its DECODE result."""
    fake = types.SimpleNamespace(Translator=EchoTranslator, __version__="4.0.0",
                                 get_supported_compute_types=lambda device: {"float32"})
    monkeypatch.setitem(sys.modules, "ctranslate2", fake)
    monkeypatch.setattr(sys, "argv", ["decode.py", "ctranslate2", *arguments])
    EchoTranslator.batches = []
    decode.main()
    line = [line for line in capsys.readouterr().out.splitlines() if line.startswith("DECODE ")]
    return json.loads(line[-1][len("DECODE "):])


def test_ctranslate2_on_raw_text_splits_and_joins_with_the_sentencepiece_model(
        tmp_path, monkeypatch, capsys):
    import sentencepiece
    lines = ["ein Mann fährt Fahrrad", "zwei Hunde spielen im Schnee", "eine Frau liest"]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines * 20),
                                             model_writer=model, vocab_size=30,
                                             minloglevel=2)
    (tmp_path / "sentencepiece.model").write_bytes(model.getvalue())
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    (tmp_path / "source.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "latency.txt").write_text(lines[0] + "\n", encoding="utf-8")
    common = [f"--model_dir={tmp_path}", f"--source={tmp_path / 'source.txt'}",
              f"--latency_source={tmp_path / 'latency.txt'}"]
    result = run_decode_ctranslate2(monkeypatch, capsys, [
        *common, f"--output={tmp_path / 'out.txt'}",
        f"--sentencepiece_model={tmp_path / 'sentencepiece.model'}"])
    # the translator was given each line's pieces, and its pieces were joined back into text
    assert EchoTranslator.batches[0] == [processor.encode(line, out_type=str) for line in lines]
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == lines
    assert result["sentences"] == 3 and result["passes_differ"] == 0
    # without it, the peers' space-separated token files: split on spaces, joined with spaces
    run_decode_ctranslate2(monkeypatch, capsys, [*common, f"--output={tmp_path / 'tok.txt'}"])
    assert EchoTranslator.batches[0] == [line.split() for line in lines]
    assert (tmp_path / "tok.txt").read_text(encoding="utf-8").splitlines() == lines


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


RATIO_PAIRS_PROBE = """
import json, sys
sys.argv = ["decode_speed.py"]
import decode_speed
names = ["t2t_lite_decoder", "t2t_lite_saved_model", "t2t_lite_ctranslate2_float32",
         "t2t_lite_ctranslate2_int8", "ctranslate2", "ctranslate2_4_float32",
         "ctranslate2_4_int8", "ctranslate2_eole_4_int8"]
entries = {name: {"name": name, "summary": {"peak_rss_mb": 240.0, "load_seconds": 0.7}}
           for name in ("t2t_lite_ctranslate2_int8", "t2t_lite_decoder")}
print("PROBE " + json.dumps({"pairs": decode_speed.ratio_pairs(names),
                             "limits": decode_speed.limit_targets(entries)}))
"""


def test_the_ctranslate2_export_races_the_same_engine_against_issue_45s_targets():
    """decode_speed.py (it imports TensorFlow and defines flags, so in a process of its own):
    t2t_lite's CTranslate2 export against the peers' CTranslate2 4.x rows of its compute type
    only (0.95 against OpenNMT-tf's model, none against eole's), the decoder and SavedModel
    against every peer row (0.8 of CTranslate2 4.x float32), and the export's peak memory and
    load time against 250 MB and 0.5 s."""
    import subprocess
    output = subprocess.run([sys.executable, "-c", RATIO_PAIRS_PROBE], cwd=BENCHMARKS,
                            capture_output=True, text=True, check=True).stdout
    probe = json.loads(output.split("PROBE ", 1)[1])
    pairs = {(ours, theirs): target for ours, theirs, target in probe["pairs"]}
    export_pairs = {pair: target for pair, target in pairs.items()
                    if pair[0].startswith("t2t_lite_ctranslate2")}
    assert export_pairs == {
        ("t2t_lite_ctranslate2_float32", "ctranslate2_4_float32"): 0.95,
        ("t2t_lite_ctranslate2_int8", "ctranslate2_4_int8"): 0.95,
        ("t2t_lite_ctranslate2_int8", "ctranslate2_eole_4_int8"): None}
    for ours in ("t2t_lite_decoder", "t2t_lite_saved_model"):
        assert pairs[(ours, "ctranslate2_4_float32")] == 0.8
        assert pairs[(ours, "ctranslate2_4_int8")] is None
        assert not any(pair == (ours, theirs) for pair in pairs
                       for theirs in ("t2t_lite_ctranslate2_float32", "t2t_lite_ctranslate2_int8"))
    assert [(limit["contestant"], limit["key"], limit["limit"], limit["met"])
            for limit in probe["limits"]] == [
        ("t2t_lite_ctranslate2_int8", "peak_rss_mb", 250, True),
        ("t2t_lite_ctranslate2_int8", "load_seconds", 0.5, False)]
