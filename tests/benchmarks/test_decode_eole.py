"""The decoding race's eole rows without eole's environment: peers/eole/decode.py's command line
and its parsing, the model it decodes in a work dir, its two passes and latency around eole's
`infer_file` (on a stand-in engine), and CTranslate2's command on eole's inputs."""
import importlib.util
import os

import pytest

PEERS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "peers")


def load(name: str, *path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(PEERS, *path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


decode = load("eole_decode_under_test", "eole", "decode.py")  # the standard library only


def test_the_command_runs_eole_predict_with_its_output_and_threads():
    command = decode.command("/venvs/eole/bin/python", "/w/eole/decode.yaml",
                             "/w/round1_eole_predict.tokens", "/w/eole/latency.tokens", 2, 1)
    assert command[:2] == ["/venvs/eole/bin/python", os.path.abspath(decode.__file__)]
    args, eole_args = decode.parse(command[2:])
    assert args.latency_source == "/w/eole/latency.tokens"
    assert (args.intra_op_parallelism_threads, args.inter_op_parallelism_threads) == (2, 1)
    assert eole_args == ["predict", "-config", "/w/eole/decode.yaml",
                         "-output", "/w/round1_eole_predict.tokens"]
    with pytest.raises(SystemExit, match="after --"):
        decode.parse(["--latency_source=l", "predict"])


def test_the_decoded_model_is_the_average_unless_a_checkpoint_is_newer(tmp_path):
    saved = []
    for step in (5, 10):
        path = tmp_path / f"step_{step}"
        path.mkdir()
        (path / "model.00.safetensors").write_bytes(b"w")
        os.utime(path / "model.00.safetensors", (1000 + step, 1000 + step))
        saved.append((step, str(path)))
    assert decode.decoding_model(str(tmp_path), saved) == saved[-1][1]  # no average
    (tmp_path / "avg").mkdir()
    (tmp_path / "avg" / "model.00.safetensors").write_bytes(b"a")
    os.utime(tmp_path / "avg" / "model.00.safetensors", (1011, 1011))
    assert decode.decoding_model(str(tmp_path), saved) == str(tmp_path / "avg")
    os.utime(tmp_path / "avg" / "model.00.safetensors", (1009, 1009))  # trained on since
    assert decode.decoding_model(str(tmp_path), saved) == saved[-1][1]


class Engine:
    """What the timed `infer_file` uses of eole's InferenceEnginePY: its config (output,
    batch_size), `_build_inference_iterator`, `_predict`, `_flatten_results` and `infer_list`."""

    def __init__(self, output, sources, second=None):
        self.config = type("Config", (), {"output": output, "batch_size": 2})()
        self.sources, self.second, self.calls = sources, second, []

    def infer_file(self):  # eole's: translates config.src and writes config.output
        self.calls.append("infer_file")
        with open(self.config.output, "w", encoding="utf-8") as handle:
            handle.write("\n".join(line.upper() for line in self.sources) + "\n")
        return "eole's result"

    def _build_inference_iterator(self):
        return iter(self.sources)

    def _predict(self, iterator):
        self.calls.append("_predict")
        lines = self.second or [line.upper() for line in iterator]
        return [[0.0]] * len(lines), None, [[line] for line in lines]

    def _flatten_results(self, scores, estims, predictions):
        return ([score for each in scores for score in each], estims,
                [line for each in predictions for line in each])

    def infer_list(self, lines):
        self.calls.append(("infer_list", tuple(lines)))


def test_two_passes_then_the_latency_around_eoles_infer_file(tmp_path):
    output = str(tmp_path / "round1_eole_predict.tokens")
    engine, result = Engine(output, ["a b", "c", "d e f"]), {}
    timed = decode.timed_infer_file(Engine.infer_file, ["a b", "c"], result)
    assert timed(engine) == "eole's result"
    assert engine.calls == ["infer_file", "_predict", ("infer_list", ("a b",)),
                            ("infer_list", ("a b",)), ("infer_list", ("c",))]
    assert result["ready_at"] <= result["written_at"]
    assert (result["sentences"], result["batches"], result["passes_differ"]) == (3, 2, 0)
    assert len(result["latency_seconds"]) == 2
    assert {"first_pass_seconds", "seconds", "cpu_seconds"} <= set(result)

    engine, result = Engine(output, ["a b", "c", "d e f"], second=["A B", "x", "D E F"]), {}
    decode.timed_infer_file(Engine.infer_file, ["c"], result)(engine)
    assert result["passes_differ"] == 1


def test_ctranslate2_translates_eoles_source_tokens_up_to_its_length_limit():
    peer = load("opennmt_tf_peer_for_eole_rows", "opennmt_tf", "run.py")
    eole = {"source": "/w/eole/source.tokens", "latency_source": "/w/eole/latency.tokens",
            "max_decoding_length": load("eole_peer_for_eole_rows", "eole",
                                        "run.py").max_decoding_length()}
    command = peer.ctranslate2_command("/venvs/ctranslate2/bin/python", eole,
                                       "/w/eole_ctranslate2", "/w/round1.tokens", 4, 0.6, 32, 0,
                                       1, "int8")
    assert "--source=/w/eole/source.tokens" in command
    assert "--latency_source=/w/eole/latency.tokens" in command
    assert "--max_decoding_length=150" in command and "--compute_type=int8" in command
