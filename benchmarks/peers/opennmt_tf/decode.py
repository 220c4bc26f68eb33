"""OpenNMT-tf's `onmt-main infer` and CTranslate2, timed, run by OpenNMT-tf's own Python for
benchmarks/decode_speed.py --compare (through run.py's `decoding_commands`).

    python decode.py config --output=F --overrides=JSON CONFIG...
    python decode.py infer --latency_source=F -- ONMT_MAIN_ARGS... infer --features_file=F \
        --predictions_file=P
    python decode.py ctranslate2 --model_dir=M --source=F --output=P --latency_source=F \
        --beam_size=4 --length_penalty=0.6 --batch_size=32 --max_decoding_length=N \
        --intra_threads=N --inter_threads=N

config: the peer's configuration files merged (later ones win, as onmt-main merges several
--config) with the overrides, written to one file for both `onmt-main` and
`ct2-opennmt-tf-converter` (which takes a single --config); prints "CONFIG {json}".

infer: `onmt-main ... infer` itself (its runner builds the model, restores the checkpoint and
reads the features file into its batched, length-bucketed dataset), with OpenNMT-tf's
`inference.predict_dataset` replaced by the same loop timed in two parts. OpenNMT-tf traces
its inference function before its loop, but the first call still optimizes the graph and
prepares kernels, which is warm-up rather than translation speed. So here the trace and one
untimed batch are the warm-up, and then the whole features file is translated and written in
input order (OpenNMT-tf's own OrderRestorer and `print_prediction`), timed from the first batch
read to the last prediction written. Then single-sentence latency: each line of
--latency_source translated alone (a batch of 1 through the same function), after one untimed
sentence.

ctranslate2: a `ctranslate2.Translator` (float32 on the CPU) on the converted model; one untimed
batch, then the whole source translated with `translate_batch` in batches of --batch_size
(CTranslate2 sorts by length into batches itself), timed, then single-sentence latency as
above.

Both print one line "DECODE {json}": warmup_seconds (loading, tracing and the untimed batch),
seconds (the timed pass), sentences, batches, latency_seconds (one per latency sentence),
peak_rss_mb (this process's peak resident memory) and versions. Sources and outputs are
OpenNMT-tf's space-separated tokens; run.py's PieceTokens turns them into text. This file
imports only OpenNMT-tf, CTranslate2, PyYAML and the standard library (it runs in the peer's
environment).
"""
import argparse
import json
import resource
import sys
import time


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(result: dict):
    print("DECODE " + json.dumps(result), flush=True)


def merged(base: dict, overrides: dict) -> dict:
    """`base` with `overrides` applied key by key, nested dictionaries merged."""
    result = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def write_config(args):
    import yaml
    config = {}
    for path in args.configs:
        with open(path, encoding="utf-8") as handle:
            config = merged(config, yaml.safe_load(handle) or {})
    config = merged(config, json.loads(args.overrides))
    with open(args.output, "w", encoding="utf-8") as handle:
        yaml.safe_dump(config, handle, default_flow_style=False)
    print("CONFIG " + json.dumps(config), flush=True)


# --- onmt-main infer ------------------------------------------------------------------------------

def onednn_enabled() -> bool:
    from tensorflow.python.util import _pywrap_util_port
    return bool(_pywrap_util_port.IsMklEnabled())


def timed_predict_dataset(latency_source: str, started: float, result: dict):
    """A replacement for `opennmt.inference.predict_dataset` that fills `result`; the warm-up
    counts from `started` (before onmt-main read its configuration)."""
    import tensorflow as tf
    from opennmt.utils import misc

    def to_numpy(predictions):
        return tf.nest.map_structure(lambda tensor: tensor.numpy(), predictions)

    def predict_dataset(model, dataset, print_params=None, predictions_file=None,
                        log_time=False):
        infer_fn = tf.function(model.infer, input_signature=(dataset.element_spec,))
        infer_fn.get_concrete_function()  # traced before the loop, as OpenNMT-tf does
        to_numpy(infer_fn(next(iter(dataset))))
        result["warmup_seconds"] = time.perf_counter() - started

        sentences = batches = 0
        with open(predictions_file, "w", encoding="utf-8") as stream:
            writer = misc.OrderRestorer(
                lambda prediction: prediction.get("index"),
                lambda prediction: model.print_prediction(prediction, params=print_params,
                                                          stream=stream))
            start = time.perf_counter()
            for features in dataset:
                predictions = to_numpy(infer_fn(features))
                for prediction in misc.extract_batches(predictions):
                    writer.push(prediction)
                    sentences += 1
                batches += 1
            result["seconds"] = time.perf_counter() - start
        result.update(sentences=sentences, batches=batches)

        # The same function on batches of one sentence (its input signature has no fixed
        # batch size); the dataset adds the same "index" feature when it buckets by length.
        singles = list(model.examples_inputter.make_inference_dataset(
            latency_source, 1, length_bucket_width=(print_params or {}).get(
                "length_bucket_width")))
        to_numpy(infer_fn(singles[0]))  # warm-up for batches of one
        latencies = []
        for features in singles:
            start = time.perf_counter()
            to_numpy(infer_fn(features))
            latencies.append(time.perf_counter() - start)
        result["latency_seconds"] = latencies

    return predict_dataset


def run_infer(args, onmt_args: list):
    import opennmt
    import tensorflow as tf
    from opennmt import inference
    from opennmt.bin import main as onmt_main

    result = {"versions": {"opennmt_tf": opennmt.__version__, "tensorflow": tf.__version__},
              "onednn": onednn_enabled()}
    started = time.perf_counter()  # after the imports, as in the other contestants
    inference.predict_dataset = timed_predict_dataset(args.latency_source, started, result)
    sys.argv = ["onmt-main"] + onmt_args
    onmt_main.main()
    if "seconds" not in result:
        raise SystemExit("onmt-main ran no inference: give it the `infer` command")
    result["peak_rss_mb"] = peak_rss_mb()
    report(result)


# --- CTranslate2 ----------------------------------------------------------------------------------

def run_ctranslate2(args):
    import ctranslate2

    start = time.perf_counter()
    with open(args.source, encoding="utf-8") as handle:
        sources = [line.split() for line in handle]
    with open(args.latency_source, encoding="utf-8") as handle:
        singles = [line.split() for line in handle]
    translator = ctranslate2.Translator(args.model_dir, device="cpu",
                                        compute_type=args.compute_type,
                                        intra_threads=args.intra_threads,
                                        inter_threads=args.inter_threads)
    options = {"beam_size": args.beam_size, "length_penalty": args.length_penalty,
               "max_decoding_length": args.max_decoding_length,
               "max_batch_size": args.batch_size, "batch_type": "examples"}
    translator.translate_batch(sources[:args.batch_size], **options)  # warm-up
    result = {"versions": {"ctranslate2": ctranslate2.__version__},
              "compute_type": args.compute_type, "intra_threads": args.intra_threads,
              "inter_threads": args.inter_threads,
              "warmup_seconds": time.perf_counter() - start}

    start = time.perf_counter()
    translations = translator.translate_batch(sources, **options)
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.writelines(" ".join(item.hypotheses[0]) + "\n" for item in translations)
    result.update(seconds=time.perf_counter() - start, sentences=len(sources),
                  batches=-(-len(sources) // args.batch_size))

    translator.translate_batch(singles[:1], **options)  # warm-up for batches of one
    latencies = []
    for tokens in singles:
        start = time.perf_counter()
        translator.translate_batch([tokens], **options)
        latencies.append(time.perf_counter() - start)
    result.update(latency_seconds=latencies, peak_rss_mb=peak_rss_mb())
    report(result)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    config = commands.add_parser("config", help="merge configuration files")
    config.add_argument("--output", required=True)
    config.add_argument("--overrides", default="{}", help="JSON applied last")
    config.add_argument("configs", nargs="+")
    infer = commands.add_parser("infer", help="onmt-main ARGS... infer, timed")
    infer.add_argument("--latency_source", required=True,
                       help="tokens of the single-sentence latency sentences, one a line")
    translate = commands.add_parser("ctranslate2", help="CTranslate2, timed")
    for name in ("model_dir", "source", "output", "latency_source"):
        translate.add_argument(f"--{name}", required=True)
    translate.add_argument("--compute_type", default="float32")
    translate.add_argument("--beam_size", type=int, default=4)
    translate.add_argument("--length_penalty", type=float, default=0.6)
    translate.add_argument("--batch_size", type=int, default=32)
    translate.add_argument("--max_decoding_length", type=int, default=256)
    translate.add_argument("--intra_threads", type=int, default=0)
    translate.add_argument("--inter_threads", type=int, default=1)

    argv = sys.argv[1:]
    onmt_args = []
    if "--" in argv:  # infer: onmt-main's own arguments follow "--"
        argv, onmt_args = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = parser.parse_args(argv)
    if args.command == "config":
        write_config(args)
    elif args.command == "infer":
        run_infer(args, onmt_args)
    else:
        run_ctranslate2(args)


if __name__ == "__main__":
    main()
