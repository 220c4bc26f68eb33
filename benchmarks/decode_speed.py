"""Decoding speed on Multi30k test_2016_flickr: t2t_lite's own modes, or t2t_lite against
OpenNMT-tf and CTranslate2 (--compare).

  python benchmarks/decode_speed.py --data_dir=D --output_dir=O [--num_sentences=1000]
      [--modes=beam4_cached,beam4_uncached,greedy_cached,greedy_uncached] [--output_json=F]
  python benchmarks/decode_speed.py --compare --data_dir=D --t2t_lite_dir=T --peer_dir=P
      --work_dir=W [--rounds=3] [--num_sentences=1000 --batch_size=32 --beam_size=4 --alpha=0.6]
      [--parallel_batches=1] [--intra_op_parallelism_threads=0 --inter_op_parallelism_threads=0]
      [--output_json=F]

Modes. O holds a trained translate_multi30k_deen model (t2t_lite-trainer); if it has no
checkpoint, transformer_small is trained there first for --train_steps (a short run: its
translations are poor, but their lengths, which decide the decoding time, are those of a real
model's output). The data is generated into D first if needed (from the raw files in --tmp_dir).
Each mode runs in a process of its own (so that its peak resident memory is its own), through
the decoder's Translator with batches of --batch_size sentences: first one batch of each padded
shape is decoded untimed (XLA compiles the search once per shape; that time is reported as
"compile s"), then the first --num_sentences lines of the test set are decoded and timed.
Reported: sentences and output tokens per second, mean output length, sacreBLEU of the output
against the references (cached and uncached must agree), and peak resident memory. The ratio
cached / uncached is the speed-up of incremental decoding (the issue's target: at least 3).

--compare. The same first --num_sentences test sentences, beam --beam_size, length penalty
--alpha, batches of --batch_size, --parallel_batches batches translated at once (each with
--intra_op_parallelism_threads threads for an operation; 0: as t2t_lite-decoder chooses), and
the same --inter_op_parallelism_threads for seven contestants (--contestants chooses):
  - t2t_lite decoder: the Translator of t2t_lite-decoder with its default decode_hparams (the
    search without XLA; "(XLA)" in the table if that default changes) but parallel_batches
    from --parallel_batches, its thread pools sized as t2t_lite-decoder sizes them
    (`decoder.size_thread_pools`), on the model in
    --t2t_lite_dir (its averaged/ checkpoint when there, as multi30k_recipe.py decodes, else
    its latest; --t2t_lite_checkpoint chooses).
  - t2t_lite SavedModel: that checkpoint exported once by t2t_lite-exporter into W/saved_model
    (without XLA, the exporter's default) and, in each round, loaded with tf.saved_model.load
    in a fresh process that imports TensorFlow and registers tensorflow-text's SentencePiece
    ops only (tf.load_op_library, as docs/serving.md shows), the way a server does;
    its "serving_default" signature is called on batches of --batch_size raw sentences
    (batched in the decoder's order, sorted by length), --parallel_batches calls at once from
    threads of their own (as a server's concurrent requests).
  - t2t_lite SavedModel (XLA): the same, exported with --export_jit_compile into
    W/saved_model_xla. XLA compiles the search once per batch shape (the number of sentences
    and of source tokens, which a server gets from its clients), so its warm-up translates
    every batch and every latency sentence once.
  - t2t_lite decoder (CT2's stop), t2t_lite SavedModel (CT2's stop): the decoder and the
    SavedModel (W/saved_model_ct2_stop) with decode_hparams stop_after_finished=--beam_size:
    a sentence's search also stops once K hypotheses have ended among its K best candidates,
    the rule CTranslate2 follows with a length penalty (it has no exact one), where t2t_lite's
    default stops only when no alive hypothesis can beat the best finished one. Like against
    like: the ratios to CTranslate2 with the same stopping rule.
  - onmt-main infer: OpenNMT-tf's own inference on the peer's model in --peer_dir (a work dir
    of benchmarks/peers/opennmt_tf/run.py: its averaged checkpoint when there, else its latest;
    --peer_checkpoint chooses), in the peer's environment, with OpenNMT-tf's inference batching
    (length buckets --peer_length_bucket_width tokens wide) and its TensorFlow kernels as its
    users get them (TF_ENABLE_ONEDNN_OPTS as this program was started with). It runs through
    peers/opennmt_tf/decode.py, which times OpenNMT-tf's inference loop apart from its tracing
    and first batch (OpenNMT-tf's own timing counts the first batch's graph optimization).
    It translates one batch at a time whatever --parallel_batches says (it has no such
    setting), with the thread flags as given.
  - CTranslate2 float32: that checkpoint converted once by ct2-opennmt-tf-converter into
    W/ctranslate2 (in the peer's environment) and translated with ctranslate2.Translator,
    inter_threads --parallel_batches and intra_threads as t2t_lite's intra-op threads (run.py's
    `ctranslate2_threads`), up to
    the peer configuration's maximum_decoding_length. Its length penalty is length^alpha, not
    GNMT's ((5 + length) / 6)^alpha as in t2t_lite and OpenNMT-tf, so a few beams may rank
    differently (its BLEU says whether that matters).
A contestant that cannot run here (no Python 3.10 or 3.11 for the peer's environment, no
--peer_dir, a failed conversion) is left out of the table with the reason, as run.py's exit
status 3 asks callers to do.

This machine's speed drifts (by up to 1.5 times within minutes), so contestants timed one after
the other are not timed on the same machine: they run in turn, A, B, C, D, A, B, C, D, ... for
--rounds rounds, each contestant-round in its own process. In each, after the model is loaded
and warmed up (one untimed batch; the t2t_lite decoder compiles one batch per padded shape;
"warm-up s", from after the library's import to the end of that), all the sentences are
translated and timed, then each of the first --latency_sentences sentences alone (after one
untimed single sentence). Reported per
contestant: sentences and target tokens per second (median over rounds, and min-max), target
tokens counted alike for all (the output's SentencePiece pieces + end of sentence), mean output
length, BLEU of its output (sacreBLEU, t2t_lite's `decoder.score`: speed must not come from
worse translations), warm-up seconds, peak resident memory of its process, and the median
single-sentence latency. Ratios of sentences per second, t2t_lite's contestants over onmt-main
infer and over CTranslate2, are taken within each round and reported as their median and
min-max over rounds, beside the issue's targets (reported, not asserted): at least 3 times
onmt-main infer, at least 2/3 of CTranslate2, and peak memory at most OpenNMT-tf's.
W keeps each contestant-round's translations and log (round<R>_<contestant>.txt, .tokens for
the peer's, .log), the SavedModels, the CTranslate2 model and the peer's decode.yml and tokens.
"""
import concurrent.futures
import json
import os
import resource
import sys
import time

SAVED_MODEL_CLIENT = "saved_model_client"  # the first argument of the SavedModel's rounds


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_each(translate_one, lines: list) -> list:
    """Seconds to translate each line alone, after one untimed line."""
    translate_one(lines[0])
    seconds = []
    for line in lines:
        start = time.perf_counter()
        translate_one(line)
        seconds.append(time.perf_counter() - start)
    return seconds


def saved_model_client(export_dir: str, job_path: str, output_path: str, intra_threads: int,
                       inter_threads: int, parallel_batches: int,
                       warm_up_every_shape: bool = False):
    """One round of the SavedModel, in a process that imports TensorFlow and registers
    tensorflow-text's SentencePiece ops only (what a server loads), not t2t_lite. The job file
    (JSON) has the sentences, their batches (lists of indices: the decoder's order, sorted by
    length) and the latency count.
    The warm-up is one batch, or with `warm_up_every_shape` (an XLA-compiled search, which
    compiles once per batch shape) every batch and every latency sentence once. The timed
    pass sends `parallel_batches` batches at once, from threads of their own (as concurrent
    requests to a server). Writes the translations in input order and prints
    "CONTESTANT {json}"."""
    import importlib.util
    import tensorflow as tf
    # tensorflow-text's SentencePiece ops alone, as docs/serving.md shows for a Python server
    # (`import tensorflow_text` would load all its op libraries: about 110 MB more).
    tf.load_op_library(os.path.join(os.path.dirname(importlib.util.find_spec(
        "tensorflow_text").origin), "python", "ops", "_sentencepiece_tokenizer.so"))
    tf.config.threading.set_intra_op_parallelism_threads(intra_threads)
    tf.config.threading.set_inter_op_parallelism_threads(inter_threads)
    with open(job_path, encoding="utf-8") as handle:
        job = json.load(handle)
    sources, batches = job["sources"], job["batches"]

    start = time.perf_counter()
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]

    def translate(lines: list) -> list:
        outputs = serve(inputs=tf.constant(lines, tf.string))["outputs"].numpy()
        return [output.decode("utf-8") for output in outputs]

    for batch in batches if warm_up_every_shape else batches[:1]:
        translate([sources[i] for i in batch])
    if warm_up_every_shape:
        for line in sources[:job["latency_sentences"]]:
            translate([line])
    result = {"warmup_seconds": time.perf_counter() - start}

    start = time.perf_counter()
    outputs = [""] * len(sources)
    with concurrent.futures.ThreadPoolExecutor(parallel_batches) as pool:
        translated = pool.map(lambda batch: translate([sources[i] for i in batch]), batches)
        for batch, batch_outputs in zip(batches, translated):
            for index, output in zip(batch, batch_outputs):
                outputs[index] = output
    result["seconds"] = time.perf_counter() - start
    result["latency_seconds"] = time_each(lambda line: translate([line]),
                                          sources[:job["latency_sentences"]])
    with open(output_path, "w", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in outputs)
    from tensorflow.python.util import _pywrap_util_port
    result.update(sentences=len(sources), peak_rss_mb=peak_rss_mb(),
                  onednn=bool(_pywrap_util_port.IsMklEnabled()),
                  versions={"tensorflow": tf.__version__})
    print("CONTESTANT " + json.dumps(result), flush=True)


if __name__ == "__main__" and sys.argv[1:2] == [SAVED_MODEL_CLIENT]:
    export_dir, job_path, output_path, intra, inter, parallel, every_shape = sys.argv[2:]
    saved_model_client(export_dir, job_path, output_path, int(intra), int(inter), int(parallel),
                       every_shape == "True")
    sys.exit(0)

# The peer runs with the TensorFlow kernels its users get: the variable as this program was
# started, before t2t_lite's start below asks for oneDNN (t2t_lite/cpu_kernels.py).
CALLER_ONEDNN = os.environ.get("TF_ENABLE_ONEDNN_OPTS")

import collections  # noqa: E402
import importlib.util  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402

from t2t_lite.bin import common  # noqa: E402
from t2t_lite.bin.common import FLAGS, flags, registry  # noqa: E402

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)
from reporting import ONEDNN  # noqa: E402

import tensorflow as tf  # noqa: E402  (after common: its quiet start)
from absl import logging  # noqa: E402

from t2t_lite.decoding import decoder  # noqa: E402
from t2t_lite.decoding.search import SearchHParams  # noqa: E402
from t2t_lite.run_description import saved_run  # noqa: E402
from t2t_lite.training import trainer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_TMP_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))
PROBLEM = "translate_multi30k_deen"
MODES = {"beam4_cached": (4, True), "beam4_uncached": (4, False),
         "greedy_cached": (1, True), "greedy_uncached": (1, False)}


def load_peer():
    """benchmarks/peers/opennmt_tf/run.py as a module (its flags are defined only when it runs
    as a program)."""
    path = os.path.join(HERE, "peers", "opennmt_tf", "run.py")
    spec = importlib.util.spec_from_file_location("opennmt_tf_peer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


peer = load_peer()

# --compare's contestants: name -> what the table calls it, in the order each round runs them.
CONTESTANTS = {"t2t_lite_decoder": "t2t_lite decoder" + (
                   " (XLA)" if decoder.TranslatorHParams().jit_compile else ""),
               "t2t_lite_saved_model": "t2t_lite SavedModel",
               "t2t_lite_saved_model_xla": "t2t_lite SavedModel (XLA)",
               "t2t_lite_decoder_ct2_stop": "t2t_lite decoder (CT2's stop)",
               "t2t_lite_saved_model_ct2_stop": "t2t_lite SavedModel (CT2's stop)",
               "onmt_infer": "onmt-main infer",
               "ctranslate2": "CTranslate2 float32"}
# t2t_lite's SavedModels: its folder in --work_dir, whether XLA compiles its search, and whether
# it stops as CTranslate2 does (stop_after_finished = the beam size, SearchHParams).
SavedModel = collections.namedtuple("SavedModel", ["folder", "jit_compile", "ct2_stop"])
SAVED_MODELS = {"t2t_lite_saved_model": SavedModel("saved_model", False, False),
                "t2t_lite_saved_model_xla": SavedModel("saved_model_xla", True, False),
                "t2t_lite_saved_model_ct2_stop": SavedModel("saved_model_ct2_stop", False, True)}
DECODERS = {"t2t_lite_decoder": False, "t2t_lite_decoder_ct2_stop": True}  # CT2's stop or not
OURS = (*DECODERS, *SAVED_MODELS)
PEERS = ("onmt_infer", "ctranslate2")
TARGETS = {"onmt_infer": 3.0, "ctranslate2": 2 / 3}  # sentences/s ratios the issue asks for

flags.DEFINE_string("data_dir", None, "Folder of the generated data (generated if absent).")
flags.DEFINE_string("tmp_dir", DEFAULT_TMP_DIR, "Folder of the raw Multi30k files.")
flags.DEFINE_string("output_dir", None, "Modes: a trained model's folder (trained here if "
                    "empty).")
flags.DEFINE_integer("train_steps", 300, "Steps of transformer_small if O has no checkpoint.")
flags.DEFINE_string("train_hparams", "learning_rate_warmup_steps=300,learning_rate_constant=0.3",
                    "Overrides of transformer_small for that short run (peak rate 1.1e-3).")
flags.DEFINE_integer("num_sentences", 1000, "Test sentences decoded in each mode or round.",
                     lower_bound=1)
flags.DEFINE_integer("batch_size", 32, "Sentences per batch.", lower_bound=1)
flags.DEFINE_integer("parallel_batches", 1, "Batches translated at once (t2t_lite's "
                     "decode_hparams parallel_batches; the SavedModel's client threads; "
                     "CTranslate2's inter_threads; not onmt-main infer's), each with "
                     "--intra_op_parallelism_threads threads (0: t2t_lite-decoder's choice, "
                     "decoder.intra_op_threads_for).", lower_bound=1)
flags.DEFINE_list("modes", list(MODES), f"Any of {', '.join(MODES)}.")
flags.DEFINE_string("mode", None, "Internal: measure this one mode and print its JSON.")
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")
flags.DEFINE_boolean("compare", False, "Compare t2t_lite's decoder and SavedModel with "
                     "onmt-main infer and CTranslate2 (see the docstring) instead of the modes.")
flags.DEFINE_string("t2t_lite_dir", None, "--compare: t2t_lite's trained output dir "
                    "(checkpoints and hparams.json).")
flags.DEFINE_string("t2t_lite_checkpoint", None, "--compare: the checkpoint to decode (default: "
                    "T/averaged/model.ckpt when there, else T's latest).")
flags.DEFINE_string("peer_dir", None, "--compare: the OpenNMT-tf peer's work dir, as run.py "
                    "wrote it (config.yml, model.py, data/vocab.txt, model/); without it the "
                    "peer's two rows are left out.")
flags.DEFINE_string("peer_checkpoint", None, "--compare: the peer checkpoint to decode "
                    "(default: P/model/avg's when there, else P/model's latest).")
flags.DEFINE_string("peer_venv_dir", peer.DEFAULT_VENV_DIR, "--compare: OpenNMT-tf's virtual "
                    "environment (run.py's --venv_dir; created or completed when needed).")
flags.DEFINE_string("peer_python", None, "--compare: Python 3.10 or 3.11 to create it with "
                    "(run.py's --python).")
flags.DEFINE_integer("peer_length_bucket_width", peer.INFER_LENGTH_BUCKET_WIDTH,
                     "--compare: onmt-main infer's infer.length_bucket_width (OpenNMT-tf's "
                     "Transformer default 5; 1 as in run.py --decode).", lower_bound=1)
flags.DEFINE_string("work_dir", None, "--compare: folder of the SavedModel, the CTranslate2 "
                    "model, each round's translations and logs.")
flags.DEFINE_integer("rounds", 3, "--compare: rounds; every contestant runs once a round, in "
                     "turn, each in its own process.", lower_bound=1)
flags.DEFINE_list("contestants", list(CONTESTANTS), f"--compare: any of {', '.join(CONTESTANTS)}.")
flags.DEFINE_integer("beam_size", 4, "--compare: beam size of every contestant.", lower_bound=1)
flags.DEFINE_float("alpha", 0.6, "--compare: length penalty of every contestant (t2t_lite and "
                   "OpenNMT-tf: GNMT's ((5 + length) / 6)^alpha; CTranslate2: length^alpha).")
flags.DEFINE_integer("latency_sentences", 50, "--compare: the first this many sentences are "
                     "also translated one at a time for the single-sentence latency.",
                     lower_bound=1)
flags.DEFINE_boolean("decoder_child", False, "Internal: one round of the t2t_lite decoder; "
                     "prints its JSON.")
flags.DEFINE_string("child_output", None, "Internal: where that round writes its translations.")
flags.DEFINE_integer("stop_after_finished", 0, "Internal: that round's decode_hparams "
                     "stop_after_finished.", lower_bound=0)
common.define_thread_flags()
flags.mark_flags_as_required(["data_dir"])
flags.register_validator("modes", lambda modes: set(modes) <= set(MODES), f"one of {MODES}")
flags.register_validator("contestants", lambda names: set(names) <= set(CONTESTANTS),
                         f"one of {', '.join(CONTESTANTS)}")


def translator_hparams():
    """t2t_lite's batching in the modes and the decoder child (their searches differ)."""
    return decoder.TranslatorHParams(batch_size=FLAGS.batch_size,
                                     parallel_batches=FLAGS.parallel_batches)


def batch_intra_threads() -> int:
    """t2t_lite's intra-op threads: the flag, else what t2t_lite-decoder chooses for this input
    (decoder.intra_op_threads_for)."""
    return FLAGS.intra_op_parallelism_threads or decoder.intra_op_threads_for(
        translator_hparams(), FLAGS.num_sentences)


def thread_flags() -> list:
    return [f"--intra_op_parallelism_threads={FLAGS.intra_op_parallelism_threads}",
            f"--inter_op_parallelism_threads={FLAGS.inter_op_parallelism_threads}"]


# --- Modes ---------------------------------------------------------------------------------------

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


def compile_shapes(translator, encoders, sources) -> int:
    """Translates one sentence of each padded length among `sources`, each in a batch of its
    own (together they would make one batch of the longest length): XLA compiles the search
    once per shape, so the timed pass that follows compiles nothing. Returns the shapes."""
    by_shape = {}
    for line in sources:
        length = len(encoders["inputs"].encode(line)) + 1
        by_shape.setdefault(-(-length // translator.LENGTH_MULTIPLE), line)
    for line in by_shape.values():
        translator.translate([line], show_progress=False)
    return len(by_shape)


def measure(mode, problem):
    """One mode, in this process: {"compile_seconds", "seconds", "sentences_per_s", ...}."""
    beam_size, use_cache = MODES[mode]
    run = saved_run(FLAGS.output_dir)
    model = decoder.load_model(run["model"], run["hparams"], problem.vocab_size(FLAGS.data_dir),
                               FLAGS.output_dir)
    sources, references = test_sentences(problem)
    encoders = problem.feature_encoders(FLAGS.data_dir)
    translator = decoder.Translator(
        model, encoders, SearchHParams(beam_size=beam_size, use_cache=use_cache),
        problem.max_length, translator_hparams=translator_hparams())
    start = time.perf_counter()
    shapes = compile_shapes(translator, encoders, sources)
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    outputs = translator.translate(sources, show_progress=False)
    seconds = time.perf_counter() - start
    output_tokens = sum(len(encoders["targets"].encode(line)) + 1 for line in outputs)
    return {"mode": mode, "beam_size": beam_size, "use_cache": use_cache,
            "sentences": len(sources), "shapes": shapes,
            "compile_seconds": compile_seconds, "seconds": seconds,
            "sentences_per_s": len(sources) / seconds,
            "output_tokens_per_s": output_tokens / seconds,
            "mean_output_tokens": output_tokens / len(sources),
            "bleu": decoder.score(outputs, references)["bleu"],
            "peak_rss_mb": peak_rss_mb()}


def run_mode_process(mode):
    command = [sys.executable, os.path.abspath(__file__), f"--mode={mode}",
               f"--data_dir={FLAGS.data_dir}", f"--output_dir={FLAGS.output_dir}",
               f"--num_sentences={FLAGS.num_sentences}", f"--batch_size={FLAGS.batch_size}",
               f"--parallel_batches={FLAGS.parallel_batches}", *thread_flags()]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"mode {mode} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def print_modes_table(result):
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


def run_modes(problem):
    if not FLAGS.output_dir:
        raise ValueError("--output_dir is required (a trained model's folder), or --compare")
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
    print_modes_table(result)
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, result)


# --- --compare: the t2t_lite contestants (each round in its own process) -------------------------

def test_sentences(problem):
    """The first --num_sentences test sentences and their references."""
    paths = problem.text_paths(FLAGS.data_dir, "test")
    return tuple(decoder.read_sentences(paths[name])[:FLAGS.num_sentences]
                 for name in ("inputs", "targets"))


def make_translator(model, encoders, max_length: int, batch_size: int, parallel_batches: int):
    search_hparams = SearchHParams(beam_size=FLAGS.beam_size, alpha=FLAGS.alpha,
                                   stop_after_finished=FLAGS.stop_after_finished)
    return decoder.Translator(model, encoders, search_hparams, max_length,
                              translator_hparams=decoder.TranslatorHParams(
                                  batch_size=batch_size, parallel_batches=parallel_batches))


def t2t_lite_decoder_round(problem, sources: list):
    """t2t_lite-decoder's Translator: (outputs, result)."""
    start = time.perf_counter()
    run = saved_run(FLAGS.t2t_lite_dir)
    model = decoder.load_model(run["model"], run["hparams"], problem.vocab_size(FLAGS.data_dir),
                               FLAGS.t2t_lite_dir, FLAGS.t2t_lite_checkpoint)
    encoders = problem.feature_encoders(FLAGS.data_dir)
    translator = make_translator(model, encoders, problem.max_length, FLAGS.batch_size,
                                 FLAGS.parallel_batches)
    shapes = compile_shapes(translator, encoders, sources)
    result = {"warmup_seconds": time.perf_counter() - start, "shapes": shapes}

    start = time.perf_counter()
    outputs = translator.translate(sources, show_progress=False)
    result["seconds"] = time.perf_counter() - start

    singles = make_translator(model, encoders, problem.max_length, 1, 1)
    latency_sources = sources[:FLAGS.latency_sentences]
    start = time.perf_counter()
    compile_shapes(singles, encoders, latency_sources)
    result["latency_warmup_seconds"] = time.perf_counter() - start
    result["latency_seconds"] = time_each(
        lambda line: singles.translate([line], show_progress=False), latency_sources)
    return outputs, result


def decoder_child():
    """One round of the t2t_lite decoder: writes its output to --child_output and prints
    "CONTESTANT {json}"."""
    problem = registry.problem(PROBLEM)
    sources, _ = test_sentences(problem)
    outputs, result = t2t_lite_decoder_round(problem, sources)
    decoder.write_lines(FLAGS.child_output, outputs)
    result.update(sentences=len(sources), peak_rss_mb=peak_rss_mb(),
                  onednn=reporting.onednn_enabled(),
                  versions={"tensorflow": tf.__version__})
    print("CONTESTANT " + json.dumps(result), flush=True)


# --- --compare: preparation, rounds, summary ----------------------------------------------------

def saved_model_dir(name: str) -> str:
    return os.path.join(FLAGS.work_dir, SAVED_MODELS[name].folder)


def t2t_lite_checkpoint() -> str:
    """--t2t_lite_checkpoint, else the averaged checkpoint multi30k_recipe.py decodes, else the
    latest."""
    if FLAGS.t2t_lite_checkpoint:
        return FLAGS.t2t_lite_checkpoint
    averaged = os.path.join(FLAGS.t2t_lite_dir, "averaged", "model.ckpt")
    if os.path.exists(averaged + ".index"):  # t2t_lite-avg-checkpoints writes no state file
        return averaged
    latest = tf.train.latest_checkpoint(FLAGS.t2t_lite_dir)
    if not latest:
        raise ValueError(f"--t2t_lite_dir={FLAGS.t2t_lite_dir} has no checkpoint")
    return latest


def stop_after_finished(ct2_stop: bool) -> int:
    return FLAGS.beam_size if ct2_stop else 0


def export_saved_model(checkpoint: str, name: str) -> float:
    """t2t_lite-exporter into the SavedModel's folder in W (replaced); returns its wall time."""
    saved_model = SAVED_MODELS[name]
    command = [sys.executable, "-m", "t2t_lite.bin.exporter", f"--data_dir={FLAGS.data_dir}",
               f"--output_dir={FLAGS.t2t_lite_dir}", f"--export_dir={saved_model_dir(name)}",
               f"--checkpoint_path={checkpoint}", "--overwrite",
               f"--decode_hparams=beam_size={FLAGS.beam_size},alpha={FLAGS.alpha},"
               f"stop_after_finished={stop_after_finished(saved_model.ct2_stop)}",
               f"--export_jit_compile={saved_model.jit_compile}"]
    start = time.time()
    output = subprocess.run(command, capture_output=True, text=True)
    if output.returncode:
        raise RuntimeError(f"t2t_lite-exporter failed (exit status {output.returncode}):\n"
                           f"{(output.stdout + output.stderr)[-3000:]}")
    return time.time() - start


def write_saved_model_job(sources: list, encoders: dict) -> str:
    """The SavedModel client's job file: the sentences, batched in the decoder's order (sorted
    by their number of tokens; the client's business, since the SavedModel takes any batch),
    and the latency count. Returns its path."""
    order = sorted(range(len(sources)), key=lambda i: len(encoders["inputs"].encode(sources[i])))
    job = {"sources": sources, "latency_sentences": FLAGS.latency_sentences,
           "batches": [order[i:i + FLAGS.batch_size]
                       for i in range(0, len(order), FLAGS.batch_size)]}
    path = os.path.join(FLAGS.work_dir, "saved_model_job.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(job, handle)
    return path


def prepare_peer(entries: dict, problem, sources: list) -> dict:
    """The peer's environment, decode.yml, tokens and CTranslate2 model. Marks the peer's
    entries `dropped` (with the reason) where they cannot run. Returns what the rounds need."""
    if not any(name in entries for name in PEERS):
        return {}

    def drop(reason, names=PEERS):
        for name in names:
            if name in entries:
                entries[name]["dropped"] = reason
        print(f"left out: {', '.join(CONTESTANTS[n] for n in names if n in entries)}: {reason}",
              flush=True)

    if not FLAGS.peer_dir:
        drop("no --peer_dir given")
        return {}
    try:
        venv_python = peer.ensure_environment(os.path.expanduser(FLAGS.peer_venv_dir),
                                              FLAGS.peer_python)
    except SystemExit as exit_:
        if exit_.code != peer.NO_PYTHON_EXIT_STATUS:
            raise
        drop("no Python 3.10 or 3.11 for OpenNMT-tf's TensorFlow (see above)")
        return {}
    pieces = peer.PieceTokens(problem.feature_encoders(FLAGS.data_dir)["inputs"])
    setup = peer.prepare_decoding(
        venv_python, os.path.abspath(FLAGS.peer_dir), pieces,
        os.path.join(FLAGS.work_dir, "peer"), sources, sources[:FLAGS.latency_sentences],
        FLAGS.beam_size, FLAGS.alpha, FLAGS.batch_size, FLAGS.peer_length_bucket_width,
        FLAGS.peer_checkpoint)
    setup.update(venv_python=venv_python, pieces=pieces,
                 versions=peer.installed_versions(venv_python))
    print(f"the peer's checkpoint: {setup['checkpoint']}", flush=True)
    if "ctranslate2" in entries:
        setup["ctranslate2_dir"] = os.path.join(FLAGS.work_dir, "ctranslate2")
        try:
            setup["convert_seconds"] = peer.convert_to_ctranslate2(
                venv_python, setup, setup["ctranslate2_dir"])
        except peer.PeerError as error:
            drop(f"the conversion failed: {error}", ["ctranslate2"])
    return setup


def child_environment(name: str) -> dict:
    """t2t_lite's contestants run with t2t_lite's kernels (this process's environment); the
    peer's with TF_ENABLE_ONEDNN_OPTS as the caller had it (absent: TensorFlow's default)."""
    if name in OURS:
        return dict(os.environ)
    return reporting.child_environment({ONEDNN: CALLER_ONEDNN})


def contestant_command(name: str, setup: dict, output: str) -> list:
    if name in DECODERS:
        return [sys.executable, os.path.abspath(__file__), "--decoder_child",
                f"--stop_after_finished={stop_after_finished(DECODERS[name])}",
                f"--child_output={output}", f"--data_dir={FLAGS.data_dir}",
                f"--t2t_lite_dir={FLAGS.t2t_lite_dir}",
                f"--t2t_lite_checkpoint={setup['t2t_lite_checkpoint']}",
                f"--num_sentences={FLAGS.num_sentences}", f"--batch_size={FLAGS.batch_size}",
                f"--parallel_batches={FLAGS.parallel_batches}",
                f"--beam_size={FLAGS.beam_size}", f"--alpha={FLAGS.alpha}",
                f"--latency_sentences={FLAGS.latency_sentences}", *thread_flags()]
    if name in SAVED_MODELS:
        jit_compile = SAVED_MODELS[name].jit_compile
        return [sys.executable, os.path.abspath(__file__), SAVED_MODEL_CLIENT,
                saved_model_dir(name), setup["saved_model_job"], output,
                str(batch_intra_threads()), str(FLAGS.inter_op_parallelism_threads),
                str(FLAGS.parallel_batches), str(jit_compile)]
    if name == "onmt_infer":
        return peer.infer_command(setup["venv_python"], setup, output,
                                  FLAGS.intra_op_parallelism_threads,
                                  FLAGS.inter_op_parallelism_threads)
    return peer.ctranslate2_command(setup["venv_python"], setup, setup["ctranslate2_dir"],
                                    output, FLAGS.beam_size, FLAGS.alpha, FLAGS.batch_size,
                                    FLAGS.intra_op_parallelism_threads, FLAGS.parallel_batches)


def score_round(name: str, result: dict, output: str, setup: dict, encoders: dict,
                references: list) -> dict:
    """The round's rates, output length and BLEU from its translations (target tokens: the
    SentencePiece pieces of each translation + end of sentence, the same count for all)."""
    lines = decoder.read_sentences(output)
    if name in PEERS:
        lines = [setup["pieces"].decode(line) for line in lines]
    if len(lines) != len(references):
        raise RuntimeError(f"{CONTESTANTS[name]} wrote {len(lines)} lines to {output}, not "
                           f"{len(references)}")
    tokens = sum(len(encoders["targets"].encode(line)) + 1 for line in lines)
    latencies = sorted(result["latency_seconds"])
    result.update(sentences_per_s=len(lines) / result["seconds"],
                  target_tokens_per_s=tokens / result["seconds"],
                  mean_output_tokens=tokens / len(lines),
                  bleu=decoder.score(lines, references)["bleu"],
                  latency_median_ms=1000 * statistics.median(latencies),
                  latency_p90_ms=1000 * latencies[int(0.9 * (len(latencies) - 1))])
    return result


def run_rounds(entries: dict, setup: dict, encoders: dict, references: list) -> list:
    """Every contestant once a round, in turn, each in its own process; fills each entry's
    "rounds" (a result, or None where it did not run) and returns the order with times."""
    order = []
    for entry in entries.values():
        entry["rounds"] = []
    for round_index in range(FLAGS.rounds):
        for name, entry in entries.items():
            if entry.get("dropped"):
                entry["rounds"].append(None)
                continue
            print(f"round {round_index + 1}/{FLAGS.rounds}: {entry['name']}", flush=True)
            stem = os.path.join(FLAGS.work_dir, f"round{round_index + 1}_{name}")
            output = stem + (".tokens" if name in PEERS else ".txt")
            start, load = time.time(), os.getloadavg()
            try:
                result = reporting.run_child(contestant_command(name, setup, output),
                                             child_environment(name),
                                             "CONTESTANT" if name in OURS else "DECODE",
                                             stem + ".log")
                result = score_round(name, result, output, setup, encoders, references)
            except reporting.ChildFailed as error:
                if name in OURS:
                    raise
                entry["dropped"], result = f"{error}; see {stem}.log", None
                print(f"  left out of the remaining rounds: {entry['dropped']}", flush=True)
            seconds = time.time() - start
            order.append({"round": round_index + 1, "contestant": entry["name"],
                          "start": start, "seconds": seconds, "load_average_before": load})
            entry["rounds"].append(result)
            if result:
                result["process_seconds"] = seconds
                print(f"  {result['sentences_per_s']:.2f} sentences/s, "
                      f"{result['target_tokens_per_s']:.0f} target tokens/s, BLEU "
                      f"{result['bleu']:.2f}, warm-up {result['warmup_seconds']:.1f} s, "
                      f"{result['peak_rss_mb']:.0f} MB, latency "
                      f"{result['latency_median_ms']:.0f} ms; process {seconds:.0f} s",
                      flush=True)
    return order


def summarize(entry: dict):
    """Medians over the rounds the contestant ran (None if none)."""
    ran = [result for result in entry["rounds"] if result]
    if not ran:
        return None
    median = statistics.median
    rates = [result["sentences_per_s"] for result in ran]
    summary = {key: median(result[key] for result in ran) for key in (
        "sentences_per_s", "target_tokens_per_s", "mean_output_tokens", "bleu",
        "warmup_seconds", "peak_rss_mb", "latency_median_ms", "process_seconds")}
    summary.update(min=min(rates), max=max(rates), rounds=len(ran),
                   per_round=[r["sentences_per_s"] if r else None for r in entry["rounds"]],
                   bleu_per_round=[r["bleu"] if r else None for r in entry["rounds"]],
                   onednn=sorted({r["onednn"] for r in ran if "onednn" in r}))
    return summary


def ratios(entries: dict) -> list:
    """t2t_lite's contestants over each peer: the ratio of sentences/s within each round, and
    the median, min and max of those ratios, with the issue's target; also the median ratio of
    target tokens/s (the fairer one when the models' translations differ in length)."""
    def within_rounds(ours, theirs, key):
        return [a[key] / b[key] if a and b else None
                for a, b in zip(entries[ours]["rounds"], entries[theirs]["rounds"])]

    result = []
    for ours in OURS:
        for theirs in PEERS:
            if ours not in entries or theirs not in entries:
                continue
            each = within_rounds(ours, theirs, "sentences_per_s")
            valid = [value for value in each if value is not None]
            tokens = [value for value in within_rounds(ours, theirs, "target_tokens_per_s")
                      if value is not None]
            median = statistics.median(valid) if valid else None
            result.append({"numerator": CONTESTANTS[ours], "denominator": CONTESTANTS[theirs],
                           "per_round": each, "median": median,
                           "min": min(valid) if valid else None,
                           "max": max(valid) if valid else None,
                           "target": TARGETS[theirs],
                           "met": None if median is None else median >= TARGETS[theirs],
                           "target_tokens_median": statistics.median(tokens) if tokens else None})
    return result


def memory_targets(entries: dict) -> list:
    """Each t2t_lite contestant's peak memory against onmt-main infer's (medians over rounds)."""
    theirs = entries.get("onmt_infer", {}).get("summary")
    if not theirs:
        return []
    return [{"contestant": CONTESTANTS[name], "peak_rss_mb": ours["peak_rss_mb"],
             "onmt_infer_peak_rss_mb": theirs["peak_rss_mb"],
             "met": ours["peak_rss_mb"] <= theirs["peak_rss_mb"]}
            for name in OURS if name in entries
            for ours in [entries[name]["summary"]] if ours]


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_compare_tables(result: dict):
    m, threads = result["machine"], result["threads"]
    print(f"\n{PROBLEM} test_2016_flickr, first {FLAGS.num_sentences} sentences; beam "
          f"{FLAGS.beam_size}, alpha {FLAGS.alpha:g}, batches of {FLAGS.batch_size}, "
          f"{threads['parallel_batches']} at once; threads intra/inter {threads['intra_op']}/"
          f"{threads['inter_op']} (0: TensorFlow's choice; onmt-main infer: the flags' "
          f"{FLAGS.intra_op_parallelism_threads}/{FLAGS.inter_op_parallelism_threads}, one batch "
          f"at a time; CTranslate2 intra/inter_threads {threads['ctranslate2'][0]}/"
          f"{threads['ctranslate2'][1]}); {FLAGS.rounds} "
          f"rounds in turn, each contestant-round in its own process; {m['cpu']}, {m['cores']} "
          f"cores")
    header = (f"{'contestant':<33}{'sent/s':>8}{'min-max':>14}{'tgt tok/s':>10}{'out len':>8}"
              f"{'BLEU':>7}{'warm-up s':>10}{'peak MB':>8}{'latency ms':>11}  oneDNN")
    print(header + "\n" + "-" * len(header))
    left_out = []
    for entry in result["contestants"]:
        s = entry["summary"]
        if s is None:
            left_out.append(f"{entry['name']}: {entry.get('dropped')}")
            continue
        spread = f"{s['min']:.2f}-{s['max']:.2f}"
        onednn = "/".join("on" if on else "off" for on in s["onednn"]) or "-"
        print(f"{entry['name']:<33}{s['sentences_per_s']:>8.2f}{spread:>14}"
              f"{s['target_tokens_per_s']:>10.0f}{s['mean_output_tokens']:>8.1f}{s['bleu']:>7.2f}"
              f"{s['warmup_seconds']:>10.1f}{s['peak_rss_mb']:>8.0f}"
              f"{s['latency_median_ms']:>11.0f}  {onednn}")
    for line in left_out:
        print(f"left out: {line}")
    print(f"medians over rounds (min-max of sentences/s); target tokens: SentencePiece pieces "
          f"of the output + end of sentence; BLEU: sacreBLEU of the output; warm-up: loading, "
          f"compiling or tracing and the untimed batch(es); peak MB: the process's peak "
          f"resident memory; latency: median of the first {FLAGS.latency_sentences} sentences "
          f"each translated alone" + "".join(f"; {name}: {version}" for name, version
                                             in result.get("peer_versions", {}).items()))
    if result["ratios"]:
        header = (f"\n{'sentences/s ratio, same round':<56}{'median':>7}{'min':>6}{'max':>6}"
                  f"{'target':>8}  met {'tok/s':>6}  per round")
        print(header + "\n" + "-" * (len(header) + 4))
        for r in result["ratios"]:
            met = "-" if r["met"] is None else ("yes" if r["met"] else "no")
            target = f">= {r['target']:.2f}"
            print(f"{r['numerator'] + ' / ' + r['denominator']:<56}{fmt(r['median'], '.2f'):>7}"
                  f"{fmt(r['min'], '.2f'):>6}{fmt(r['max'], '.2f'):>6}{target:>8}"
                  f"  {met:<3}{fmt(r['target_tokens_median'], '.2f'):>6}  "
                  + " ".join(fmt(value, ".2f") for value in r["per_round"]))
        print("median, min, max: of the ratios within each round; tok/s: the median ratio of "
              "target tokens/s")
    for target in result["memory_targets"]:
        print(f"peak memory: {target['contestant']} {target['peak_rss_mb']:.0f} MB, onmt-main "
              f"infer {target['onmt_infer_peak_rss_mb']:.0f} MB (target: at most OpenNMT-tf's): "
              f"{'met' if target['met'] else 'not met'}")


def run_compare(problem):
    for flag in ("t2t_lite_dir", "work_dir"):
        if not getattr(FLAGS, flag):
            raise ValueError(f"--{flag} is required with --compare")
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)  # keeps the splits already complete
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    sources, references = test_sentences(problem)
    encoders = problem.feature_encoders(FLAGS.data_dir)
    entries = {name: {"name": CONTESTANTS[name]} for name in CONTESTANTS
               if name in FLAGS.contestants}
    setup = {"t2t_lite_checkpoint": t2t_lite_checkpoint()}
    print(f"t2t_lite's checkpoint: {setup['t2t_lite_checkpoint']}", flush=True)
    setup["export_seconds"] = {}
    for name in SAVED_MODELS:
        if name in entries:
            print(f"exporting the SavedModel to {saved_model_dir(name)}", flush=True)
            setup["export_seconds"][name] = export_saved_model(setup["t2t_lite_checkpoint"],
                                                               name)
    if setup["export_seconds"]:  # one job file for every export
        setup["saved_model_job"] = write_saved_model_job(sources, encoders)
    setup.update(prepare_peer(entries, problem, sources))

    host = reporting.machine()
    result = {"problem": PROBLEM, "sentences": len(sources), "beam_size": FLAGS.beam_size,
              "alpha": FLAGS.alpha, "batch_size": FLAGS.batch_size, "rounds": FLAGS.rounds,
              "latency_sentences": FLAGS.latency_sentences,
              "threads": {"parallel_batches": FLAGS.parallel_batches,
                          "intra_op": batch_intra_threads(),
                          "inter_op": FLAGS.inter_op_parallelism_threads,
                          "ctranslate2": peer.ctranslate2_threads(
                              FLAGS.intra_op_parallelism_threads, FLAGS.parallel_batches)},
              "machine": {**host, "load_average_at_start": os.getloadavg()},
              "t2t_lite_checkpoint": setup["t2t_lite_checkpoint"],
              "peer_checkpoint": setup.get("checkpoint"),
              "peer_length_bucket_width": setup.get("length_bucket_width"),
              "peer_max_decoding_length": setup.get("max_decoding_length"),
              "peer_versions": setup.get("versions", {}),
              "export_seconds": setup["export_seconds"],
              "convert_seconds": setup.get("convert_seconds")}
    result["order"] = run_rounds(entries, setup, encoders, references)
    for entry in entries.values():
        entry["summary"] = summarize(entry)
    result["contestants"] = list(entries.values())
    result["ratios"] = ratios(entries)
    result["memory_targets"] = memory_targets(entries)
    print_compare_tables(result)
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, result)


def main(unused_argv):
    problem = registry.problem(PROBLEM)
    if FLAGS.mode or FLAGS.decoder_child:
        decoder.size_thread_pools(  # as t2t_lite-decoder sizes them for this input
            translator_hparams(), FLAGS.num_sentences, FLAGS.intra_op_parallelism_threads,
            FLAGS.inter_op_parallelism_threads)
        if FLAGS.decoder_child:
            return decoder_child()
        print(json.dumps(measure(FLAGS.mode, problem)))
        return
    if FLAGS.compare:
        try:
            return run_compare(problem)
        except peer.PeerError as error:
            raise ValueError(f"the OpenNMT-tf peer (--peer_dir={FLAGS.peer_dir}): {error}")
    run_modes(problem)


if __name__ == "__main__":
    common.run_main(main)
