"""Decoding speed on Multi30k test_2016_flickr: t2t_lite's own modes, or t2t_lite against
OpenNMT-tf, eole and CTranslate2 (--compare).

  python benchmarks/decode_speed.py --data_dir=D --output_dir=O [--num_sentences=1000]
      [--modes=beam4_cached,beam4_uncached,greedy_cached,greedy_uncached] [--output_json=F]
  python benchmarks/decode_speed.py --compare --data_dir=D --t2t_lite_dir=T --peer_dir=P
      --work_dir=W [--rounds=3] [--num_sentences=1000 --batch_size=32 --beam_size=4 --alpha=0.6]
      [--parallel_batches=1] [--intra_op_parallelism_threads=0 --inter_op_parallelism_threads=0]
      [--eole_dir=E [--eole_model=M] [--eole_ctranslate2_dir=C]] [--output_json=F]

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
the same --inter_op_parallelism_threads for twelve contestants (--contestants chooses):
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
    and of source tokens, which a server gets from its clients): in its first pass, and for
    every latency sentence before the latency is timed.
  - t2t_lite decoder (CT2's stop), t2t_lite SavedModel (CT2's stop): the decoder and the
    SavedModel (W/saved_model_ct2_stop) with decode_hparams stop_after_finished=--beam_size:
    a sentence's search also stops once K hypotheses have ended among its K best candidates,
    the rule CTranslate2 follows with a length penalty (it has no exact one), where t2t_lite's
    default stops only when no alive hypothesis can beat the best finished one. Like against
    like: the ratios to CTranslate2 with the same stopping rule.
  - onmt-main infer: OpenNMT-tf's own inference on the peer's model in --peer_dir (a work dir
    of benchmarks/peers/opennmt_tf/run.py: its averaged checkpoint when there, else its latest;
    --peer_checkpoint chooses), in the peer's environment, with OpenNMT-tf's inference batching
    (length buckets --peer_length_bucket_width tokens wide) and TensorFlow's oneDNN as
    --peer_onednn says (default: TF_ENABLE_ONEDNN_OPTS not set, TensorFlow 2.13's own choice
    for this CPU, as OpenNMT-tf's users get it; the caller's variable is not passed on, and the
    JSON's onmt_infer_settings records both). It runs through peers/opennmt_tf/decode.py. It
    translates one batch at a time whatever --parallel_batches says (it has no such setting),
    with the thread flags as given (0: TensorFlow's choice).
  - CTranslate2 3.24.0 float32 ("ctranslate2"), CTranslate2 4.x float32 and int8
    ("ctranslate2_4_float32", "ctranslate2_4_int8"; the table names the version): the peer's
    checkpoint converted once by ct2-opennmt-tf-converter into W/ctranslate2 (float32, by
    CTranslate2 3.24 in the peer's environment: OpenNMT-tf 2.32 requires ctranslate2<4) and
    translated with ctranslate2.Translator: by 3.24 in the peer's environment, and by 4.x in
    its own environment (peers/ctranslate2_runtime.py, --ctranslate2_venv_dir, created on
    first use), which loads 3.24's model directory (the same format; that file has the
    details). compute_type float32, or int8, which on a CPU and a float32 model is int8_float32
    (int8 weights and matrix products, the rest float32; asking for int8_float32 gives the same
    model, so it has no row). Each with inter_threads --parallel_batches and intra_threads as
    t2t_lite's intra-op threads (run.py's `ctranslate2_threads`), up to the peer
    configuration's maximum_decoding_length, and CT2_VERBOSE=1, whose log gives the CPU,
    instruction set, matrix product backends and resolved compute type recorded in the JSON
    (ctranslate2_cpu, read by ctranslate2_runtime.logged_cpu). Its length penalty is
    length^alpha, not GNMT's ((5 + length) / 6)^alpha as in t2t_lite and OpenNMT-tf, so a few
    beams may rank differently (its BLEU says whether that matters).
  - eole predict: eole's own translation (`eole predict -config`, as its users run it) on the
    model in --eole_dir (a work dir of benchmarks/peers/eole/run.py: the average in model/avg
    that run.py --decode translates when it is newer than the last step_N checkpoint, else
    that checkpoint; --eole_model chooses), in eole's environment (--eole_venv_dir, run.py's
    --venv_dir), through peers/eole/decode.py, with run.py's prediction configuration
    (`predict_config`): beam --beam_size, eole's GNMT length penalty ("wu", --alpha; eole counts
    a hypothesis one token longer than t2t_lite, the closest it has), batches of --batch_size
    sentences (eole sorts them by length), one length limit of max_length + 50 = 150 tokens
    (max_length_ratio 0). Its source is the SentencePiece pieces with eole's `</s>` appended,
    as run.py trains and decodes. PyTorch's thread pools take the thread flags as given (0:
    PyTorch's choice), as onmt-main infer's take them; one batch at a time.
  - CTranslate2 4.x float32 and int8 on eole's model ("ctranslate2_eole_4_float32",
    "ctranslate2_eole_4_int8"; "(eole)" in the table): eole's model converted by CTranslate2
    4.x's own eole converter in eole's environment, as run.py --ctranslate2_dir converts it:
    --eole_ctranslate2_dir, a folder that run.py --ctranslate2_dir wrote, else the decoded
    model converted once into W/eole_ctranslate2 by run.py's `convert_to_ctranslate2`; then
    translated by CTranslate2 4.x's environment as above, on the eole source tokens, up to 150
    tokens.
A contestant that cannot run here (no Python for a peer's environment, no --peer_dir or
--eole_dir, a failed conversion) is left out of the table with the reason, as run.py's exit
status 3 asks callers to do. Every peer's output is turned back into text by the same
PieceTokens (eole's run.py detokenizes with it too) and scored alike.

This machine's speed drifts (by up to 1.5 times within minutes), so contestants timed one after
the other are not timed on the same machine: they run in turn, A, B, C, D, A, B, C, D, ... for
--rounds rounds, each contestant-round in its own process. In each, once the model is loaded
(`ready_at`), all the sentences are translated twice in the same process. The first pass is
what a one-off run does (tracing or compiling included) and writes the output; the time from
just before this program started the process to that output's last line written
(`written_at`) is the end-to-end time ("e2e s"; "load s" to the model loaded). The second pass
is timed alone: the speed after warm-up. Both passes must give the same translations (the
JSON's passes_differ counts the lines that do not). Then each of the first --latency_sentences
sentences is translated alone (after one untimed single sentence). Reported per
contestant: sentences and target tokens per second after warm-up (median over rounds, and
min-max), end-to-end sentences per second, target tokens counted alike for all (the output's
SentencePiece pieces + end of sentence), mean output length, BLEU of its output (sacreBLEU,
t2t_lite's `decoder.score`: speed must not come from worse translations), load and end-to-end
seconds, peak resident memory of its process, and the median single-sentence latency. The JSON
also has the CPU time of each timed pass (`cpu_seconds`, every thread): beside its wall time it
tells a round that waited for the CPU (another program on the machine) from one that did more
work. Ratios of sentences per second, t2t_lite's contestants over onmt-main infer and over each
CTranslate2 row, are taken within each round and reported as their median and min-max over
rounds (and the median ratios of target tokens/s and end-to-end sentences/s), beside the
issue's targets (reported, not asserted): at least 3 times onmt-main infer, at least 2/3 of
CTranslate2 float32 on OpenNMT-tf's model (none against int8 and against eole's rows, which
the issue predates), and peak memory at most OpenNMT-tf's.
W keeps each contestant-round's translations and log (round<R>_<contestant>.txt, .tokens for
the peers', .log), the SavedModels, the CTranslate2 models, the peer's decode.yml and tokens
(W/peer) and eole's decode.yaml and tokens (W/eole).
"""
import concurrent.futures
import json
import os
import resource
import sys
import time

SAVED_MODEL_CLIENT = "saved_model_client"  # the first argument of the SavedModel's rounds


def _peer_decode_module():
    """peers/opennmt_tf/decode.py (standard library only at import), whose peak_rss_mb every
    contestant's process uses, this script's own children included."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "opennmt_tf",
                        "decode.py")
    spec = importlib.util.spec_from_file_location("opennmt_tf_decode", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


peak_rss_mb = _peer_decode_module().peak_rss_mb


def cpu_seconds() -> float:
    """CPU time of this process so far, every thread, user and system: beside a pass's wall
    time it tells a pass that waited for the CPU (another process on it) from one that did more
    work."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def time_each(translate_one, lines: list) -> list:
    """Seconds to translate each line alone, after one untimed line."""
    translate_one(lines[0])
    seconds = []
    for line in lines:
        start = time.perf_counter()
        translate_one(line)
        seconds.append(time.perf_counter() - start)
    return seconds


def differing_lines(first: list, second: list) -> int:
    """Translations that differ between a round's two passes (decoding is deterministic: 0)."""
    return sum(a != b for a, b in zip(first, second)) + abs(len(first) - len(second))


def saved_model_client(export_dir: str, job_path: str, output_path: str, intra_threads: int,
                       inter_threads: int, parallel_batches: int,
                       warm_up_every_shape: bool = False):
    """One round of the SavedModel, in a process that imports TensorFlow and registers
    tensorflow-text's SentencePiece ops only (what a server loads), not t2t_lite. The job file
    (JSON) has the sentences, their batches (lists of indices: the decoder's order, sorted by
    length) and the latency count.
    Each pass sends `parallel_batches` batches at once, from threads of their own (as
    concurrent requests to a server). The first pass writes the translations in input order (its
    end, `written_at`, ends the end-to-end time); the second is timed. With
    `warm_up_every_shape` (an XLA-compiled search, which compiles once per batch shape) every
    latency sentence is translated once before the latency is timed (else one, time_each's).
    Prints "CONTESTANT {json}"."""
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

    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    result = {"ready_at": time.time()}

    def translate(lines: list) -> list:
        outputs = serve(inputs=tf.constant(lines, tf.string))["outputs"].numpy()
        return [output.decode("utf-8") for output in outputs]

    def translate_all() -> list:
        outputs = [""] * len(sources)
        with concurrent.futures.ThreadPoolExecutor(parallel_batches) as pool:
            translated = pool.map(lambda batch: translate([sources[i] for i in batch]),
                                  batches)
            for batch, batch_outputs in zip(batches, translated):
                for index, output in zip(batch, batch_outputs):
                    outputs[index] = output
        return outputs

    start = time.perf_counter()
    first = translate_all()
    with open(output_path, "w", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in first)
    result.update(written_at=time.time(), first_pass_seconds=time.perf_counter() - start)

    start, cpu = time.perf_counter(), cpu_seconds()
    second = translate_all()
    result.update(seconds=time.perf_counter() - start, cpu_seconds=cpu_seconds() - cpu,
                  passes_differ=differing_lines(first, second))
    latency_sources = sources[:job["latency_sentences"]]
    if warm_up_every_shape:
        for line in latency_sources:
            translate([line])
    result["latency_seconds"] = time_each(lambda line: translate([line]), latency_sources)
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

# TF_ENABLE_ONEDNN_OPTS as this program was started, before t2t_lite's start below asks for
# oneDNN (t2t_lite/cpu_kernels.py): recorded only; the peer's value is --peer_onednn's.
CALLER_ONEDNN = os.environ.get("TF_ENABLE_ONEDNN_OPTS")

import collections  # noqa: E402
import filecmp  # noqa: E402
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


def load_module(name: str, relative_path: str):
    """A file under benchmarks/peers/ as a module (run.py's flags are defined only when it runs
    as a program)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "peers",
                                                                     relative_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_peer():
    """benchmarks/peers/opennmt_tf/run.py as a module."""
    return load_module("opennmt_tf_peer", os.path.join("opennmt_tf", "run.py"))


peer = load_peer()
ctranslate2_runtime = load_module("ctranslate2_runtime", "ctranslate2_runtime.py")
eole_peer = load_module("eole_peer", os.path.join("eole", "run.py"))
eole_decode = load_module("eole_decode", os.path.join("eole", "decode.py"))

# CTranslate2's contestants: the runtime that translates ("peer": the CTranslate2 of OpenNMT-tf's
# environment, 3.24, the newest its pin allows; "4.x": CTranslate2 4.x in an environment of its
# own, peers/ctranslate2_runtime.py), the compute type it asks for ("int8" on a CPU resolves to
# int8_float32, the same as asking for int8_float32: decode.py records the resolved type), and
# the converted model it loads, with its own tokens ("opennmt_tf": the peer's checkpoint
# converted once by ct2-opennmt-tf-converter in the peer's environment, prepare_peer; "eole":
# eole's model converted by CTranslate2 4.x's eole converter in eole's environment,
# prepare_eole).
CTranslate2Contestant = collections.namedtuple("CTranslate2Contestant",
                                               ["runtime", "compute_type", "model"])
CTRANSLATE2 = {"ctranslate2": CTranslate2Contestant("peer", "float32", "opennmt_tf"),
               "ctranslate2_4_float32": CTranslate2Contestant("4.x", "float32", "opennmt_tf"),
               "ctranslate2_4_int8": CTranslate2Contestant("4.x", "int8", "opennmt_tf"),
               "ctranslate2_eole_4_float32": CTranslate2Contestant("4.x", "float32", "eole"),
               "ctranslate2_eole_4_int8": CTranslate2Contestant("4.x", "int8", "eole")}
CTRANSLATE2_VERSIONS = {"peer": peer.CTRANSLATE2_VERSION,
                        "4.x": ctranslate2_runtime.CTRANSLATE2_VERSION}
CTRANSLATE2_MODEL_LABELS = {"opennmt_tf": "", "eole": " (eole)"}


def ctranslate2_label(name: str) -> str:
    contestant = CTRANSLATE2[name]
    return (f"CTranslate2 {CTRANSLATE2_VERSIONS[contestant.runtime]} {contestant.compute_type}"
            + CTRANSLATE2_MODEL_LABELS[contestant.model])


# --compare's contestants: name -> what the table calls it, in the order each round runs them.
CONTESTANTS = {"t2t_lite_decoder": "t2t_lite decoder" + (
                   " (XLA)" if decoder.TranslatorHParams().jit_compile else ""),
               "t2t_lite_saved_model": "t2t_lite SavedModel",
               "t2t_lite_saved_model_xla": "t2t_lite SavedModel (XLA)",
               "t2t_lite_decoder_ct2_stop": "t2t_lite decoder (CT2's stop)",
               "t2t_lite_saved_model_ct2_stop": "t2t_lite SavedModel (CT2's stop)",
               "onmt_infer": "onmt-main infer",
               "eole_predict": f"eole {eole_peer.EOLE_VERSION} predict",
               **{name: ctranslate2_label(name) for name in CTRANSLATE2}}
# t2t_lite's SavedModels: its folder in --work_dir, whether XLA compiles its search, and whether
# it stops as CTranslate2 does (stop_after_finished = the beam size, SearchHParams).
SavedModel = collections.namedtuple("SavedModel", ["folder", "jit_compile", "ct2_stop"])
SAVED_MODELS = {"t2t_lite_saved_model": SavedModel("saved_model", False, False),
                "t2t_lite_saved_model_xla": SavedModel("saved_model_xla", True, False),
                "t2t_lite_saved_model_ct2_stop": SavedModel("saved_model_ct2_stop", False, True)}
DECODERS = {"t2t_lite_decoder": False, "t2t_lite_decoder_ct2_stop": True}  # CT2's stop or not
OURS = (*DECODERS, *SAVED_MODELS)
PEERS = ("onmt_infer", "eole_predict", *CTRANSLATE2)
# Each peer model's contestants, left out together when that model cannot be had.
OPENNMT_TF_ROWS = ("onmt_infer", *(name for name, contestant in CTRANSLATE2.items()
                                   if contestant.model == "opennmt_tf"))
EOLE_ROWS = ("eole_predict", *(name for name, contestant in CTRANSLATE2.items()
                               if contestant.model == "eole"))
# The sentences/s ratios the issue asks for: at least 3 times onmt-main infer and 2/3 of
# CTranslate2 in float32 on OpenNMT-tf's model (t2t_lite decodes in float32); against int8 and
# eole's rows (which the issue predates) the ratio has no target.
TARGETS = {"onmt_infer": 3.0, **{name: 2 / 3 for name, contestant in CTRANSLATE2.items()
                                 if (contestant.compute_type, contestant.model)
                                 == ("float32", "opennmt_tf")}}

# --peer_onednn -> onmt-main infer's TF_ENABLE_ONEDNN_OPTS (None: not set, TensorFlow's default
# for the CPU). TensorFlow 2.13 reads only "0"/"false" and "1"/"true"; any other value, the empty
# string included, is its default with a warning, so "not set" covers the empty string too.
PEER_ONEDNN = {"default": None, "on": "1", "off": "0"}

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
                     "onmt-main infer, eole predict and CTranslate2 (see the docstring) instead "
                     "of the modes.")
flags.DEFINE_string("t2t_lite_dir", None, "--compare: t2t_lite's trained output dir "
                    "(checkpoints and hparams.json).")
flags.DEFINE_string("t2t_lite_checkpoint", None, "--compare: the checkpoint to decode (default: "
                    "T/averaged/model.ckpt when there, else T's latest).")
flags.DEFINE_string("peer_dir", None, "--compare: the OpenNMT-tf peer's work dir, as run.py "
                    "wrote it (config.yml, model.py, data/vocab.txt, model/); without it "
                    "onmt-main infer and CTranslate2 on its model are left out.")
flags.DEFINE_string("peer_checkpoint", None, "--compare: the peer checkpoint to decode "
                    "(default: P/model/avg's when there, else P/model's latest).")
flags.DEFINE_string("peer_venv_dir", peer.DEFAULT_VENV_DIR, "--compare: OpenNMT-tf's virtual "
                    "environment (run.py's --venv_dir; created or completed when needed).")
flags.DEFINE_string("peer_python", None, "--compare: Python 3.10 or 3.11 to create it with "
                    "(run.py's --python).")
flags.DEFINE_string("ctranslate2_venv_dir", ctranslate2_runtime.DEFAULT_VENV_DIR,
                    "--compare: CTranslate2 4.x's virtual environment "
                    "(peers/ctranslate2_runtime.py; created or completed when needed).")
flags.DEFINE_enum("peer_onednn", "default", list(PEER_ONEDNN), "--compare: TensorFlow's "
                  "oneDNN in onmt-main infer: default (TF_ENABLE_ONEDNN_OPTS not set: "
                  "TensorFlow 2.13's choice for this CPU, on with AVX-512 VNNI or BF16, AVX-VNNI "
                  "or AMX, else off, as OpenNMT-tf's users get it), on or off; the caller's "
                  "variable is not passed on.")
flags.DEFINE_integer("peer_length_bucket_width", peer.INFER_LENGTH_BUCKET_WIDTH,
                     "--compare: onmt-main infer's infer.length_bucket_width (OpenNMT-tf's "
                     "Transformer default 5; 1 as in run.py --decode).", lower_bound=1)
flags.DEFINE_string("eole_dir", None, "--compare: the eole peer's work dir, as its run.py wrote "
                    "it (data/eole_vocab.txt, model/); without it eole's three rows are left out.")
flags.DEFINE_string("eole_model", None, "--compare: the eole model to decode (default: "
                    "E/model/avg when newer than E's last model/step_N, else that step_N).")
flags.DEFINE_string("eole_ctranslate2_dir", None, "--compare: eole's model converted by its "
                    "run.py --ctranslate2_dir (default: the decoded model converted into "
                    "W/eole_ctranslate2 the same way).")
flags.DEFINE_string("eole_venv_dir", eole_peer.DEFAULT_VENV_DIR, "--compare: eole's virtual "
                    "environment (its run.py's --venv_dir; created or completed when needed).")
flags.DEFINE_string("eole_python", None, "--compare: Python 3.11 to create it with (its "
                    "run.py's --python).")
flags.DEFINE_string("work_dir", None, "--compare: folder of the SavedModel, the CTranslate2 "
                    "models, the peers' inputs, each round's translations and logs.")
flags.DEFINE_integer("rounds", 3, "--compare: rounds; every contestant runs once a round, in "
                     "turn, each in its own process.", lower_bound=1)
flags.DEFINE_list("contestants", list(CONTESTANTS), f"--compare: any of {', '.join(CONTESTANTS)}.")
flags.DEFINE_integer("beam_size", 4, "--compare: beam size of every contestant.", lower_bound=1)
flags.DEFINE_float("alpha", 0.6, "--compare: length penalty of every contestant (t2t_lite and "
                   "OpenNMT-tf: GNMT's ((5 + length) / 6)^alpha; eole: GNMT's, counting one "
                   "token more; CTranslate2: length^alpha).")
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


def t2t_lite_decoder_round(problem, sources: list, output_path: str) -> dict:
    """t2t_lite-decoder's Translator: the first pass writes the translations to `output_path`
    (its end, `written_at`, ends the end-to-end time), the second is timed, then the
    single-sentence latency. Returns the round's result."""
    run = saved_run(FLAGS.t2t_lite_dir)
    model = decoder.load_model(run["model"], run["hparams"], problem.vocab_size(FLAGS.data_dir),
                               FLAGS.t2t_lite_dir, FLAGS.t2t_lite_checkpoint)
    encoders = problem.feature_encoders(FLAGS.data_dir)
    translator = make_translator(model, encoders, problem.max_length, FLAGS.batch_size,
                                 FLAGS.parallel_batches)
    result = {"ready_at": time.time()}

    start = time.perf_counter()
    first = translator.translate(sources, show_progress=False)
    decoder.write_lines(output_path, first)
    result.update(written_at=time.time(), first_pass_seconds=time.perf_counter() - start)

    start, cpu = time.perf_counter(), cpu_seconds()
    second = translator.translate(sources, show_progress=False)
    result.update(seconds=time.perf_counter() - start, cpu_seconds=cpu_seconds() - cpu,
                  passes_differ=differing_lines(first, second))

    singles = make_translator(model, encoders, problem.max_length, 1, 1)
    latency_sources = sources[:FLAGS.latency_sentences]
    start = time.perf_counter()
    result["latency_shapes"] = compile_shapes(singles, encoders, latency_sources)
    result["latency_warmup_seconds"] = time.perf_counter() - start
    result["latency_seconds"] = time_each(
        lambda line: singles.translate([line], show_progress=False), latency_sources)
    return result


def decoder_child():
    """One round of the t2t_lite decoder: writes its output to --child_output and prints
    "CONTESTANT {json}"."""
    problem = registry.problem(PROBLEM)
    sources, _ = test_sentences(problem)
    result = t2t_lite_decoder_round(problem, sources, FLAGS.child_output)
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
    if os.path.isdir(averaged) or os.path.exists(averaged + ".index"):  # new or old layout
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


def running(entries: dict, names) -> list:
    """Those of `names` in the race and not left out."""
    return [name for name in names if name in entries and not entries[name].get("dropped")]


def drop(entries: dict, names, reason: str):
    """Leaves `names` out of the race (those in it) with the reason, printed and in the JSON."""
    names = running(entries, names)
    for name in names:
        entries[name]["dropped"] = reason
    if names:
        print(f"left out: {', '.join(CONTESTANTS[name] for name in names)}: {reason}",
              flush=True)


def environment_python(entries: dict, names, what: str, pythons: str, ensure,
                       required_flag: str = None):
    """`ensure()`'s Python for `what`'s environment if any of `names` is in the race, else
    None; also None, with `names` left out, when `required_flag` (their model's folder) is not
    given or the environment cannot be made (no Python of `pythons`: the exit status 3 of the
    peers' environment code)."""
    if not running(entries, names):
        return None
    if required_flag and not getattr(FLAGS, required_flag):
        return drop(entries, names, f"no --{required_flag} given")
    try:
        return ensure()
    except SystemExit as exit_:
        if exit_.code != peer.NO_PYTHON_EXIT_STATUS:
            raise
        drop(entries, names, f"no Python {pythons} for {what} (see above)")
    except peer.PeerError as error:
        drop(entries, names, f"{what}: {error}")
    return None


def prepare_peer(entries: dict, sources: list, setup: dict):
    """The OpenNMT-tf peer's environment, decode.yml, tokens and CTranslate2 model, into
    `setup`. Leaves its contestants out (with the reason) where they cannot run."""
    venv_python = environment_python(
        entries, OPENNMT_TF_ROWS, "OpenNMT-tf's TensorFlow", "3.10 or 3.11",
        lambda: peer.ensure_environment(os.path.expanduser(FLAGS.peer_venv_dir),
                                        FLAGS.peer_python), "peer_dir")
    if not venv_python:
        return
    setup.update(peer.prepare_decoding(
        venv_python, os.path.abspath(FLAGS.peer_dir), setup["pieces"],
        os.path.join(FLAGS.work_dir, "peer"), sources, sources[:FLAGS.latency_sentences],
        FLAGS.beam_size, FLAGS.alpha, FLAGS.batch_size, FLAGS.peer_length_bucket_width,
        FLAGS.peer_checkpoint))
    setup.update(venv_python=venv_python, versions=peer.installed_versions(venv_python))
    setup["ctranslate2_pythons"]["peer"] = venv_python
    print(f"the peer's checkpoint: {setup['checkpoint']}", flush=True)
    converted = running(entries, [name for name in OPENNMT_TF_ROWS if name in CTRANSLATE2])
    if converted:
        model_dir = os.path.join(FLAGS.work_dir, "ctranslate2")
        try:
            setup["convert_seconds"] = peer.convert_to_ctranslate2(venv_python, setup,
                                                                   model_dir)
            setup["ctranslate2_models"]["opennmt_tf"] = model_dir
        except peer.PeerError as error:
            drop(entries, converted, f"the conversion failed: {error}")


def eole_model(eole_dir: str) -> str:
    """--eole_model, else what eole's run.py --decode translates (peers/eole/decode.py's
    `decoding_model`)."""
    if FLAGS.eole_model:
        return FLAGS.eole_model
    model_dir = os.path.join(eole_dir, "model")
    saved = eole_peer.checkpoints(model_dir)
    if not saved:
        raise ValueError(f"--eole_dir={eole_dir}: no checkpoint in {model_dir} (train the eole "
                         f"peer there first: its run.py --work_dir={eole_dir})")
    return eole_decode.decoding_model(model_dir, saved)


def prepare_eole(entries: dict, sources: list, setup: dict):
    """eole's environment, its decode.yaml and source tokens (W/eole) and its CTranslate2
    model, into setup["eole"]. Leaves its contestants out (with the reason) where they cannot
    run."""
    python = environment_python(
        entries, EOLE_ROWS, "eole's environment", "3.11",
        lambda: eole_peer.ensure_environment(os.path.expanduser(FLAGS.eole_venv_dir),
                                             FLAGS.eole_python), "eole_dir")
    if not python:
        return
    eole_dir, out_dir = os.path.abspath(FLAGS.eole_dir), os.path.join(FLAGS.work_dir, "eole")
    os.makedirs(out_dir, exist_ok=True)
    eole = {"python": python, "model": eole_model(eole_dir),
            "versions": eole_peer.installed_versions(python),
            "source": os.path.join(out_dir, "source.tokens"),
            "latency_source": os.path.join(out_dir, "latency.tokens"),
            "config": os.path.join(out_dir, "decode.yaml"),
            "max_decoding_length": eole_peer.max_decoding_length()}
    vocabularies = [os.path.join(out_dir, "eole_vocab.txt"),
                    os.path.join(eole_dir, "data", "eole_vocab.txt")]  # ours, the model's
    eole_peer.write_vocabulary(setup["pieces"], vocabularies[0])
    if not os.path.exists(vocabularies[1]) or not filecmp.cmp(*vocabularies, shallow=False):
        raise ValueError(f"--eole_dir={eole_dir}: {vocabularies[1]} is missing or not the "
                         f"vocabulary of this data dir's SentencePiece model")
    eole_peer.write_sources(eole["source"], sources, setup["pieces"])
    eole_peer.write_sources(eole["latency_source"], sources[:FLAGS.latency_sentences],
                            setup["pieces"])
    config = eole_peer.predict_config(eole["model"], eole["source"],
                                      os.path.join(out_dir, "predictions.tokens"),
                                      FLAGS.beam_size, "wu", FLAGS.alpha,
                                      eole["max_decoding_length"])
    config["batch_size"] = FLAGS.batch_size  # run.py decodes with t2t_lite's default, 32
    eole_peer.write_yaml(eole["config"], config)
    eole["settings"] = {key: config[key] for key in (
        "beam_size", "length_penalty", "alpha", "batch_type", "batch_size", "max_length",
        "max_length_ratio")}
    setup["eole"] = eole
    print(f"eole's model: {eole['model']}", flush=True)

    converted = running(entries, [name for name in EOLE_ROWS if name in CTRANSLATE2])
    if not converted:
        return
    if FLAGS.eole_ctranslate2_dir:
        model_dir = os.path.abspath(FLAGS.eole_ctranslate2_dir)
        if not os.path.exists(os.path.join(model_dir, "model.bin")):
            return drop(entries, converted, f"no model.bin in --eole_ctranslate2_dir={model_dir}")
        eole["ctranslate2"] = {"ctranslate2_dir": model_dir, "converted_here": False}
    else:
        model_dir = os.path.join(FLAGS.work_dir, "eole_ctranslate2")
        try:
            eole["ctranslate2"] = {**eole_peer.convert_to_ctranslate2(
                python, eole["model"], model_dir, eole["versions"]["ctranslate2"]),
                "converted_here": True}
        except peer.PeerError as error:
            return drop(entries, converted, f"the conversion failed: {error}")
    setup["ctranslate2_models"]["eole"] = model_dir


def prepare_ctranslate2(entries: dict, setup: dict):
    """CTranslate2 4.x's environment (created on first use) for its contestants still in the
    race (the peer's runtime is its environment, prepare_peer), and each runtime's version."""
    python = environment_python(
        entries, [name for name in CTRANSLATE2 if CTRANSLATE2[name].runtime == "4.x"],
        "CTranslate2 4.x's environment", "3.10 or 3.11",
        lambda: ctranslate2_runtime.ensure_environment(FLAGS.ctranslate2_venv_dir,
                                                       FLAGS.peer_python))
    if python:
        setup["ctranslate2_pythons"]["4.x"] = python
    setup["ctranslate2_versions"] = {
        runtime: ctranslate2_runtime.installed_version(python)
        for runtime, python in setup["ctranslate2_pythons"].items()}


def child_environment(name: str) -> dict:
    """t2t_lite's contestants run with t2t_lite's kernels (this process's environment);
    onmt-main infer with TF_ENABLE_ONEDNN_OPTS from --peer_onednn, whatever the caller's
    shell has (eole predict too, whose PyTorch reads no such variable); CTranslate2's (no
    TensorFlow) with CT2_VERBOSE=1, which logs the CPU, the instruction set and the matrix
    product backends it chose when it loads a model (ctranslate2_runtime.logged_cpu)."""
    if name in OURS:
        return dict(os.environ)
    changes = {ONEDNN: PEER_ONEDNN[FLAGS.peer_onednn]}
    if name in CTRANSLATE2:
        changes["CT2_VERBOSE"] = "1"
    return reporting.child_environment(changes)


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
    if name == "eole_predict":
        eole = setup["eole"]
        return eole_decode.command(eole["python"], eole["config"], output,
                                   eole["latency_source"], FLAGS.intra_op_parallelism_threads,
                                   FLAGS.inter_op_parallelism_threads)
    contestant = CTRANSLATE2[name]
    inputs = setup["eole"] if contestant.model == "eole" else setup  # tokens, length limit
    return peer.ctranslate2_command(setup["ctranslate2_pythons"][contestant.runtime], inputs,
                                    setup["ctranslate2_models"][contestant.model], output,
                                    FLAGS.beam_size, FLAGS.alpha, FLAGS.batch_size,
                                    FLAGS.intra_op_parallelism_threads, FLAGS.parallel_batches,
                                    contestant.compute_type)


def score_round(name: str, result: dict, output: str, setup: dict, encoders: dict,
                references: list) -> dict:
    """The round's rates, output length and BLEU from its translations (target tokens: the
    SentencePiece pieces of each translation + end of sentence, the same count for all)."""
    if name in EOLE_ROWS:  # as eole's run.py detokenizes its output
        lines = eole_peer.output_hypotheses(output, setup["pieces"])
    else:
        lines = decoder.read_sentences(output)
    if name in OPENNMT_TF_ROWS:
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
    "rounds" (a result, or None where it did not run) and returns the order with times. The
    end-to-end time runs from just before the process is started to the end of its first
    pass's output (`written_at`, the child's clock, which is this machine's)."""
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
            load = os.getloadavg()
            start = time.time()
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
                add_process_times(result, start, seconds)
                if name in CTRANSLATE2:
                    with open(stem + ".log", encoding="utf-8", errors="replace") as log:
                        result["ctranslate2_cpu"] = ctranslate2_runtime.logged_cpu(log.read())
                differ = (f"; the passes differ in {result['passes_differ']} lines"
                          if result.get("passes_differ") else "")
                print(f"  {result['sentences_per_s']:.2f} sentences/s, "
                      f"{result['target_tokens_per_s']:.0f} target tokens/s, end to end "
                      f"{result['end_to_end_sentences_per_s']:.2f} sentences/s "
                      f"({result['end_to_end_seconds']:.1f} s, load "
                      f"{result['load_seconds']:.1f} s), BLEU {result['bleu']:.2f}, "
                      f"{result['peak_rss_mb']:.0f} MB, latency "
                      f"{result['latency_median_ms']:.0f} ms; timed pass "
                      f"{result['seconds']:.1f} s with {result['cpu_seconds']:.1f} CPU-s; "
                      f"process {seconds:.0f} s{differ}",
                      flush=True)
    return order


def add_process_times(result: dict, started: float, process_seconds: float):
    """The round's times from its process's start (`started`, this process's clock just before
    it): load (to the model ready, `ready_at`), end to end (to the first pass's last
    translation written, `written_at`) and its sentences/s, and the whole process."""
    result.update(load_seconds=result["ready_at"] - started,
                  end_to_end_seconds=result["written_at"] - started,
                  process_seconds=process_seconds)
    result["end_to_end_sentences_per_s"] = result["sentences"] / result["end_to_end_seconds"]


def summarize(entry: dict):
    """Medians over the rounds the contestant ran (None if none)."""
    ran = [result for result in entry["rounds"] if result]
    if not ran:
        return None
    median = statistics.median
    rates = [result["sentences_per_s"] for result in ran]
    summary = {key: median(result[key] for result in ran) for key in (
        "sentences_per_s", "end_to_end_sentences_per_s", "target_tokens_per_s",
        "mean_output_tokens", "bleu", "load_seconds", "end_to_end_seconds",
        "first_pass_seconds", "peak_rss_mb", "latency_median_ms", "process_seconds",
        "cpu_seconds", "seconds")}
    summary.update(min=min(rates), max=max(rates), rounds=len(ran),
                   per_round=[r["sentences_per_s"] if r else None for r in entry["rounds"]],
                   end_to_end_per_round=[r["end_to_end_sentences_per_s"] if r else None
                                         for r in entry["rounds"]],
                   bleu_per_round=[r["bleu"] if r else None for r in entry["rounds"]],
                   cpu_per_wall_per_round=[r["cpu_seconds"] / r["seconds"] if r else None
                                           for r in entry["rounds"]],
                   passes_differ=max(r.get("passes_differ", 0) for r in ran),
                   onednn=sorted({r["onednn"] for r in ran if "onednn" in r}))
    for key in ("versions", "compute_type", "effective_compute_type", "ctranslate2_cpu",
                "tf_threads", "torch_threads"):
        if key in ran[-1]:
            summary[key] = ran[-1][key]
    return summary


def ratios(entries: dict) -> list:
    """t2t_lite's contestants over each peer: the ratio of sentences/s within each round, and
    the median, min and max of those ratios, with the issue's target (None: no target); also
    the median ratios of target tokens/s (the fairer one when the models' translations differ
    in length) and of end-to-end sentences/s."""
    def within_rounds(ours, theirs, key):
        return [a[key] / b[key] if a and b else None
                for a, b in zip(entries[ours]["rounds"], entries[theirs]["rounds"])]

    def median_of(values):
        valid = [value for value in values if value is not None]
        return statistics.median(valid) if valid else None

    result = []
    for ours in OURS:
        for theirs in PEERS:
            if ours not in entries or theirs not in entries:
                continue
            each = within_rounds(ours, theirs, "sentences_per_s")
            valid = [value for value in each if value is not None]
            median, target = median_of(each), TARGETS.get(theirs)
            result.append({"numerator": CONTESTANTS[ours], "denominator": CONTESTANTS[theirs],
                           "per_round": each, "median": median,
                           "min": min(valid) if valid else None,
                           "max": max(valid) if valid else None, "target": target,
                           "met": None if median is None or target is None
                           else median >= target,
                           "target_tokens_median": median_of(
                               within_rounds(ours, theirs, "target_tokens_per_s")),
                           "end_to_end_median": median_of(
                               within_rounds(ours, theirs, "end_to_end_sentences_per_s"))})
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
          f"at a time; eole predict: PyTorch's pools the same, 0 its choice; CTranslate2 "
          f"intra/inter_threads {threads['ctranslate2'][0]}/"
          f"{threads['ctranslate2'][1]}); {FLAGS.rounds} "
          f"rounds in turn, each contestant-round in its own process; {m['cpu']}, {m['cores']} "
          f"cores")
    header = (f"{'contestant':<33}{'sent/s':>8}{'min-max':>14}{'e2e sent/s':>11}"
              f"{'tgt tok/s':>10}{'out len':>8}{'BLEU':>7}{'load s':>7}{'e2e s':>7}"
              f"{'peak MB':>8}{'latency ms':>11}  oneDNN")
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
              f"{s['end_to_end_sentences_per_s']:>11.2f}{s['target_tokens_per_s']:>10.0f}"
              f"{s['mean_output_tokens']:>8.1f}{s['bleu']:>7.2f}{s['load_seconds']:>7.1f}"
              f"{s['end_to_end_seconds']:>7.1f}{s['peak_rss_mb']:>8.0f}"
              f"{s['latency_median_ms']:>11.0f}  {onednn}")
    for line in left_out:
        print(f"left out: {line}")
    versions = {**result.get("peer_versions", {}),
                **{f"ctranslate2 ({runtime})": version for runtime, version
                   in result.get("ctranslate2_versions", {}).items()}}
    versions.pop("ctranslate2", None)  # the peer's: "ctranslate2 (peer)"
    versions.update({name: version for name, version in result.get("eole_versions", {}).items()
                     if name in ("eole", "torch")})
    print(f"medians over rounds (min-max of sentences/s); sent/s: the second of two passes over "
          f"the sentences in the same process; e2e: from the process's start to the first "
          f"pass's last translation written (imports, loading, tracing or compiling included), "
          f"e2e sent/s the sentences over that; load s: from the process's start to the model "
          f"loaded; target tokens: SentencePiece pieces of the output + end of sentence; BLEU: "
          f"sacreBLEU of the output; peak MB: the process's peak resident memory; latency: "
          f"median of the first {FLAGS.latency_sentences} sentences each translated alone"
          + "".join(f"; {name}: {version}" for name, version in versions.items()))
    for entry in result["contestants"]:
        s = entry["summary"] or {}
        if s.get("passes_differ"):
            print(f"{entry['name']}: its two passes differ in up to {s['passes_differ']} "
                  f"translations")
        if s.get("ctranslate2_cpu"):
            print(f"{entry['name']}: compute type {s.get('effective_compute_type')} (asked "
                  f"{s.get('compute_type')}); "
                  + ", ".join(f"{key} {value}" for key, value in s["ctranslate2_cpu"].items()
                              if key != "compute_type"))
    if result["ratios"]:
        width = max(len(r["numerator"] + " / " + r["denominator"]) for r in result["ratios"]) + 2
        header = (f"\n{'sentences/s ratio, same round':<{width}}{'median':>7}{'min':>7}{'max':>7}"
                  f"{'target':>8}  met {'tok/s':>6}{'e2e':>6}  per round")
        print(header + "\n" + "-" * (len(header) + 4))
        for r in result["ratios"]:
            met = "-" if r["met"] is None else ("yes" if r["met"] else "no")
            target = "-" if r["target"] is None else f">= {r['target']:.2f}"
            print(f"{r['numerator'] + ' / ' + r['denominator']:<{width}}"
                  f"{fmt(r['median'], '.2f'):>7}{fmt(r['min'], '.2f'):>7}"
                  f"{fmt(r['max'], '.2f'):>7}{target:>8}  {met:<3}"
                  f"{fmt(r['target_tokens_median'], '.2f'):>6}"
                  f"{fmt(r['end_to_end_median'], '.2f'):>6}  "
                  + " ".join(fmt(value, ".2f") for value in r["per_round"]))
        print("median, min, max: of the ratios within each round; tok/s, e2e: the median ratios "
              "of target tokens/s and of end-to-end sentences/s; no target against int8 nor "
              "against eole's rows")
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
    setup.update(pieces=peer.PieceTokens(encoders["inputs"]), ctranslate2_pythons={},
                 ctranslate2_models={})
    prepare_peer(entries, sources, setup)
    prepare_eole(entries, sources, setup)
    prepare_ctranslate2(entries, setup)
    eole = setup.get("eole", {})

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
              "ctranslate2_versions": setup.get("ctranslate2_versions", {}),
              "ctranslate2_contestants": {name: {**CTRANSLATE2[name]._asdict(),
                                                 "version": CTRANSLATE2_VERSIONS[
                                                     CTRANSLATE2[name].runtime]}
                                          for name in CTRANSLATE2 if name in entries},
              "ctranslate2_converter": f"ct2-opennmt-tf-converter of CTranslate2 "
                                       f"{peer.CTRANSLATE2_VERSION} (the peer's environment)",
              "onmt_infer_settings": {
                  "peer_onednn": FLAGS.peer_onednn,
                  "TF_ENABLE_ONEDNN_OPTS": PEER_ONEDNN[FLAGS.peer_onednn],
                  "caller_TF_ENABLE_ONEDNN_OPTS": CALLER_ONEDNN,
                  "intra_op_parallelism_threads": FLAGS.intra_op_parallelism_threads,
                  "inter_op_parallelism_threads": FLAGS.inter_op_parallelism_threads,
                  "length_bucket_width": setup.get("length_bucket_width")},
              "eole_model": eole.get("model"),
              "eole_versions": eole.get("versions", {}),
              "eole_predict_settings": {
                  **eole.get("settings", {}),
                  "intra_op_parallelism_threads": FLAGS.intra_op_parallelism_threads,
                  "inter_op_parallelism_threads": FLAGS.inter_op_parallelism_threads},
              "eole_ctranslate2": eole.get("ctranslate2"),
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
            raise ValueError(f"a peer (--peer_dir={FLAGS.peer_dir}, --eole_dir="
                             f"{FLAGS.eole_dir}): {error}")
    run_modes(problem)


if __name__ == "__main__":
    common.run_main(main)
