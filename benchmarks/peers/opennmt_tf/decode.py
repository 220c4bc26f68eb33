"""OpenNMT-tf's `onmt-main infer` and CTranslate2, timed, for benchmarks/decode_speed.py
--compare (through run.py's `infer_command` and `ctranslate2_command`).

    python decode.py config --output=F --overrides=JSON CONFIG...
    python decode.py infer --latency_source=F -- ONMT_MAIN_ARGS... infer --features_file=F \
        --predictions_file=P
    python decode.py ctranslate2 --model_dir=M --source=F --output=P --latency_source=F \
        --compute_type=float32 --beam_size=4 --length_penalty=0.6 --batch_size=32 \
        --max_decoding_length=N --intra_threads=N --inter_threads=N [--sentencepiece_model=F]

config: the peer's configuration files merged (later ones win, as onmt-main merges several
--config) with the overrides, written to one file for both `onmt-main` and
`ct2-opennmt-tf-converter` (which takes a single --config); prints "CONFIG {json}".

infer: `onmt-main ... infer` itself (its runner builds the model, restores the checkpoint and
reads the features file into its batched, length-bucketed dataset), with OpenNMT-tf's
`inference.predict_dataset` replaced by the same loop run twice. The first pass is what
onmt-main infer does: it traces the inference function, translates the whole features file
and writes it in input order (OpenNMT-tf's own OrderRestorer and `print_prediction`) to the
predictions file; its end is the end of the end-to-end time. The second pass translates the
same batches again into memory, timed from the first batch read to the last prediction
written: the speed after warm-up (the first call also optimizes the graph and prepares
kernels). Then single-sentence latency: each line of --latency_source translated alone (a
batch of 1 through the same function), after one untimed sentence.

ctranslate2: a `ctranslate2.Translator` on the CPU with --compute_type (CTranslate2 resolves
it for the CPU and the model: "int8" on a float32 model is int8_float32; `compute_type` is
what was asked, `effective_compute_type` what it runs) on the converted model. Run by the
Python of whichever environment has the CTranslate2 to measure (the peer's 3.24, or 4.x from
peers/ctranslate2_runtime.py). Two passes as above, each the whole source through
`translate_batch` in batches of --batch_size (CTranslate2 sorts by length into batches
itself): the first written to --output, the second timed; then single-sentence latency. With
--sentencepiece_model (a model that t2t_lite-exporter --format=ctranslate2 wrote), the source
and the output are raw text: each line is split into pieces by that model once, before the
passes, and each translation joined back by it inside the passes, as its users run it.

Both print one line "DECODE {json}": ready_at (epoch seconds when the model was loaded, before
anything was translated or traced), written_at (epoch seconds when the first pass's output was
written), first_pass_seconds, seconds (the second, timed pass), passes_differ (translations
that differ between the passes: 0, decoding being deterministic), sentences, batches,
latency_seconds (one per latency sentence), peak_rss_mb (this process's peak resident memory)
and versions; infer also onednn (TensorFlow's oneDNN on or off in this process) and tf_threads
(onmt-main's thread flags). decode_speed.py computes load and end-to-end times from its own
clock just before it started the process. Sources and outputs are OpenNMT-tf's space-separated
tokens (raw text with --sentencepiece_model); run.py's PieceTokens turns the tokens into
text. This file imports only OpenNMT-tf, CTranslate2, sentencepiece (with
--sentencepiece_model), PyYAML, the standard library and the harness's clocks
(benchmarks/harness.py: the standard library at import); it runs in the peer's environment or
CTranslate2's.
"""
import argparse
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import harness  # noqa: E402  (benchmarks/harness.py: the standard library only at import)


def report(result: dict):
    harness.print_result("DECODE", result)


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

def timed_predict_dataset(latency_source: str, result: dict):
    """A replacement for `opennmt.inference.predict_dataset` that fills `result`: the first
    pass writes the predictions file as onmt-main infer does (its end, `written_at`, ends the
    end-to-end time), the second is timed (`seconds`), then single-sentence latency."""
    import tensorflow as tf
    from opennmt.utils import misc

    def to_numpy(predictions):
        return tf.nest.map_structure(lambda tensor: tensor.numpy(), predictions)

    def predict_dataset(model, dataset, print_params=None, predictions_file=None,
                        log_time=False):
        result["ready_at"] = time.time()  # model built and restored, the dataset made
        infer_fn = tf.function(model.infer, input_signature=(dataset.element_spec,))
        infer_fn.get_concrete_function()  # traced before the loop, as OpenNMT-tf does

        def translate_all(stream) -> tuple:
            """OpenNMT-tf's inference loop: every batch, predictions written in input order."""
            sentences = batches = 0
            writer = misc.OrderRestorer(
                lambda prediction: prediction.get("index"),
                lambda prediction: model.print_prediction(prediction, params=print_params,
                                                          stream=stream))
            for features in dataset:
                for prediction in misc.extract_batches(to_numpy(infer_fn(features))):
                    writer.push(prediction)
                    sentences += 1
                batches += 1
            return sentences, batches

        def predictions() -> list:  # in input order, by OpenNMT-tf's own writer
            stream = io.BytesIO()  # print_prediction writes bytes to a stream without .buffer
            result["sentences"], result["batches"] = translate_all(stream)
            return stream.getvalue().splitlines(keepends=True)

        def write(lines):
            with open(predictions_file, "wb") as handle:
                handle.writelines(lines)
        harness.two_passes(predictions, write, result)

        # The same function on batches of one sentence (its input signature has no fixed
        # batch size); the dataset adds the same "index" feature when it buckets by length.
        singles = list(model.examples_inputter.make_inference_dataset(
            latency_source, 1, length_bucket_width=(print_params or {}).get(
                "length_bucket_width")))
        result["latency_seconds"] = harness.latencies(
            lambda features: to_numpy(infer_fn(features)), singles)

    return predict_dataset


def run_infer(args, onmt_args: list):
    import opennmt
    import tensorflow as tf
    from opennmt import inference
    from opennmt.bin import main as onmt_main

    result = {"versions": {"opennmt_tf": opennmt.__version__, "tensorflow": tf.__version__},
              "onednn": harness.onednn_enabled(), "tf_threads": thread_settings(onmt_args)}
    inference.predict_dataset = timed_predict_dataset(args.latency_source, result)
    sys.argv = ["onmt-main"] + onmt_args
    onmt_main.main()
    if "seconds" not in result:
        raise SystemExit("onmt-main ran no inference: give it the `infer` command")
    result["peak_rss_mb"] = harness.peak_rss_mb()
    report(result)


def thread_settings(onmt_args: list) -> dict:
    """onmt-main's thread flags as given (0 or absent: TensorFlow's choice)."""
    settings = {}
    for name in ("intra_op_parallelism_threads", "inter_op_parallelism_threads"):
        flag = "--" + name
        settings[name] = int(onmt_args[onmt_args.index(flag) + 1]) if flag in onmt_args else 0
    return settings


# --- CTranslate2 ----------------------------------------------------------------------------------

def run_ctranslate2(args):
    import ctranslate2

    to_tokens, to_line = str.split, " ".join  # the peers' space-separated token files
    if args.sentencepiece_model:  # raw text, as a user of an exported model tokenizes it
        import sentencepiece
        processor = sentencepiece.SentencePieceProcessor(model_file=args.sentencepiece_model)
        to_tokens, to_line = (lambda line: processor.encode(line.rstrip("\n"), out_type=str),
                              processor.decode)
    with open(args.source, encoding="utf-8") as handle:
        sources = [to_tokens(line) for line in handle]
    with open(args.latency_source, encoding="utf-8") as handle:
        singles = [to_tokens(line) for line in handle]
    translator = ctranslate2.Translator(args.model_dir, device="cpu",
                                        compute_type=args.compute_type,
                                        intra_threads=args.intra_threads,
                                        inter_threads=args.inter_threads)
    result = {"versions": {"ctranslate2": ctranslate2.__version__},
              "compute_type": args.compute_type,
              "effective_compute_type": translator.compute_type,
              "supported_compute_types": sorted(ctranslate2.get_supported_compute_types("cpu")),
              "intra_threads": args.intra_threads, "inter_threads": args.inter_threads,
              "ready_at": time.time()}
    options = {"beam_size": args.beam_size, "length_penalty": args.length_penalty,
               "max_decoding_length": args.max_decoding_length,
               "max_batch_size": args.batch_size, "batch_type": "examples"}

    def translate_all() -> list:
        return [to_line(item.hypotheses[0]) + "\n"
                for item in translator.translate_batch(sources, **options)]

    def write(lines):
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.writelines(lines)
    harness.two_passes(translate_all, write, result)
    result.update(sentences=len(sources), batches=-(-len(sources) // args.batch_size),
                  latency_seconds=harness.latencies(
                      lambda tokens: translator.translate_batch([tokens], **options), singles),
                  peak_rss_mb=harness.peak_rss_mb())
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
    translate.add_argument("--sentencepiece_model", help="source and output as raw text, "
                           "tokenized and detokenized by this SentencePiece model")
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
