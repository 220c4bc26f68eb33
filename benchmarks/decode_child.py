"""One round of a t2t_lite contestant of decode_speed.py in a process of its own, which prints
"CONTESTANT {json}":

    python decode_child.py JOB.json OUTPUT

The job (decode_speed.py's `write_job`) says which: "decoder", t2t_lite-decoder's Translator
with its thread pools; "decoder_nbest", the same with `num_hypotheses` hypotheses of each
sentence, each decoded to text (what `return_beams=true` writes); "decoder_scoring", the
Translator scoring the job's `targets` (--score_targets: one teacher-forced pass a batch,
nothing searched; its output lines are the decoder's score lines); or "saved_model", a SavedModel in a process that imports TensorFlow and
tensorflow-text's SentencePiece ops only (docs/serving.md), as a lean server does, called on
the decoder's batches of raw sentences, `parallel_batches` at once from threads of their own
(a server's concurrent requests). Two passes (harness.two_passes), then the latency sentences.
"""
import concurrent.futures
import json
import os
import sys
import time

import harness


def saved_model_translators(job: dict):
    """(translate all, translate one sentence) of the SavedModel."""
    import importlib.util
    import tensorflow as tf
    # tensorflow-text's SentencePiece ops alone, as docs/serving.md shows for a Python server
    # (`import tensorflow_text` would load all its op libraries: about 110 MB more).
    tf.load_op_library(os.path.join(os.path.dirname(importlib.util.find_spec(
        "tensorflow_text").origin), "python", "ops", "_sentencepiece_tokenizer.so"))
    tf.config.threading.set_intra_op_parallelism_threads(job["intra_op_threads"])
    tf.config.threading.set_inter_op_parallelism_threads(job["inter_op_threads"])
    serve = tf.saved_model.load(job["export_dir"]).signatures["serving_default"]
    sources = job["sources"]

    def translate(lines: list) -> list:
        outputs = serve(inputs=tf.constant(lines, tf.string))["outputs"].numpy()
        return [output.decode("utf-8") for output in outputs]

    def translate_all() -> list:
        outputs = [""] * len(sources)
        with concurrent.futures.ThreadPoolExecutor(job["parallel_batches"]) as pool:
            for batch, translated in zip(job["batches"], pool.map(
                    lambda batch: translate([sources[i] for i in batch]), job["batches"])):
                for index, output in zip(batch, translated):
                    outputs[index] = output
        return outputs
    return translate_all, lambda line: translate([line]), {"tensorflow": tf.__version__}


def decoder_translators(job: dict):
    """(translate all, translate one sentence) of t2t_lite-decoder's Translator."""
    from t2t_lite.bin import common  # t2t_lite's kernels and a quiet TensorFlow start
    common.load_tensorflow()
    import tensorflow as tf
    from t2t_lite.decoding import decoder
    from t2t_lite.models import restoring
    from t2t_lite.decoding.search import SearchHParams
    from t2t_lite.storage.run_description import saved_run

    batching = decoder.TranslatorHParams(batch_size=job["batch_size"],
                                         parallel_batches=job["parallel_batches"])
    decoder.size_thread_pools(batching, len(job["sources"]), job["intra_op_flag"],
                              job["inter_op_threads"])
    problem = common.registry.problem(harness.PROBLEM)
    run = saved_run(job["t2t_lite_dir"])
    hparams = run["hparams"].replace(mixed_precision=job["mixed_precision"] or run[
        "hparams"].mixed_precision)
    model = restoring.load_model(run["model"], hparams, problem.vocab_size(job["data_dir"]),
                                 job["t2t_lite_dir"], job["checkpoint"])
    search = SearchHParams(beam_size=job["beam_size"], alpha=job["alpha"],
                           stop_after_finished=job["stop_after_finished"],
                           num_hypotheses=job.get("num_hypotheses", 1))
    encoders = problem.feature_encoders(job["data_dir"])
    translator, single = (decoder.Translator(model, encoders, search, problem.max_length,
                                             translator_hparams=hparams)
                          for hparams in (batching, decoder.TranslatorHParams(batch_size=1,
                                                                           parallel_batches=1)))
    versions = {"tensorflow": tf.__version__}
    if job["kind"] == "decoder_nbest":
        return (lambda: n_best(translator, job["sources"]),
                lambda line: n_best(single, [line]), versions)
    if job["kind"] == "decoder_scoring":
        targets = dict(zip(job["sources"], job["targets"]))
        return (lambda: scores(translator, job["sources"], job["targets"]),
                lambda line: scores(single, [line], [targets[line]]), versions)
    return (lambda: translator.translate(job["sources"], show_progress=False),
            lambda line: single.translate([line], show_progress=False), versions)


def n_best(translator, lines: list) -> list:
    """The 1-best of each line, after every hypothesis of every line is decoded to text (the
    work of an n-best list), as the decoder's 1-best file has it."""
    best = []
    for _, results in translator.translate_in_order(lines, show_progress=False):
        best += [texts[0] if texts else "" for texts in translator.texts(results)]
    return best


def scores(translator, lines: list, targets: list) -> list:
    """The decoder's score line of each (line, target) pair (output_files.target_score_line)."""
    from t2t_lite.decoding.output_files import target_score_line
    return [target_score_line(score) for _, window in translator.score_in_order(
        lines, targets, show_progress=False) for score in window]


def main(job_path: str, output_path: str):
    with open(job_path, encoding="utf-8") as handle:
        job = json.load(handle)
    make = saved_model_translators if job["kind"] == "saved_model" else decoder_translators
    translate_all, translate_one, versions = make(job)
    result = {"ready_at": time.time()}  # the model loaded, nothing translated yet

    def write(lines):
        with open(output_path, "w", encoding="utf-8") as handle:
            handle.writelines(line + "\n" for line in lines)
    harness.two_passes(translate_all, write, result)
    result["latency_seconds"] = harness.latencies(
        translate_one, job["sources"][:job["latency_sentences"]], job["jit_compile"])
    result.update(sentences=len(job["sources"]), peak_rss_mb=harness.peak_rss_mb(),
                  onednn=harness.onednn_enabled(), versions=versions)
    harness.print_result("CONTESTANT", result)


if __name__ == "__main__":
    main(*sys.argv[1:])
