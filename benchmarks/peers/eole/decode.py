"""eole's own `eole predict`, timed, for benchmarks/decode_speed.py --compare (its "eole
predict" row; the command comes from `command` below).

    python decode.py --latency_source=F --intra_op_parallelism_threads=N \
        --inter_op_parallelism_threads=N -- predict -config decode.yaml -output P

Runs in eole's environment (run.py's --venv_dir). It starts eole's command line as launch.py
does (PyTorch's thread pools set first from the two flags, 0: PyTorch's choice; eole has no
setting for them), with the arguments after "--": `eole predict` on decode_speed.py's
configuration (run.py's `predict_config`: beam, GNMT length penalty "wu" with alpha, batches of
sentences, one length limit), whose `src` holds SentencePiece pieces with the source `</s>`,
as in training. `eole predict` builds its inference engine (the model loaded) and calls the
engine's `infer_file` once; that is replaced by the same work done twice. The first pass is
eole's own `infer_file`: the source read into its length-sorted buckets, translated batch by
batch and written to `output` in input order; its end is the end of the end-to-end time. The
second pass translates the same file again into memory, timed from the file read to the last
prediction (the speed after warm-up). Then single-sentence latency: each line of
--latency_source translated alone through eole's `infer_list` (its call for a list of
sentences), after one untimed sentence.

Prints "DECODE {json}" with the keys of opennmt_tf/decode.py's infer: ready_at (epoch seconds
when the model was loaded), written_at, first_pass_seconds, seconds, cpu_seconds,
passes_differ, sentences, batches, latency_seconds, peak_rss_mb (this process's VmHWM) and
versions; also torch_threads (PyTorch's pools as set). Imports eole, torch and the standard
library only, and the harness's clocks (benchmarks/harness.py: the standard library at import).
"""
import argparse
import importlib.util
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
import harness  # noqa: E402  (benchmarks/harness.py: the standard library only at import)

_spec = importlib.util.spec_from_file_location("eole_launch", os.path.join(HERE, "launch.py"))
launch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(launch)


def command(venv_python: str, config: str, output: str, latency_source: str,
            intra_threads: int, inter_threads: int) -> list:
    """`eole predict -config CONFIG -output OUTPUT` timed by this file (prints
    "DECODE {json}"); eole's command line takes -output over the configuration's."""
    return [venv_python, os.path.abspath(__file__), f"--latency_source={latency_source}",
            f"--intra_op_parallelism_threads={intra_threads}",
            f"--inter_op_parallelism_threads={inter_threads}",
            "--", "predict", "-config", config, "-output", output]


def decoding_model(model_dir: str, saved: list) -> str:
    """The model that run.py --decode translated in a work dir's model/: the average it writes
    in model/avg when that is newer than the last checkpoint (a later run may have trained on
    without averaging), else the last checkpoint. `saved`: run.py's `checkpoints(model_dir)`,
    [(step, path)] oldest first, not empty."""
    averaged, last = os.path.join(model_dir, "avg"), saved[-1][1]
    weights = [os.path.join(path, "model.00.safetensors") for path in (averaged, last)]
    newer = os.path.exists(weights[0]) and os.path.getmtime(weights[0]) >= os.path.getmtime(
        weights[1])
    return averaged if newer else last


def parse(argv: list) -> tuple:
    """(this file's arguments, eole's: those after "--")."""
    if "--" not in argv:
        raise SystemExit("give eole's arguments after --, e.g. -- predict -config decode.yaml")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency_source", required=True,
                        help="sentences of the single-sentence latency, as eole's source")
    parser.add_argument("--intra_op_parallelism_threads", type=int, default=0)
    parser.add_argument("--inter_op_parallelism_threads", type=int, default=0)
    return parser.parse_args(argv[:split]), argv[split + 1:]


def timed_infer_file(infer_file, latency_lines: list, result: dict):
    """A replacement for the engine's `infer_file` (eole's own, `infer_file`) that fills
    `result`: the first pass is eole's (writes config.output), the second is timed, then the
    single-sentence latency."""
    def timed(engine):
        result["ready_at"] = time.time()  # the model loaded, nothing translated yet
        start = time.perf_counter()
        returned = infer_file(engine)
        result.update(written_at=time.time(), first_pass_seconds=time.perf_counter() - start)

        start, cpu = time.perf_counter(), harness.cpu_seconds()
        _, _, predictions = engine._flatten_results(
            *engine._predict(engine._build_inference_iterator()))
        result.update(seconds=time.perf_counter() - start,
                      cpu_seconds=harness.cpu_seconds() - cpu, sentences=len(predictions),
                      batches=-(-len(predictions) // engine.config.batch_size))
        with open(engine.config.output, encoding="utf-8") as handle:  # as eole writes it
            result["passes_differ"] = harness.differing_lines(handle.read().splitlines(),
                                                              predictions)
        result["latency_seconds"] = harness.latencies(lambda line: engine.infer_list([line]),
                                                      latency_lines)
        return returned

    return timed


def main(argv: list = None):
    args, eole_args = parse(sys.argv[1:] if argv is None else argv)
    with open(args.latency_source, encoding="utf-8") as handle:
        latency_lines = [line.rstrip("\n") for line in handle]
    import torch
    from eole.inference_engine import InferenceEnginePY
    from importlib.metadata import version

    result = {"versions": {"eole": version("eole"), "torch": torch.__version__}}
    InferenceEnginePY.infer_file = timed_infer_file(InferenceEnginePY.infer_file,
                                                    latency_lines, result)
    sys.argv = [launch.__file__, str(args.intra_op_parallelism_threads),
                str(args.inter_op_parallelism_threads), *eole_args]
    launch.main()  # PyTorch's thread pools, then eole's command line
    if "seconds" not in result:
        raise SystemExit("eole ran no file inference: give it `predict -config ...`")
    result.update(torch_threads={"intra_op": torch.get_num_threads(),
                                 "inter_op": torch.get_num_interop_threads()},
                  peak_rss_mb=harness.peak_rss_mb())
    harness.print_result("DECODE", result)


if __name__ == "__main__":
    main()
