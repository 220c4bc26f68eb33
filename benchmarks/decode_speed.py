"""Decoding speed on Multi30k test_2016_flickr in alternating rounds: t2t_lite's decoder, or
(--compare) t2t_lite's decoder, SavedModel and CTranslate2 export against onmt-main infer, eole
predict and CTranslate2 on the peers' models (benchmarks/README.md, decode_speed.py).

  python benchmarks/decode_speed.py --data_dir=D --t2t_lite_dir=T [--num_sentences=100]
  python benchmarks/decode_speed.py --compare --data_dir=D --t2t_lite_dir=T --peer_dir=P
      [--eole_dir=E] --work_dir=W [--rounds=3] [--parallel_batches=1] [--output_json=F]
  python benchmarks/decode_speed.py --data_dir=D --t2t_lite_dir=T --old_checkout=C
      --old_python=PY --feature_costs --work_dir=W [--rounds=5] [--output_json=F]

Each contestant-round is a process of its own (decode_child.py for t2t_lite's decoder and
SavedModel, the peers' decode.py in their environments for the others, t2t_lite's CTranslate2
export included) that translates the sentences twice, the first pass written
(the end-to-end time), the second timed, then the latency sentences one at a time. Every
output is scored by the same sacreBLEU call; ratios within each round stand beside the targets.

--old_checkout races the decoder against an older checkout's own decode_child.py under its own
Python (the same job), with their translations compared line by line; --feature_costs adds the
decoder's n-best list, its scoring of the references and its interactive mode against the
1-best, and checks the scores (decode_costs.py).
"""
import collections
import os
import shutil
import statistics
import subprocess
import sys
import time

# TF_ENABLE_ONEDNN_OPTS as the caller set it (t2t_lite's contestants run with it), recorded;
# onmt-main infer's is --peer_onednn's.
CALLER_ONEDNN = os.environ.get("TF_ENABLE_ONEDNN_OPTS")

from t2t_lite.bin import common  # noqa: E402
from t2t_lite.bin.common import FLAGS, flags, registry  # noqa: E402
common.load_tensorflow()  # the programs' start: a quiet TensorFlow

import harness  # noqa: E402  (benchmarks/, beside this script)
import ctranslate2_runtime  # noqa: E402  (benchmarks/peers/)
import decode_costs  # noqa: E402
from harness import PROBLEM, fmt  # noqa: E402

from t2t_lite.decoding import decoder, output_files  # noqa: E402
from t2t_lite.storage.run_description import saved_run  # noqa: E402
from t2t_lite.training.trainer import cpu_multiplies_in_bfloat16  # noqa: E402

CHILD = os.path.join(harness.BENCHMARKS, "decode_child.py")
peer = harness.peer_module("opennmt_tf/run.py")
eole_peer = harness.peer_module("eole/run.py")
eole_decode = harness.peer_module("eole/decode.py")  # eole predict's command

# A contestant: its label, its model's toolkit, how it runs (decode_child.py's "decoder" and
# "saved_model", the peers' decode.py's others), XLA, CTranslate2's stopping rule
# (stop_after_finished = beam size), CTranslate2's runtime ("peer": 3.24 in OpenNMT-tf's
# environment; "4.x": peers/ctranslate2_runtime.py) and compute type (int8 is int8_float32;
# t2t_lite's model is exported by t2t_lite-exporter --format=ctranslate2 in that quantization),
# t2t_lite's hparams.mixed_precision (None: the model's own as its hparams.json records it).
# `old`: run by --old_checkout's decode_child.py under --old_python.
Contestant = collections.namedtuple("Contestant", [
    "label", "model", "runs", "jit_compile", "ct2_stop", "runtime", "compute_type",
    "mixed_precision", "old"], defaults=[False, False, None, None, None, False])
CT2_VERSIONS = {"peer": peer.CTRANSLATE2_VERSION, "4.x": ctranslate2_runtime.CTRANSLATE2_VERSION}
# The runs of decode_child.py (t2t_lite in TensorFlow); the first two translate (1-best) and race
# the peers.
CHILD_KINDS = ("decoder", "saved_model", "decoder_nbest", "decoder_scoring")
TRANSLATING = CHILD_KINDS[:2]
CT2_MODEL_LABELS = {"opennmt_tf": "", "eole": " (eole)", "t2t_lite": " (t2t_lite)"}
XLA = " (XLA)" if decoder.TranslatorHParams().jit_compile else ""  # the decoder's default
CONTESTANTS = {name: Contestant(label, model, runs, **settings) for name, label, model, runs,
               settings in (  # in the order each round runs them
    ("t2t_lite_decoder", f"t2t_lite decoder{XLA}", "t2t_lite", "decoder", {}),
    ("t2t_lite_decoder_old", f"t2t_lite decoder{XLA} (old checkout)", "t2t_lite", "decoder",
     {"old": True}),
    ("t2t_lite_decoder_nbest", f"t2t_lite decoder{XLA} n-best", "t2t_lite", "decoder_nbest", {}),
    ("t2t_lite_decoder_scoring", f"t2t_lite decoder{XLA} scoring", "t2t_lite",
     "decoder_scoring", {}),
    ("t2t_lite_decoder_interactive", "t2t_lite-decoder --decode_interactive", "t2t_lite",
     "interactive", {}),
    ("t2t_lite_saved_model", "t2t_lite SavedModel", "t2t_lite", "saved_model", {}),
    ("t2t_lite_saved_model_xla", "t2t_lite SavedModel (XLA)", "t2t_lite", "saved_model",
     {"jit_compile": True}),
    ("t2t_lite_decoder_ct2_stop", "t2t_lite decoder (CT2's stop)", "t2t_lite", "decoder",
     {"ct2_stop": True}),
    ("t2t_lite_saved_model_ct2_stop", "t2t_lite SavedModel (CT2's stop)", "t2t_lite",
     "saved_model", {"ct2_stop": True}),
    *((f"t2t_lite_{runs}_{precision}", f"t2t_lite {label} {precision}", "t2t_lite", runs,
       {"mixed_precision": precision}) for precision in ("bfloat16", "float32")
      for runs, label in (("decoder", "decoder"), ("saved_model", "SavedModel"))),
    ("onmt_infer", "onmt-main infer", "opennmt_tf", "onmt_infer", {}),
    ("eole_predict", f"eole {eole_peer.EOLE_VERSION} predict", "eole", "eole_predict", {}),
    *((name, f"CTranslate2 {CT2_VERSIONS[runtime]} {compute_type}" + CT2_MODEL_LABELS[model],
       model, "ctranslate2", {"runtime": runtime, "compute_type": compute_type})
      for name, model, runtime, compute_type in (
          ("t2t_lite_ctranslate2_float32", "t2t_lite", "4.x", "float32"),
          ("t2t_lite_ctranslate2_int8", "t2t_lite", "4.x", "int8"),
          ("ctranslate2", "opennmt_tf", "peer", "float32"),
          ("ctranslate2_4_float32", "opennmt_tf", "4.x", "float32"),
          ("ctranslate2_4_int8", "opennmt_tf", "4.x", "int8"),
          ("ctranslate2_eole_4_float32", "eole", "4.x", "float32"),
          ("ctranslate2_eole_4_int8", "eole", "4.x", "int8"))))}
DECODER = "t2t_lite_decoder"
# The ratios' targets for t2t_lite's decoder and SavedModel: at least 3 times onmt-main infer
# and 2/3 of CTranslate2 3.24 float32 on OpenNMT-tf's model; 0.8 of CTranslate2 4.x float32 on
# it (issue 45); none against int8 and eole's rows.
TARGETS = {"onmt_infer": 3.0, "ctranslate2": 2 / 3, "ctranslate2_4_float32": 0.8}
# t2t_lite's CTranslate2 export against the peer's same-shape model in the same CTranslate2 and
# compute type (issue 45: at least 0.95 of its sentences/s), each with an absolute peak memory
# (MB) and load time (s) limit.
CT2_PAIR_TARGET = 0.95
CT2_LIMITS = {"peak_rss_mb": 250, "load_seconds": 0.5}
BFLOAT16 = {"t2t_lite_decoder_bfloat16": (DECODER, 1.3),
            "t2t_lite_saved_model_bfloat16": ("t2t_lite_saved_model", 1.3)}  # over float32
# Forced float32, for a model whose recorded mixed_precision is bfloat16 (trained with auto on
# a CPU with bfloat16 instructions): only when --contestants names them.
FLOAT32 = ("t2t_lite_decoder_float32", "t2t_lite_saved_model_float32")
# The default path against the old checkout and the features' costs (issue 52): (ours, theirs,
# the median sentences/s ratio's target).
OLD = "t2t_lite_decoder_old"
FEATURES = ("t2t_lite_decoder_nbest", "t2t_lite_decoder_scoring", "t2t_lite_decoder_interactive")
INTERACTIVE = "t2t_lite_decoder_interactive"
ISSUE_52_RATIOS = ((DECODER, OLD, 0.98), ("t2t_lite_decoder_nbest", DECODER, 0.9),
                   ("t2t_lite_decoder_scoring", DECODER, 5.0))
FIRST_ANSWER_LIMIT_SECONDS = 1.0  # the interactive decoder's first answer after its line
REFERENCE_ABOVE_SHUFFLED = 0.95  # pairs whose reference scores above a shuffled one
ENGINES_AGREE = 1e-3  # TensorFlow float32 against CTranslate2 float32, mean per piece
SHUFFLE_SEED = 52
# --peer_onednn -> onmt-main infer's TF_ENABLE_ONEDNN_OPTS (None: not set, TensorFlow 2.13's
# default for the CPU; it reads any other value, the empty one included, as that default).
PEER_ONEDNN = {"default": None, "on": "1", "off": "0"}

harness.define_data_flags(flags)
flags.DEFINE_string("t2t_lite_dir", None, "t2t_lite's trained output dir (checkpoints and "
                    "hparams.json: multi30k_recipe.py's or t2t_lite-trainer's).")
flags.DEFINE_string("t2t_lite_checkpoint", None, "The checkpoint to decode (default: "
                    "T/averaged/model.ckpt when there, else T's latest).")
flags.DEFINE_boolean("compare", False, "Race t2t_lite against the peers, not only its decoder.")
flags.DEFINE_list("contestants", None, "Any of " + ", ".join(CONTESTANTS) + " (default: "
                  f"{DECODER}; with --compare every one).")
harness.define_rounds_flags(flags, "/tmp/t2t_lite_decode_speed")
flags.DEFINE_integer("num_sentences", 1000, "Test sentences translated.", lower_bound=1)
flags.DEFINE_integer("batch_size", 32, "Sentences per batch.", lower_bound=1)
flags.DEFINE_integer("beam_size", 4, "Beam size of every contestant (1: greedy).",
                     lower_bound=1)
flags.DEFINE_float("alpha", 0.6, "Length penalty of every contestant (t2t_lite and OpenNMT-tf: "
                   "GNMT's ((5 + length) / 6)^alpha; eole: GNMT's, counting one token more; "
                   "CTranslate2: length^alpha).")
flags.DEFINE_integer("parallel_batches", 1, "Batches translated at once (t2t_lite's "
                     "decode_hparams; the SavedModel's client threads; CTranslate2's "
                     "inter_threads; not onmt-main infer's nor eole's), each with "
                     "--intra_op_parallelism_threads threads (0: t2t_lite-decoder's choice).",
                     lower_bound=1)
flags.DEFINE_integer("latency_sentences", 50, "The first this many sentences are also "
                     "translated one at a time (single-sentence latency).", lower_bound=1)
flags.DEFINE_string("peer_dir", None, "The OpenNMT-tf peer's work dir (its run.py's).")
flags.DEFINE_string("peer_checkpoint", None, "Its checkpoint to decode (default: "
                    "P/model/avg's when there, else P/model's latest).")
flags.DEFINE_string("peer_venv_dir", peer.DEFAULT_VENV_DIR, "OpenNMT-tf's environment (its "
                    "run.py's --venv_dir).")
flags.DEFINE_string("peer_python", None, "Python 3.10 or 3.11 to create it (and CTranslate2 "
                    "4.x's) with.")
flags.DEFINE_enum("peer_onednn", "default", list(PEER_ONEDNN), "TensorFlow's oneDNN in onmt-main "
                  "infer: default (TF_ENABLE_ONEDNN_OPTS not set: TensorFlow 2.13's choice for "
                  "this CPU, as OpenNMT-tf's users get it), on or off.")
flags.DEFINE_integer("peer_length_bucket_width", peer.INFER_LENGTH_BUCKET_WIDTH,
                     "onmt-main infer's infer.length_bucket_width (OpenNMT-tf's default 5).",
                     lower_bound=1)
flags.DEFINE_string("ctranslate2_venv_dir", ctranslate2_runtime.DEFAULT_VENV_DIR,
                    "CTranslate2 4.x's environment (peers/ctranslate2_runtime.py).")
flags.DEFINE_string("eole_dir", None, "The eole peer's work dir (its run.py's).")
flags.DEFINE_string("eole_model", None, "Its model to decode (default: E/model/avg when "
                    "newer than E's last model/step_N, else that step_N).")
flags.DEFINE_string("eole_ctranslate2_dir", None, "eole's model converted by its run.py "
                    "--ctranslate2_dir (default: converted into W/eole_ctranslate2).")
flags.DEFINE_string("eole_venv_dir", eole_peer.DEFAULT_VENV_DIR, "eole's environment (its "
                    "run.py's --venv_dir).")
flags.DEFINE_string("eole_python", None, "Python 3.11 to create it with.")
flags.DEFINE_string("old_checkout", None, "An older checkout of t2t_lite: race the decoder against "
                    "its benchmarks/decode_child.py (the same job) under --old_python, and "
                    "compare their translations.")
flags.DEFINE_string("old_python", None, "The Python of --old_checkout's environment (its "
                    "t2t_lite installed).")
flags.DEFINE_boolean("feature_costs", False, "Also race the decoder's n-best list (num_hypotheses "
                     "= beam size), its scoring of the references and its interactive mode "
                     "against the 1-best, and check its scores (a reference above a shuffled "
                     "one; TensorFlow float32 against CTranslate2 float32).")
flags.DEFINE_integer("interactive_sentences", 6, "Sentences the interactive decoder answers "
                     "each round (the first's latency, the others' median).", lower_bound=2)
common.define_thread_flags()
flags.mark_flags_as_required(["data_dir", "t2t_lite_dir"])
flags.register_multi_flags_validator(
    ["old_checkout", "old_python"], lambda given: bool(given["old_python"]) or not given[
        "old_checkout"], "--old_checkout needs --old_python (its environment's Python)")
flags.register_validator("contestants", lambda names: set(names or ()) <= set(CONTESTANTS),
                         "of " + ", ".join(CONTESTANTS))


def intra_op_threads() -> int:
    """t2t_lite's intra-op threads: the flag, else what t2t_lite-decoder chooses."""
    return FLAGS.intra_op_parallelism_threads or decoder.intra_op_threads_for(
        decoder.TranslatorHParams(batch_size=FLAGS.batch_size,
                                  parallel_batches=FLAGS.parallel_batches), FLAGS.num_sentences)


def running(entries: dict, names) -> list:
    """Those of `names` in the race and not left out."""
    return [name for name in names if name in entries and not entries[name].get("dropped")]


def drop(entries: dict, names, reason: str):
    names = running(entries, names)
    for name in names:
        entries[name]["dropped"] = reason
    if names:
        print(f"left out: {', '.join(entries[name]['name'] for name in names)}: {reason}",
              flush=True)


def of_model(model: str, runs: str = None) -> list:
    return [name for name, c in CONTESTANTS.items()
            if c.model == model and (runs is None or c.runs == runs)]


def write_job(name: str, setup: dict, sources: list, encoders: dict) -> str:
    """decode_child.py's job for a t2t_lite contestant: its settings, the sentences and the
    SavedModel client's batches (the decoder's order: sorted by their number of tokens)."""
    contestant = CONTESTANTS[name]
    order = sorted(range(len(sources)), key=lambda i: len(encoders["inputs"].encode(sources[i])))
    job = {"kind": contestant.runs, "sources": sources, "latency_sentences":
           FLAGS.latency_sentences, "batches": [order[i:i + FLAGS.batch_size]
                                                for i in range(0, len(order), FLAGS.batch_size)],
           "data_dir": FLAGS.data_dir, "t2t_lite_dir": FLAGS.t2t_lite_dir,
           "checkpoint": setup["t2t_lite_checkpoint"], "export_dir": export_dir(name),
           "beam_size": FLAGS.beam_size, "alpha": FLAGS.alpha, "batch_size": FLAGS.batch_size,
           "parallel_batches": FLAGS.parallel_batches, "intra_op_threads": intra_op_threads(),
           "intra_op_flag": FLAGS.intra_op_parallelism_threads,
           "inter_op_threads": FLAGS.inter_op_parallelism_threads,
           "stop_after_finished": FLAGS.beam_size if contestant.ct2_stop else 0,
           "jit_compile": contestant.jit_compile,
           "mixed_precision": contestant.mixed_precision,
           "num_hypotheses": FLAGS.beam_size if contestant.runs == "decoder_nbest" else 1,
           "targets": setup["references"] if contestant.runs == "decoder_scoring" else None}
    path = os.path.join(FLAGS.work_dir, f"{name}.job.json")
    harness.write_json(path, job, announce=False)
    return path


def export_dir(name: str) -> str:
    return os.path.join(FLAGS.work_dir, name.replace("t2t_lite_", ""))


def export_saved_model(name: str, setup: dict) -> float:
    """t2t_lite-exporter into the SavedModel's folder in W (replaced); returns its wall time."""
    contestant, start = CONTESTANTS[name], time.time()
    stop = FLAGS.beam_size if contestant.ct2_stop else 0
    print(f"exporting the SavedModel to {export_dir(name)}", flush=True)
    harness.run_logged([
        *harness.t2t_lite_command("exporter"), f"--data_dir={FLAGS.data_dir}",
        f"--output_dir={FLAGS.t2t_lite_dir}", f"--export_dir={export_dir(name)}",
        f"--checkpoint_path={setup['t2t_lite_checkpoint']}", "--overwrite",
        f"--decode_hparams=beam_size={FLAGS.beam_size},alpha={FLAGS.alpha},"
        f"stop_after_finished={stop}", f"--export_jit_compile={contestant.jit_compile}",
        *[f"--hparams=mixed_precision={contestant.mixed_precision}"] * bool(
            contestant.mixed_precision)],
        export_dir(name) + ".log")
    return time.time() - start


def export_ctranslate2(entries: dict, sources: list, setup: dict):
    """t2t_lite-exporter --format=ctranslate2 of t2t_lite's checkpoint, once per quantization
    that a running contestant needs (its compute type), into W/t2t_lite_ctranslate2_<type>
    (replaced), and the raw source and latency sentences beside them, into
    setup["t2t_lite_ctranslate2"]. A failed export leaves its contestants out."""
    names = running(entries, of_model("t2t_lite", "ctranslate2"))
    if not names:
        return
    hparams = saved_run(FLAGS.t2t_lite_dir)["hparams"]
    folder = os.path.join(FLAGS.work_dir, "t2t_lite_ctranslate2")
    os.makedirs(folder, exist_ok=True)
    export = setup["t2t_lite_ctranslate2"] = {
        "source": os.path.join(folder, "source.txt"),
        "latency_source": os.path.join(folder, "latency.txt"),
        # the peer's configuration's one limit: t2t_lite's max_length + extra_length
        "max_decoding_length": hparams.max_length + peer.DECODE.extra_length,
        "models": {}, "export_seconds": {}, "model_bin_mb": {}}
    output_files.write_lines(export["source"], sources)
    output_files.write_lines(export["latency_source"], sources[:FLAGS.latency_sentences])
    for quantization in sorted({CONTESTANTS[name].compute_type for name in names}):
        model_dir, start = f"{folder}_{quantization}", time.time()
        shutil.rmtree(model_dir, ignore_errors=True)  # replaced: an export of this run only
        print(f"exporting t2t_lite's model to CTranslate2 ({quantization}) in {model_dir}",
              flush=True)
        try:
            harness.run_logged([
                *harness.t2t_lite_command("exporter"), "--format=ctranslate2",
                f"--quantization={quantization}", f"--data_dir={FLAGS.data_dir}",
                f"--output_dir={FLAGS.t2t_lite_dir}", f"--export_dir={model_dir}",
                f"--checkpoint_path={setup['t2t_lite_checkpoint']}"], model_dir + ".log")
        except harness.ChildFailed as error:
            drop(entries, [name for name in names if CONTESTANTS[name].compute_type ==
                           quantization], f"t2t_lite-exporter --format=ctranslate2 failed: {error}")
            continue
        export["models"][quantization] = model_dir
        export["export_seconds"][quantization] = time.time() - start
        export["model_bin_mb"][quantization] = os.path.getsize(
            os.path.join(model_dir, "model.bin")) / 2**20


# Each environment: what it is, its Pythons, its model's folder flag (None: any), its folder and
# Python flags, its module (with ensure_environment) and the contestants that need it.
ENVIRONMENTS = {
    "opennmt_tf": ("OpenNMT-tf's TensorFlow", "3.10 or 3.11", "peer_dir", "peer_venv_dir",
                   "peer_python", peer, of_model("opennmt_tf")),
    "eole": ("eole's environment", "3.11", "eole_dir", "eole_venv_dir", "eole_python",
             eole_peer, of_model("eole")),
    "ctranslate2": ("CTranslate2 4.x's environment", "3.10 or 3.11", None, "ctranslate2_venv_dir",
                    "peer_python", ctranslate2_runtime,
                    [name for name, c in CONTESTANTS.items() if c.runtime == "4.x"]),
}


def environment_python(entries: dict, key: str):
    """The Python of ENVIRONMENTS[key], made when missing, if any of its contestants runs, else
    None; also None, with them left out, without the flag of their model's folder or when the
    environment cannot be made (no Python for it: the peers' NO_PYTHON_EXIT_STATUS)."""
    what, pythons, folder_flag, venv_flag, python_flag, module, names = ENVIRONMENTS[key]
    if not running(entries, names):
        return None
    if folder_flag and not getattr(FLAGS, folder_flag):
        return drop(entries, names, f"no --{folder_flag} given")
    try:
        return module.ensure_environment(os.path.expanduser(getattr(FLAGS, venv_flag)),
                                         getattr(FLAGS, python_flag))
    except SystemExit as exit_:
        if exit_.code != harness.NO_PYTHON_EXIT_STATUS:
            raise
        drop(entries, names, f"no Python {pythons} for {what} (see above)")
    except (peer.PeerError, harness.ChildFailed) as error:
        drop(entries, names, f"{what}: {error}")
    return None


def prepare_peer(entries: dict, sources: list, setup: dict):
    """The OpenNMT-tf peer's environment, decode.yml, tokens and CTranslate2 model, into
    `setup`."""
    python = environment_python(entries, "opennmt_tf")
    if not python:
        return
    setup.update(peer.prepare_decoding(
        python, os.path.abspath(FLAGS.peer_dir), setup["pieces"],
        os.path.join(FLAGS.work_dir, "peer"), sources, sources[:FLAGS.latency_sentences],
        FLAGS.beam_size, FLAGS.alpha, FLAGS.batch_size, FLAGS.peer_length_bucket_width,
        FLAGS.peer_checkpoint))
    setup.update(venv_python=python, versions=peer.installed_versions(python))
    setup["ctranslate2_pythons"]["peer"] = python
    print(f"the peer's checkpoint: {setup['checkpoint']}", flush=True)
    converted = running(entries, of_model("opennmt_tf", "ctranslate2"))
    if converted:
        model_dir = os.path.join(FLAGS.work_dir, "ctranslate2")
        try:
            setup["convert_seconds"] = peer.convert_to_ctranslate2(python, setup, model_dir)
            setup["ctranslate2_models"]["opennmt_tf"] = model_dir
        except (peer.PeerError, harness.ChildFailed) as error:
            drop(entries, converted, f"the conversion failed: {error}")


def prepare_eole(entries: dict, sources: list, setup: dict):
    """eole's environment, its decoding inputs (W/eole: its run.py's `prepare_decoding`) and
    CTranslate2 model, into setup["eole"]."""
    python = environment_python(entries, "eole")
    if not python:
        return
    eole = setup["eole"] = {"python": python, "versions": eole_peer.installed_versions(python),
                            **eole_peer.prepare_decoding(
        os.path.abspath(FLAGS.eole_dir), setup["pieces"], os.path.join(FLAGS.work_dir, "eole"),
        sources, sources[:FLAGS.latency_sentences], FLAGS.beam_size, FLAGS.alpha,
        FLAGS.batch_size, FLAGS.eole_model)}
    print(f"eole's model: {eole['model']}", flush=True)
    converted = running(entries, of_model("eole", "ctranslate2"))
    model_dir = os.path.abspath(FLAGS.eole_ctranslate2_dir or os.path.join(FLAGS.work_dir,
                                                                           "eole_ctranslate2"))
    if not converted:
        return
    if FLAGS.eole_ctranslate2_dir and not os.path.exists(os.path.join(model_dir, "model.bin")):
        return drop(entries, converted, f"no model.bin in --eole_ctranslate2_dir={model_dir}")
    eole["ctranslate2"] = {"ctranslate2_dir": model_dir, "converted_here": False}
    if not FLAGS.eole_ctranslate2_dir:
        try:
            eole["ctranslate2"] = {**eole_peer.convert_to_ctranslate2(
                python, eole["model"], model_dir, eole["versions"]["ctranslate2"]),
                "converted_here": True}
        except (peer.PeerError, harness.ChildFailed) as error:
            return drop(entries, converted, f"the conversion failed: {error}")
    setup["ctranslate2_models"]["eole"] = model_dir


def prepare_ctranslate2(entries: dict, setup: dict):
    """CTranslate2 4.x's environment (created on first use) for its contestants still in the
    race, and each runtime's version."""
    python = environment_python(entries, "ctranslate2")
    if python:
        setup["ctranslate2_pythons"]["4.x"] = python
    setup["ctranslate2_versions"] = {
        runtime: ctranslate2_runtime.installed_version(python)
        for runtime, python in setup["ctranslate2_pythons"].items()}


def command_and_environment(name: str, setup: dict, output: str) -> tuple:
    """The contestant-round's command and environment: t2t_lite's kernels (this process's
    environment) for t2t_lite; --peer_onednn's TF_ENABLE_ONEDNN_OPTS for the peers, whatever
    the caller's shell has; CT2_VERBOSE=1 for CTranslate2, whose load log names the CPU, the
    instruction set and the matrix product backends (ctranslate2_runtime.logged_cpu)."""
    contestant = CONTESTANTS[name]
    threads = (FLAGS.intra_op_parallelism_threads, FLAGS.inter_op_parallelism_threads)
    environment = harness.child_environment({harness.ONEDNN: PEER_ONEDNN[FLAGS.peer_onednn]})
    if contestant.old:
        return [FLAGS.old_python, os.path.join(FLAGS.old_checkout, "benchmarks",
                                               "decode_child.py"), setup["jobs"][name],
                output], dict(os.environ)
    if contestant.runs in CHILD_KINDS:
        return [sys.executable, CHILD, setup["jobs"][name], output], dict(os.environ)
    if contestant.runs == "onmt_infer":
        return peer.infer_command(setup["venv_python"], setup, output, *threads), environment
    if contestant.runs == "eole_predict":
        eole = setup["eole"]
        return eole_decode.command(eole["python"], eole["config"], output,
                                   eole["latency_source"], *threads), environment
    if contestant.model == "t2t_lite":  # raw text through the export's sentencepiece.model
        inputs = setup["t2t_lite_ctranslate2"]
        model_dir = inputs["models"][contestant.compute_type]
        sentencepiece_model = os.path.join(model_dir, "sentencepiece.model")
    else:  # tokens, length limit
        inputs = setup["eole"] if contestant.model == "eole" else setup
        model_dir, sentencepiece_model = setup["ctranslate2_models"][contestant.model], None
    return peer.ctranslate2_command(
        setup["ctranslate2_pythons"][contestant.runtime], inputs, model_dir, output,
        FLAGS.beam_size, FLAGS.alpha, FLAGS.batch_size, threads[0], FLAGS.parallel_batches,
        contestant.compute_type, sentencepiece_model), {**environment, "CT2_VERBOSE": "1"}


def run_round(entry: dict, round_index: int, setup: dict, encoders: dict,
              references: list) -> dict:
    """One contestant-round: its process (output and log in W/round<R>_<name>), then its rates,
    output length and BLEU from its translations (target tokens: the SentencePiece pieces of
    each translation + end of sentence, counted alike for all), and its times from just before
    its process started: to the model loaded (`ready_at`) and to the first pass written."""
    name, started = entry["key"], time.time()
    contestant = CONTESTANTS[name]
    stem = os.path.join(FLAGS.work_dir, f"round{round_index + 1}_{name}")
    if contestant.runs == "interactive":
        return run_interactive_round(stem, setup)
    output = stem + (".txt" if contestant.model == "t2t_lite" else ".tokens")
    command, environment = command_and_environment(name, setup, output)
    result = harness.run_child(command, environment, "CONTESTANT" if contestant.runs in
                               CHILD_KINDS else "DECODE", stem + ".log")
    if contestant.model == "eole":  # as eole's run.py detokenizes its output
        lines = eole_peer.output_hypotheses(output, setup["pieces"])
    else:
        lines = decoder.read_sentences(output)
    if contestant.model == "opennmt_tf":
        lines = [setup["pieces"].decode(line) for line in lines]
    if len(lines) != len(references):
        raise RuntimeError(f"{entry['name']} wrote {len(lines)} lines to {output}, not "
                           f"{len(references)}")
    if contestant.runs == "ctranslate2":
        with open(stem + ".log", encoding="utf-8", errors="replace") as log:
            result["ctranslate2_cpu"] = ctranslate2_runtime.logged_cpu(log.read())
    if contestant.runs == "decoder_scoring":  # score lines: the target pieces they scored
        tokens, bleu = sum(pieces for _, pieces in filter(None, decode_costs.read_scores(
            lines))), None
    else:
        tokens = sum(len(encoders["targets"].encode(line)) + 1 for line in lines)
        bleu = decoder.score(lines, references)["bleu"]
    latencies = sorted(result["latency_seconds"])
    result.update(sentences_per_s=len(lines) / result["seconds"],
                  target_tokens_per_s=tokens / result["seconds"],
                  mean_output_tokens=tokens / len(lines), bleu=bleu,
                  latency_median_ms=1000 * statistics.median(latencies),
                  latency_p90_ms=1000 * latencies[int(0.9 * (len(latencies) - 1))],
                  load_seconds=result["ready_at"] - started,
                  end_to_end_seconds=result["written_at"] - started,
                  process_seconds=time.time() - started)
    result["end_to_end_sentences_per_s"] = len(lines) / result["end_to_end_seconds"]
    print("  " + ", ".join(f"{name} {result[key]:{spec}}" for name, key, spec in (
        ("sentences/s", "sentences_per_s", ".2f"), ("e2e s", "end_to_end_seconds", ".1f"),
        ("BLEU", "bleu", ".2f"), ("MB", "peak_rss_mb", ".0f"), ("timed s", "seconds", ".1f"),
        ("CPU-s", "cpu_seconds", ".1f"), ("passes differ", "passes_differ", "d"))
        if result[key] is not None), flush=True)
    return result


def decoder_command(setup: dict, *arguments) -> list:
    """t2t_lite-decoder on the benchmark's checkpoint and data, with `arguments`."""
    return [*harness.t2t_lite_command("decoder"), f"--data_dir={FLAGS.data_dir}",
            f"--output_dir={FLAGS.t2t_lite_dir}",
            f"--checkpoint_path={setup['t2t_lite_checkpoint']}", *arguments]


def run_interactive_round(stem: str, setup: dict) -> dict:
    """One round of t2t_lite-decoder --decode_interactive (decode_costs.interactive_answers) on
    the first --interactive_sentences sentences, beam and alpha as the others; its stderr in
    W/round<R>_<name>.log."""
    result = decode_costs.interactive_answers(
        decoder_command(setup, "--decode_interactive", f"--decode_hparams=beam_size={FLAGS.beam_size},"
                        f"alpha={FLAGS.alpha},batch_size={FLAGS.batch_size}",
                        *harness.thread_flags(FLAGS.intra_op_parallelism_threads,
                                              FLAGS.inter_op_parallelism_threads)),
        setup["sources"][:FLAGS.interactive_sentences], stem + ".log")
    result.update(decode_costs.answer_summary(result["latency_seconds"]))
    print(f"  ready after {result['ready_seconds']:.1f} s; first answer "
          f"{result['first_answer_seconds']:.3f} s, the others' median "
          f"{result['other_answers_median_seconds']:.3f} s", flush=True)
    return result


def summarize(entry: dict):
    """Medians over the rounds the contestant ran (None if none)."""
    ran = [result for result in entry["rounds"] if result]
    if not ran:
        return None
    if entry["key"] == INTERACTIVE:
        return {**harness.medians(ran, ("ready_seconds", "first_answer_seconds",
                                        "other_answers_median_seconds")),
                "rounds": len(ran), **{f"{key}_spread": harness.spread(
                    r[key] for r in ran) for key in ("first_answer_seconds",
                                                     "other_answers_median_seconds")},
                "first_answer_per_round": harness.per_round(entry, "first_answer_seconds")}
    summary = harness.medians(ran, (
        "sentences_per_s", "end_to_end_sentences_per_s", "target_tokens_per_s",
        "mean_output_tokens", "bleu", "load_seconds", "end_to_end_seconds",
        "first_pass_seconds", "peak_rss_mb", "latency_median_ms", "process_seconds",
        "cpu_seconds", "seconds"))
    rates = harness.spread(r["sentences_per_s"] for r in ran)
    summary.update(min=rates["min"], max=rates["max"], rounds=len(ran),
                   per_round=harness.per_round(entry, "sentences_per_s"),
                   end_to_end_per_round=harness.per_round(entry, "end_to_end_sentences_per_s"),
                   bleu_per_round=harness.per_round(entry, "bleu"),
                   cpu_per_wall_per_round=[r["cpu_seconds"] / r["seconds"] if r else None
                                           for r in entry["rounds"]],
                   passes_differ=max(r.get("passes_differ", 0) for r in ran),
                   onednn=sorted({r["onednn"] for r in ran if "onednn" in r}))
    summary.update({key: ran[-1][key] for key in (
        "versions", "compute_type", "effective_compute_type", "ctranslate2_cpu", "tf_threads",
        "torch_threads") if key in ran[-1]})
    return summary


def ratio_pairs(names) -> list:
    """(ours, theirs, target or None) of the contestants `names`: t2t_lite's float32 decoder and
    SavedModel contestants over each peer's, t2t_lite's CTranslate2 export over each peer's
    model in the same CTranslate2 runtime and compute type, and bfloat16 over float32."""
    pairs = [(ours, theirs, TARGETS.get(theirs)) for ours in names
             if CONTESTANTS[ours].model == "t2t_lite" and CONTESTANTS[ours].runs in TRANSLATING
             and ours not in BFLOAT16 and not CONTESTANTS[ours].old
             for theirs in names if CONTESTANTS[theirs].model != "t2t_lite"]
    engine = {name: (c.runtime, c.compute_type) for name, c in CONTESTANTS.items()}
    pairs += [(ours, theirs, CT2_PAIR_TARGET if CONTESTANTS[theirs].model == "opennmt_tf"
               else None) for ours in of_model("t2t_lite", "ctranslate2") if ours in names
              for theirs in names if CONTESTANTS[theirs].model != "t2t_lite"
              and CONTESTANTS[theirs].runs == "ctranslate2" and engine[theirs] == engine[ours]]
    pairs += [(ours, theirs, target) for ours, (theirs, target) in BFLOAT16.items()
              if ours in names]
    pairs += [pair for pair in ISSUE_52_RATIOS if pair[0] in names and pair[1] in names]
    return pairs


def ratios(entries: dict) -> list:
    """ratio_pairs of the contestants in the race: sentences/s round by round with the target
    (None: none), the median ratios of target tokens/s (the fairer one when the outputs differ
    in length) and of end-to-end sentences/s, and the BLEU difference."""
    pairs = ratio_pairs(list(entries))
    result = []
    for a, b, target in ((entries.get(ours), entries.get(theirs), target)
                         for ours, theirs, target in pairs):
        if not (a and b and any(a["rounds"]) and any(b["rounds"])):
            continue
        each = harness.ratio(a, b, "sentences_per_s")
        result.append({**each, "target": target,
                       "met": None if None in (each["median"], target)
                       else each["median"] >= target,
                       "target_tokens_median": harness.ratio(a, b, "target_tokens_per_s")[
                           "median"],
                       "end_to_end_median": harness.ratio(a, b, "end_to_end_sentences_per_s")[
                           "median"], "bleu_difference": None if None in (
                           a["summary"]["bleu"], b["summary"]["bleu"]) else a["summary"][
                           "bleu"] - b["summary"]["bleu"]})
    return result


def memory_targets(entries: dict) -> list:
    """Each t2t_lite decoder and SavedModel contestant's peak memory against onmt-main infer's
    (medians over rounds)."""
    theirs = entries.get("onmt_infer", {}).get("summary")
    return [{"contestant": entry["name"], "peak_rss_mb": ours["peak_rss_mb"],
             "onmt_infer_peak_rss_mb": theirs["peak_rss_mb"],
             "met": ours["peak_rss_mb"] <= theirs["peak_rss_mb"]}
            for name, entry in entries.items() if theirs and CONTESTANTS[name].model ==
            "t2t_lite" and CONTESTANTS[name].runs in TRANSLATING
            for ours in [entry["summary"]] if ours]


def limit_targets(entries: dict) -> list:
    """t2t_lite's CTranslate2 export's peak memory and load time (medians over rounds) against
    CT2_LIMITS."""
    return [{"contestant": entry["name"], "key": key, "value": summary[key], "limit": limit,
             "met": summary[key] <= limit}
            for name, entry in entries.items() if CONTESTANTS[name].model == "t2t_lite"
            and CONTESTANTS[name].runs == "ctranslate2"
            for summary in [entry["summary"]] if summary for key, limit in CT2_LIMITS.items()]


def print_tables(result: dict):
    threads = result["threads"]
    print(f"\n{PROBLEM} test_2016_flickr, first {FLAGS.num_sentences} sentences; beam "
          f"{FLAGS.beam_size}, alpha {FLAGS.alpha:g}, batches of {FLAGS.batch_size}, "
          f"{threads['parallel_batches']} at once; threads intra/inter {threads['intra_op']}/"
          f"{threads['inter_op']} (0: TensorFlow's choice; onmt-main infer and eole predict: "
          f"the flags' {FLAGS.intra_op_parallelism_threads}/{FLAGS.inter_op_parallelism_threads}"
          f", one batch at a time; CTranslate2 intra/inter_threads "
          f"{threads['ctranslate2'][0]}/{threads['ctranslate2'][1]}); {FLAGS.rounds} rounds in "
          f"turn, each contestant-round in its own process; "
          f"{harness.machine_line(result['machine'])}")
    rows = [[entry["name"], f"{s['sentences_per_s']:.2f}", f"{s['min']:.2f}-{s['max']:.2f}",
             f"{s['end_to_end_sentences_per_s']:.2f}", f"{s['target_tokens_per_s']:.0f}",
             f"{s['mean_output_tokens']:.1f}", fmt(s['bleu'], ".2f"), f"{s['load_seconds']:.1f}",
             f"{s['end_to_end_seconds']:.1f}", f"{s['peak_rss_mb']:.0f}",
             f"{s['latency_median_ms']:.0f}", "/".join("on" if on else "off"
                                                       for on in s["onednn"]) or "-"]
            for entry in result["contestants"] for s in [entry["summary"]]
            if s and entry["key"] != INTERACTIVE]
    print(harness.table(["contestant", "sent/s", "min-max", "e2e sent/s", "tgt tok/s",
                         "out len", "BLEU", "load s", "e2e s", "peak MB", "latency ms",
                         "oneDNN"], rows))
    for entry in result["contestants"]:
        s = entry["summary"] or {}
        if not entry["summary"]:
            print(f"left out: {entry['name']}: {entry.get('dropped')}")
        if s.get("passes_differ"):
            print(f"{entry['name']}: its two passes differ in up to {s['passes_differ']} "
                  f"translations")
        if s.get("ctranslate2_cpu"):
            print(f"{entry['name']}: compute type {s.get('effective_compute_type')} (asked "
                  f"{s.get('compute_type')}); " + ", ".join(
                      f"{key} {value}" for key, value in s["ctranslate2_cpu"].items()
                      if key != "compute_type"))
    versions = {**{k: v for k, v in result["peer_versions"].items() if k != "ctranslate2"},
                **{f"ctranslate2 ({k})": v for k, v in result["ctranslate2_versions"].items()},
                **{k: v for k, v in result["eole_versions"].items() if k in ("eole", "torch")}}
    print("medians over rounds (min-max of sentences/s); sent/s: the second of two passes in "
          "the same process; e2e: from the process's start to the first pass written (imports, "
          "loading, tracing or compiling included); load s: to the model loaded; target tokens: "
          "the output's SentencePiece pieces + end of sentence; peak MB: the process's peak "
          f"resident memory; latency: median of the first {FLAGS.latency_sentences} sentences "
          "each alone; t2t_lite's decoder and SavedModel without a precision in their label: "
          f"the model's recorded mixed_precision, {result['t2t_lite_mixed_precision']}"
          + "".join(f"; {k}: {v}" for k, v in versions.items()) + "\n")
    if result["ratios"]:
        print(harness.table(["sentences/s ratio, same round", "median", "min", "max", "target",
                             "met", "tok/s", "e2e", "BLEU", "per round  "], [
            [*harness.ratio_cells(r), "-" if r["target"] is None else f">= {r['target']:.2f}",
             {None: "-", True: "yes", False: "no"}[r["met"]],
             fmt(r["target_tokens_median"], ".2f"), fmt(r["end_to_end_median"], ".2f"),
             fmt(r['bleu_difference'], "+.2f"),
             " ".join(fmt(value, ".2f") for value in r["per_round"])]
            for r in result["ratios"]]))
        print("median, min, max: of the ratios within each round; tok/s, e2e: the median ratios "
              "of target tokens/s and of end-to-end sentences/s; BLEU: the first's less the "
              "second's (bfloat16's target: within 0.3); t2t_lite's TensorFlow contestants: no "
              "target against int8 nor eole's rows; CTranslate2 (t2t_lite): t2t_lite's "
              "CTranslate2 export against the peers' models in the same CTranslate2 and compute "
              "type")
    for target in result["memory_targets"]:
        print(f"peak memory: {target['contestant']} {target['peak_rss_mb']:.0f} MB, onmt-main "
              f"infer {target['onmt_infer_peak_rss_mb']:.0f} MB (target: at most OpenNMT-tf's): "
              f"{'met' if target['met'] else 'not met'}")
    for target in result.get("limit_targets", []):
        what, unit, spec = {"peak_rss_mb": ("peak memory", "MB", ".0f"),
                            "load_seconds": ("load", "s", ".2f")}[target["key"]]
        print(f"{what}: {target['contestant']} {target['value']:{spec}} {unit} (target: at most "
              f"{target['limit']:g} {unit}): {'met' if target['met'] else 'not met'}")


def checkout_commit(folder: str):
    """The commit a checkout has out (None without a folder or git)."""
    if not folder:
        return None
    found = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True,
                           text=True)
    return found.stdout.strip() or None if found.returncode == 0 else None


def old_translations_differ(entries: dict) -> list:
    """Per round, the lines in which the old checkout's translations differ from the decoder's
    of the same round (harness.differing_lines; None where either did not run)."""
    if OLD not in entries or DECODER not in entries:
        return []
    return [harness.differing_lines(*(decoder.read_sentences(os.path.join(
        FLAGS.work_dir, f"round{i + 1}_{name}.txt")) for name in (DECODER, OLD)))
        if new and old else None
        for i, (new, old) in enumerate(zip(entries[DECODER]["rounds"], entries[OLD]["rounds"]))]


def score_file(setup: dict, name: str, targets_path: str, *engine) -> list:
    """t2t_lite-decoder --score_targets of the sources against `targets_path` into W/<name>.txt
    (its log beside), with `engine`'s flags; its scores (decode_costs.read_scores)."""
    output = os.path.join(FLAGS.work_dir, name + ".txt")
    command = [*harness.t2t_lite_command("decoder"), f"--data_dir={FLAGS.data_dir}",
               f"--decode_from_file={setup['sources_path']}", f"--score_targets={targets_path}",
               f"--decode_to_file={output}", f"--decode_hparams=batch_size={FLAGS.batch_size}",
               *engine]
    print(f"scoring: {name}", flush=True)
    harness.run_logged(command, os.path.join(FLAGS.work_dir, name + ".log"))
    with open(output, encoding="utf-8") as handle:
        return decode_costs.read_scores(handle.read().splitlines())


def score_checks(setup: dict) -> dict:
    """The checks of the model's scores on the test pairs: each reference against a shuffled
    one (decode_costs.derangement; TensorFlow in float32), and TensorFlow float32 against
    t2t_lite-exporter --format=ctranslate2 --quantization=float32 through CTranslate2, both
    through t2t_lite-decoder --score_targets."""
    references = setup["references"]
    order = decode_costs.derangement(len(references), SHUFFLE_SEED)
    shuffled_path = os.path.join(FLAGS.work_dir, "shuffled_references.txt")
    output_files.write_lines(shuffled_path, [references[i] for i in order])
    model_dir = os.path.join(FLAGS.work_dir, "scoring_ctranslate2_float32")
    shutil.rmtree(model_dir, ignore_errors=True)
    print(f"exporting t2t_lite's model to CTranslate2 (float32) in {model_dir}", flush=True)
    harness.run_logged([
        *harness.t2t_lite_command("exporter"), "--format=ctranslate2", "--quantization=float32",
        f"--data_dir={FLAGS.data_dir}", f"--output_dir={FLAGS.t2t_lite_dir}",
        f"--export_dir={model_dir}", f"--checkpoint_path={setup['t2t_lite_checkpoint']}"],
        model_dir + ".log")
    tensorflow = [f"--output_dir={FLAGS.t2t_lite_dir}", "--hparams=mixed_precision=float32",
                  f"--checkpoint_path={setup['t2t_lite_checkpoint']}"]
    ctranslate2 = [f"--ctranslate2_model={model_dir}"]
    scores = {f"{engine}_{targets}": score_file(setup, f"scores_{engine}_{targets}", path, *flags)
              for engine, flags in (("tensorflow_float32", tensorflow),
                                    ("ctranslate2_float32", ctranslate2))
              for targets, path in (("references", setup["references_path"]),
                                    ("shuffled", shuffled_path))}
    preference = decode_costs.reference_preference(scores["tensorflow_float32_references"],
                                                   scores["tensorflow_float32_shuffled"])
    agreement = {targets: decode_costs.score_agreement(
        scores[f"tensorflow_float32_{targets}"], scores[f"ctranslate2_float32_{targets}"])
        for targets in ("references", "shuffled")}
    return {"shuffle_seed": SHUFFLE_SEED, "reference_preference": preference,
            "ctranslate2_preference": decode_costs.reference_preference(
                scores["ctranslate2_float32_references"], scores["ctranslate2_float32_shuffled"]),
            "engine_agreement": agreement,
            "max_mean_difference": max(a["max_mean_difference"] for a in agreement.values())}


def issue_52_targets(result: dict, entries: dict) -> list:
    """Each of issue 52's figures with its target and whether it is met: the ratios of
    ISSUE_52_RATIOS, the old checkout's peak memory and translations, the interactive first
    answer and the score checks (those that ran)."""
    rows = []

    def add(figure, value, spread, target, met, unit=""):
        rows.append({"figure": figure, "value": value, "spread": spread, "target": target,
                     "met": met, "unit": unit})
    for r in result["ratios"]:
        pair = next((p for p in ISSUE_52_RATIOS if (CONTESTANTS[p[0]].label, CONTESTANTS[p[1]]
                                                    .label) == (r["numerator"],
                                                                r["denominator"])), None)
        if pair:
            add(f"sentences/s {pair[0]} / {pair[1]}", r["median"], [r["min"], r["max"]],
                f">= {pair[2]:g}", r["met"])
    new, old = (entries.get(name, {}).get("summary") for name in (DECODER, OLD))
    if new and old:
        add("peak MB new (old)", new["peak_rss_mb"], [old["peak_rss_mb"]], "<= old",
            new["peak_rss_mb"] <= old["peak_rss_mb"], " MB")
        differ = [d for d in result["old_translations_differ"] if d is not None]
        add("lines whose translation differs new/old (max over rounds)", max(differ), None,
            "0", max(differ) == 0, " lines")
    interactive = entries.get(INTERACTIVE, {}).get("summary")
    if interactive:
        spread = interactive["first_answer_seconds_spread"]
        add("interactive first answer", interactive["first_answer_seconds"],
            [spread["min"], spread["max"]], f"< {FIRST_ANSWER_LIMIT_SECONDS:g} s",
            interactive["first_answer_seconds"] < FIRST_ANSWER_LIMIT_SECONDS, " s")
        spread = interactive["other_answers_median_seconds_spread"]
        add("interactive other answers (median)", interactive["other_answers_median_seconds"],
            [spread["min"], spread["max"]], "-", None, " s")
    checks = result.get("score_checks")
    if checks:
        preference = checks["reference_preference"]
        add("reference above shuffled, mean per piece (TF float32)", preference["mean_above"],
            None, f">= {REFERENCE_ABOVE_SHUFFLED:g}",
            preference["mean_above"] >= REFERENCE_ABOVE_SHUFFLED)
        add("reference above shuffled, sum (TF float32)", preference["sum_above"], None, "-",
            None)
        add("max |mean per piece difference| TF float32 / CT2 float32",
            checks["max_mean_difference"], None, f"<= {ENGINES_AGREE:g}",
            checks["max_mean_difference"] <= ENGINES_AGREE)
    return rows


def print_issue_52(rows: list):
    """The table of issue_52_targets."""
    def cell(value, unit):
        if value is None:
            return "-"
        if unit in (" MB", " lines"):
            return f"{value:.0f}"
        return f"{value:.2e}" if 0 < abs(value) < 0.01 else f"{value:.3f}"
    print(harness.table(["issue 52", "value", "min-max (old)", "target", "met"], [
        [row["figure"], cell(row["value"], row["unit"]) + row["unit"],
         "-" if not row["spread"] else "-".join(cell(v, row["unit"]) for v in row["spread"]),
         row["target"], {None: "-", True: "yes", False: "no"}[row["met"]]] for row in rows]))
    print("sentences/s ratios: medians of the ratios within each round (min-max); peak MB: "
          "medians over rounds; the interactive answers: from the line written to its "
          "translation read, medians over rounds (min-max)\n")


def main(unused_argv):
    bfloat16 = cpu_multiplies_in_bfloat16()  # where the trainer's auto picks bfloat16
    names = FLAGS.contestants or ([name for name in CONTESTANTS if (
        bfloat16 or name not in BFLOAT16) and name not in (*FLOAT32, OLD, *FEATURES)]
        if FLAGS.compare else [DECODER]) + [OLD] * bool(FLAGS.old_checkout) + list(
        FEATURES) * FLAGS.feature_costs
    if OLD in names and not FLAGS.old_checkout:
        raise common.FlagError(f"{OLD} needs --old_checkout and --old_python")
    problem = registry.problem(PROBLEM)
    problem.generate_data(FLAGS.data_dir, FLAGS.tmp_dir)  # keeps the splits already complete
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    paths = problem.text_paths(FLAGS.data_dir, "test")
    sources, references = (decoder.read_sentences(paths[side])[:FLAGS.num_sentences]
                           for side in ("inputs", "targets"))
    encoders = problem.feature_encoders(FLAGS.data_dir)
    entries = {name: {"key": name, "name": CONTESTANTS[name].label, "group": name,
                      "ours": CONTESTANTS[name].model == "t2t_lite"}
               for name in CONTESTANTS if name in names}
    setup = {"t2t_lite_checkpoint": harness.t2t_lite_checkpoint(FLAGS.t2t_lite_dir,
                                                                FLAGS.t2t_lite_checkpoint),
             "pieces": peer.PieceTokens(encoders["inputs"]), "ctranslate2_pythons": {},
             "ctranslate2_models": {}, "jobs": {}, "export_seconds": {},
             "sources": sources, "references": references,
             **{f"{side}_path": os.path.join(FLAGS.work_dir, f"{side}.txt")
                for side in ("sources", "references")}}
    output_files.write_lines(setup["sources_path"], sources)
    output_files.write_lines(setup["references_path"], references)
    print(f"t2t_lite's checkpoint: {setup['t2t_lite_checkpoint']}", flush=True)
    for name in entries:
        if CONTESTANTS[name].runs == "saved_model":
            setup["export_seconds"][name] = export_saved_model(name, setup)
        if CONTESTANTS[name].runs in CHILD_KINDS:
            setup["jobs"][name] = write_job(name, setup, sources, encoders)
    try:
        prepare_peer(entries, sources, setup)
        prepare_eole(entries, sources, setup)
    except peer.PeerError as error:
        raise peer.PeerError(f"a peer (--peer_dir={FLAGS.peer_dir}, --eole_dir="
                             f"{FLAGS.eole_dir}): {error}") from None
    export_ctranslate2(entries, sources, setup)
    prepare_ctranslate2(entries, setup)
    eole = setup.get("eole", {})
    thread_flags = {name: FLAGS[name].value for name in ("intra_op_parallelism_threads",
                                                         "inter_op_parallelism_threads")}
    result = {"problem": PROBLEM, "sentences": len(sources), **{name: FLAGS[name].value for name
              in ("beam_size", "alpha", "batch_size", "rounds", "latency_sentences")},
              "threads": {"parallel_batches": FLAGS.parallel_batches,
                          "intra_op": intra_op_threads(),
                          "inter_op": FLAGS.inter_op_parallelism_threads,
                          "ctranslate2": peer.ctranslate2_threads(
                              FLAGS.intra_op_parallelism_threads, FLAGS.parallel_batches)},
              "machine": harness.machine(), "t2t_lite_checkpoint": setup["t2t_lite_checkpoint"],
              "t2t_lite_mixed_precision": saved_run(FLAGS.t2t_lite_dir)[
                  "hparams"].mixed_precision,
              "peer_checkpoint": setup.get("checkpoint"),
              "peer_length_bucket_width": setup.get("length_bucket_width"),
              "peer_max_decoding_length": setup.get("max_decoding_length"),
              "peer_versions": setup.get("versions", {}),
              "ctranslate2_versions": setup["ctranslate2_versions"],
              "ctranslate2_contestants": {name: {"runtime": c.runtime, "compute_type":
                                                 c.compute_type, "model": c.model,
                                                 "version": CT2_VERSIONS[c.runtime]}
                                          for name, c in CONTESTANTS.items()
                                          if name in entries and c.runtime},
              "ctranslate2_converter": f"ct2-opennmt-tf-converter of CTranslate2 "
                                       f"{peer.CTRANSLATE2_VERSION} (the peer's environment)",
              "onmt_infer_settings": {
                  "peer_onednn": FLAGS.peer_onednn,
                  "TF_ENABLE_ONEDNN_OPTS": PEER_ONEDNN[FLAGS.peer_onednn],
                  "caller_TF_ENABLE_ONEDNN_OPTS": CALLER_ONEDNN, **thread_flags,
                  "length_bucket_width": setup.get("length_bucket_width")},
              "eole_model": eole.get("model"), "eole_versions": eole.get("versions", {}),
              "eole_predict_settings": {**eole.get("settings", {}), **thread_flags},
              "eole_ctranslate2": eole.get("ctranslate2"),
              "export_seconds": setup["export_seconds"],
              "t2t_lite_ctranslate2": setup.get("t2t_lite_ctranslate2"),
              "convert_seconds": setup.get("convert_seconds")}
    result["order"] = harness.run_rounds(list(entries.values()), FLAGS.rounds, lambda entry, i:
                                         run_round(entry, i, setup, encoders, references))
    for entry in entries.values():
        entry["summary"] = summarize(entry)
    result.update(contestants=list(entries.values()), ratios=ratios(entries),
                  memory_targets=memory_targets(entries), limit_targets=limit_targets(entries),
                  old_translations_differ=old_translations_differ(entries),
                  old_checkout=FLAGS.old_checkout, old_python=FLAGS.old_python,
                  old_commit=checkout_commit(FLAGS.old_checkout))
    if FLAGS.feature_costs:
        result["score_checks"] = score_checks(setup)
    result["issue_52"] = issue_52_targets(result, entries)
    result["machine"]["load_average_at_end"] = os.getloadavg()
    print_tables(result)
    if result["issue_52"]:
        print_issue_52(result["issue_52"])
    if FLAGS.output_json:
        harness.write_json(FLAGS.output_json, result)


if __name__ == "__main__":
    harness.run_main(main)
