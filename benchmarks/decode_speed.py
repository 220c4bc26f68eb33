"""Decoding speed on Multi30k test_2016_flickr: beam 4 and greedy, with the cache and without.

  python benchmarks/decode_speed.py --data_dir=D --output_dir=O [--num_sentences=1000]
      [--modes=beam4_cached,beam4_uncached,greedy_cached,greedy_uncached] [--output_json=F]

O holds a trained translate_multi30k_deen model (t2t_lite-trainer); if it has no checkpoint,
transformer_small is trained there first for --train_steps (a short run: its translations are
poor, but their lengths, which decide the decoding time, are those of a real model's output).
The data is generated into D first if needed (from the raw files in --tmp_dir).

Each mode runs in a process of its own (so that its peak resident memory is its own), through
the decoder's Translator with batches of --batch_size sentences: first one batch of each padded
shape is decoded untimed (XLA compiles the search once per shape; that time is reported as
"compile s"), then the first --num_sentences lines of the test set are decoded and timed.
Reported: sentences and output tokens per second, mean output length, sacreBLEU of the output
against the references (cached and uncached must agree), and peak resident memory. The ratio
cached / uncached is the speed-up of incremental decoding (the issue's target: at least 3).
"""
import json
import os
import resource
import subprocess
import sys
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)

import tensorflow as tf  # noqa: E402  (after common: its quiet start)
from absl import logging  # noqa: E402

from t2t_lite.decoding import decoder  # noqa: E402
from t2t_lite.training import trainer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TMP_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))
PROBLEM = "translate_multi30k_deen"
MODES = {"beam4_cached": (4, True), "beam4_uncached": (4, False),
         "greedy_cached": (1, True), "greedy_uncached": (1, False)}

flags.DEFINE_string("data_dir", None, "Folder of the generated data (generated if absent).")
flags.DEFINE_string("tmp_dir", DEFAULT_TMP_DIR, "Folder of the raw Multi30k files.")
flags.DEFINE_string("output_dir", None, "A trained model's folder (trained here if empty).")
flags.DEFINE_integer("train_steps", 300, "Steps of transformer_small if O has no checkpoint.")
flags.DEFINE_string("train_hparams", "learning_rate_warmup_steps=300,learning_rate_constant=0.3",
                    "Overrides of transformer_small for that short run (peak rate 1.1e-3).")
flags.DEFINE_integer("num_sentences", 1000, "Test sentences decoded in each mode.")
flags.DEFINE_integer("batch_size", 32, "Sentences per batch.")
flags.DEFINE_list("modes", list(MODES), f"Any of {', '.join(MODES)}.")
flags.DEFINE_string("mode", None, "Internal: measure this one mode and print its JSON.")
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")
flags.mark_flags_as_required(["data_dir", "output_dir"])
flags.register_validator("modes", lambda modes: set(modes) <= set(MODES), f"one of {MODES}")


def prepare(problem):
    """Data, and a trained model in --output_dir."""
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)  # keeps the splits already complete
    if tf.train.latest_checkpoint(FLAGS.output_dir):
        return
    logging.info("no checkpoint in %s: training transformer_small for %d steps",
                 FLAGS.output_dir, FLAGS.train_steps)
    hparams = registry.hparams("transformer_small").override_from_string(FLAGS.train_hparams)
    trainer.train(PROBLEM, "transformer", hparams,
                  FLAGS.data_dir, FLAGS.output_dir,
                  trainer.RunConfig(train_steps=FLAGS.train_steps, eval_every=FLAGS.train_steps,
                                    eval_steps=10, save_checkpoints_steps=FLAGS.train_steps,
                                    log_every_steps=50, jit_compile=False))


def measure(mode, problem):
    """One mode, in this process: {"compile_seconds", "seconds", "sentences_per_s", ...}."""
    beam_size, use_cache = MODES[mode]
    run = decoder.saved_run(FLAGS.output_dir)
    model = decoder.load_model(run["model"], run["hparams"], problem.vocab_size(FLAGS.data_dir),
                               FLAGS.output_dir)
    paths = problem.text_paths(FLAGS.data_dir, "test")
    sources = decoder.read_lines(paths["inputs"])[:FLAGS.num_sentences]
    references = decoder.read_lines(paths["targets"])[:FLAGS.num_sentences]
    encoders = problem.feature_encoders(FLAGS.data_dir)
    translator = decoder.Translator(
        model, encoders, decoder.DecodeHParams(batch_size=FLAGS.batch_size,
                                               beam_size=beam_size, use_cache=use_cache),
        problem.max_length)
    # One sentence of each padded length compiles every shape the timed pass will use.
    by_shape = {}
    for line in sources:
        length = len(encoders["inputs"].encode(line)) + 1
        by_shape.setdefault(-(-length // translator.LENGTH_MULTIPLE), line)
    start = time.perf_counter()
    translator.translate(list(by_shape.values()), show_progress=False)
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    outputs = translator.translate(sources, show_progress=False)
    seconds = time.perf_counter() - start
    output_tokens = sum(len(encoders["targets"].encode(line)) + 1 for line in outputs)
    return {"mode": mode, "beam_size": beam_size, "use_cache": use_cache,
            "sentences": len(sources), "shapes": len(by_shape),
            "compile_seconds": compile_seconds, "seconds": seconds,
            "sentences_per_s": len(sources) / seconds, "output_tokens_per_s": output_tokens / seconds,
            "mean_output_tokens": output_tokens / len(sources),
            "bleu": decoder.score(outputs, references)["bleu"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_mode_process(mode):
    command = [sys.executable, os.path.abspath(__file__), f"--mode={mode}",
               f"--data_dir={FLAGS.data_dir}", f"--output_dir={FLAGS.output_dir}",
               f"--num_sentences={FLAGS.num_sentences}", f"--batch_size={FLAGS.batch_size}"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"mode {mode} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def print_table(result):
    header = (f"{'mode':<16}{'sent/s':>8}{'out tok/s':>11}{'out len':>9}{'BLEU':>7}"
              f"{'compile s':>11}{'peak RSS MB':>13}")
    print(f"\n{PROBLEM} test_2016_flickr, first {FLAGS.num_sentences} sentences, batches of "
          f"{FLAGS.batch_size}; {result['machine']}")
    print(header + "\n" + "-" * len(header))
    for row in result["modes"].values():
        print(f"{row['mode']:<16}{row['sentences_per_s']:>8.2f}{row['output_tokens_per_s']:>11.0f}"
              f"{row['mean_output_tokens']:>9.1f}{row['bleu']:>7.1f}{row['compile_seconds']:>11.1f}"
              f"{row['peak_rss_mb']:>13.0f}")
    for search, ratio in result["cache_speedup"].items():
        print(f"{search}: cached / uncached sentences per second = {ratio:.1f}")


def main(unused_argv):
    problem = registry.problem(PROBLEM)
    if FLAGS.mode:
        print(json.dumps(measure(FLAGS.mode, problem)))
        return
    prepare(problem)
    host = reporting.machine()
    result = {"machine": f"{host['cpu']}, {host['cores']} cores, TF {host['tensorflow']}",
              "modes": {}}
    for mode in FLAGS.modes:
        print(f"mode {mode} ...", flush=True)
        result["modes"][mode] = run_mode_process(mode)
    result["cache_speedup"] = {
        search: result["modes"][f"{search}_cached"]["sentences_per_s"]
        / result["modes"][f"{search}_uncached"]["sentences_per_s"]
        for search in ("beam4", "greedy")
        if {f"{search}_cached", f"{search}_uncached"} <= set(result["modes"])}
    print_table(result)
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, result)


if __name__ == "__main__":
    common.run_main(main)
