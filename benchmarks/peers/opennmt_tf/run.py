"""The OpenNMT-tf peer: the comparison Transformer trained and scored by OpenNMT-tf 2.32 / TF 2.13.

  python benchmarks/peers/opennmt_tf/run.py --data_dir=D --work_dir=W
      (--train_steps=N | --train_minutes=M) [--warmup_steps=400 --learning_rate_constant=0.5]
      [--continue_training] [--save_every=100 --average_last=3 --decode] [--dev_loss]
      [--curve_every_minutes=3 [--dev_bleu_source=F --dev_bleu_reference=F]] [--log_every=25]
      [--output_json=F]

1. Environment: OpenNMT-tf needs TensorFlow 2.13, which needs Python 3.10 or 3.11. A virtual
   environment with opennmt-tf==2.32.0, tensorflow-cpu==2.13.1, ctranslate2==3.24.0 (for
   benchmarks/decode_speed.py --compare) and the sacrebleu and sentencepiece versions of this
   Python is created in --venv_dir once and reused; a change of these requirements installs them
   into it again (../peer_environment.py, as for the other peers). Without a Python 3.10 or
   3.11 the program says so and exits with status 3, so that callers can leave the peer's row
   out.
2. Data: the sentence pairs that t2t_lite's `translate_multi30k_deen` reads (the problem's own
   `generate_samples` on --tmp_dir; pairs with an empty side skipped, as its datagen does),
   tokenized with the SentencePiece model that t2t_lite's datagen trained in --data_dir, written
   one sentence a line as space-separated pieces for OpenNMT-tf's default SpaceTokenizer, and
   a vocabulary in OpenNMT-tf's format: <blank>, <s>, </s>, then the model's pieces
   (../peer_training.py's `prepare_data`, which the eole peer shares).
3. Training: `transformer_small` (t2t_lite's registered set, with the caller's warmup and
   constant) as an OpenNMT-tf custom model and configuration (README.md has the table), for
   --train_steps updates (`train.max_step`) or --train_minutes of training, whichever comes
   first (timed_train.py), a checkpoint every --save_every updates.
4. Throughput from OpenNMT-tf's own log lines
       Step = 100 ; steps/s = 1.20, tokens/s = 7600 (3800 source, 3800 target) ; Learning rate
       = 0.000625 ; Loss = 4.123456
   (one line every --log_every updates; each covers the updates since the previous line, and
   the first 2 updates and checkpoint saves are left out by OpenNMT-tf): medians over the lines
   whose window starts after --skip_steps.
5. With --decode: the last --average_last checkpoints averaged (`onmt-main average_checkpoints`),
   test_2016_flickr translated with beam 4 and length penalty 0.6 (`onmt-main infer`), the
   pieces detokenized with the same SentencePiece model and scored by t2t_lite's own
   `decoder.score` (sacreBLEU, default settings) against the raw English lines.
6. With --dev_loss: `onmt-main eval` of the last checkpoint on the whole dev split (OpenNMT-tf's
   evaluation loss: cross entropy per target token without label smoothing), through
   eval_loss.py, which leaves out the beam search that OpenNMT-tf's evaluator runs for
   predictions nobody reads here.
7. With --curve_every_minutes: timed_train.py also keeps the model's weights every that many
   minutes of training and after the last update (with their step and time); after training,
   each translates the dev BLEU sentences (--dev_bleu_source / --dev_bleu_reference, else the
   first --dev_bleu_sentences dev pairs) greedily with `onmt-main infer` (params.beam_width 1)
   on that checkpoint, scored as in 5: the dev BLEU curve (`dev_bleu_curve`). Nothing is
   decoded while it trains.

What was checked in OpenNMT-tf 2.32's source:
- Schedule. `opennmt.schedules.NoamDecay(scale, model_dim, warmup_steps)` at Keras optimizer
  iteration i (0 before the first update) returns, with s = i + 1,
      scale * model_dim^-0.5 * min(s^-0.5, s * warmup^-1.5),
  wrapped in `ScheduleWrapper` (start_step 0, step_duration 1, minimum 0: no change).
  t2t_lite's `transformer_base` schedule at update s (counted from 1) is
      constant * min(1, s / warmup) * rsqrt(max(s, warmup)) * d^-0.5,
  and min(1, s/w) * max(s, w)^-0.5 = s * w^-1.5 for s < w and s^-0.5 for s >= w, so with
  scale = learning_rate_constant and model_dim = hidden_size the two are equal at every update
  (both count updates from 1). OpenNMT-tf logs `learning_rate(iterations)` after update k, the
  rate of update k + 1; run.py compares each logged rate with t2t_lite's
  `schedules.learning_rate(k + 1)` and reports the largest difference
  (`learning_rate_max_abs_diff`, limited by the log's 6 decimals).
- Token counts. `TrainingStats._update_words_counter` sums `features["length"]`. The source is
  read with `source_sequence_controls: {end: true}`, so its length is pieces + </s>, as
  t2t_lite's source (pieces + EOS). The target inputter in decoder mode has ids <s> w1 .. wn,
  ids_out w1 .. wn </s> and length n + 1: pieces + </s>, as t2t_lite's non-pad target tokens
  (pieces + EOS). So "target words/s" counts the same tokens as t2t_lite's target tokens/s,
  end-of-sentence included, padding not. The same lengths decide `maximum_features_length` /
  `maximum_labels_length` (100), as t2t_lite's max_length drops an example when
  max(source, target) including EOS exceeds 100.
- Length penalty. `BeamSearch._get_scores` divides log probabilities by
  ((5 + (sequence_length + 1)) / 6)^length_penalty, sequence_length counting the tokens
  before the current one: GNMT's ((5 + |Y|) / 6)^alpha with |Y| including the final </s>, as
  t2t_lite's `length_penalty(t + 1, alpha)` at decoding step t.
- Loss. OpenNMT-tf's label-smoothed cross entropy gives 1 - eps to the right class and
  eps / (V - 1) to the others, as t2t; t2t subtracts the loss floor (the entropy of that
  distribution), OpenNMT-tf does not, so `final_loss_minus_floor` is the number to put beside
  t2t_lite's loss (V = 8193 here: OpenNMT-tf adds <s> and its own <unk> bucket).
"""
import datetime
import json
import os
import re
import shutil
import sys
import time
from importlib import metadata

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags
common.load_tensorflow()  # the programs' start: a quiet TensorFlow

from t2t_lite.data.problem import DEV, TRAIN  # noqa: E402  (after common: its quiet start)
from t2t_lite.decoding import decoder, output_files  # noqa: E402
from t2t_lite.training import losses, schedules  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the peers' shared modules
import peer_environment  # noqa: E402  (it puts benchmarks/, the harness's, on sys.path too)
import peer_training  # noqa: E402
import harness  # noqa: E402
from harness import fmt  # noqa: E402
# PieceTokens: also decode_speed.py's (peer.PieceTokens).
from peer_environment import PeerError  # noqa: E402
from peer_training import (DECODE, DECODE_BATCH_SIZE, HPARAMS_SET, PROBLEM,  # noqa: E402,F401
                           PieceTokens, prepare_data, throughput, write_yaml)

DEFAULT_VENV_DIR = os.path.join("~", ".cache", "t2t_lite", "peers", "opennmt_tf")
TIMED_TRAIN = os.path.join(HERE, "timed_train.py")
EVAL_LOSS = os.path.join(HERE, "eval_loss.py")
OPENNMT_TF_VERSION = "2.32.0"
TENSORFLOW_VERSION = "2.13.1"
# OpenNMT-tf 2.32.0 requires ctranslate2>=3,<4 (for its CTranslate2 export); 3.24.0 is the
# newest of those (no 4.x can be installed beside it).
CTRANSLATE2_VERSION = "3.24.0"
SUPPORTED_PYTHONS = ("3.11", "3.10")  # TensorFlow 2.13 has wheels for 3.8 to 3.11


def define_flags():
    """run.py's flags, defined when it runs as a program (decode_speed.py imports this file
    for its functions and has flags of the same names): peer_training's shared ones and its
    own."""
    peer_training.define_shared_flags(DEFAULT_VENV_DIR, "3.10 or 3.11", "onmt-main")
    flags.adopt_module_key_flags(peer_training)
    flags.DEFINE_boolean("dev_loss", False, "After training, the dev loss of the last checkpoint "
                         "(`onmt-main eval` on the whole dev split).")
    flags.DEFINE_float("curve_every_minutes", 0, "Keep the model's weights every this many minutes "
                       "of training and after the last update, and after training score each on "
                       "the dev BLEU sentences (greedy); 0: no curve.")
    flags.DEFINE_boolean("jit_compile", False, "onmt-main --jit_compile (XLA; OpenNMT-tf then pads "
                         "batches to multiples of 8).")


# --- Environment -------------------------------------------------------------------------------

def requirements() -> list:
    """OpenNMT-tf, TensorFlow and CTranslate2 pinned; sacrebleu and sentencepiece at this
    Python's versions (t2t_lite's setup.py pins), so that both environments tokenize and score
    alike. The list is written to the environment's requirements marker once installed; a list
    that differs from it (a new pin) makes `ensure_environment` install again."""
    return [f"opennmt-tf=={OPENNMT_TF_VERSION}", f"tensorflow-cpu=={TENSORFLOW_VERSION}",
            f"ctranslate2=={CTRANSLATE2_VERSION}",
            f"sacrebleu=={metadata.version('sacrebleu')}",
            f"sentencepiece=={metadata.version('sentencepiece')}"]


def ensure_environment(venv_dir: str, requested_python: str = None) -> str:
    """OpenNMT-tf's environment's Python, after creating the environment or completing its
    install if needed (peer_environment.ensure_environment). Exits with status 3 when it must be
    created and no Python 3.10 or 3.11 exists."""
    return peer_environment.ensure_environment(
        venv_dir, requirements(), "OpenNMT-tf", requested_python, SUPPORTED_PYTHONS,
        f"OpenNMT-tf peer skipped: it needs Python 3.10 or 3.11 for TensorFlow "
        f"{TENSORFLOW_VERSION}")


def installed_versions(venv_python: str) -> dict:
    return peer_environment.installed_versions(
        venv_python, {"opennmt_tf": "OpenNMT-tf", "tensorflow": "tensorflow-cpu",
                      "ctranslate2": "ctranslate2"})


# --- OpenNMT-tf's model and configuration -------------------------------------------------------

def check_representable(hparams):
    """The hparams that OpenNMT-tf's Transformer and NoamDecay can express, or an error."""
    peer_training.check_representable(hparams)
    if (hparams.layer_preprocess_sequence, hparams.layer_postprocess_sequence) not in (
            ("n", "da"), ("none", "dan")):
        raise PeerError("only pre-norm (n/da) and post-norm (none/dan) map onto OpenNMT-tf")


def model_file_text(hparams) -> str:
    """OpenNMT-tf's custom model definition (`onmt-main --model`) for the hparams."""
    encoder_layers = hparams.num_encoder_layers or hparams.num_hidden_layers
    decoder_layers = hparams.num_decoder_layers or hparams.num_hidden_layers
    return f'''"""t2t_lite's {HPARAMS_SET} as an OpenNMT-tf Transformer (written by run.py)."""
import opennmt


def model():
    return opennmt.models.Transformer(
        source_inputter=opennmt.inputters.WordEmbedder(embedding_size={hparams.hidden_size}),
        target_inputter=opennmt.inputters.WordEmbedder(embedding_size={hparams.hidden_size}),
        num_layers=({encoder_layers}, {decoder_layers}),
        num_units={hparams.hidden_size},
        num_heads={hparams.num_heads},
        ffn_inner_dim={hparams.filter_size},
        dropout={hparams.layer_prepostprocess_dropout},
        attention_dropout={hparams.attention_dropout},
        ffn_dropout={hparams.relu_dropout},
        pre_norm={hparams.layer_preprocess_sequence == "n"},
        share_embeddings=opennmt.models.EmbeddingsSharingLevel.ALL,
        mha_bias=False,  # t2t's attention projections have no bias
        output_layer_bias=False,  # t2t's softmax is the shared embedding matrix, no bias
    )
'''


def onmt_config(hparams, paths: dict, model_dir: str) -> dict:
    """OpenNMT-tf's run configuration (no --auto_config: its defaults would add gradient
    accumulation to 25,000 tokens, LazyAdam and beta2 0.998)."""
    train = {
        "batch_type": "tokens",
        "batch_size": hparams.batch_size,
        "maximum_features_length": hparams.max_length,
        "maximum_labels_length": hparams.max_length,
        "save_checkpoints_steps": FLAGS.save_every,
        "keep_checkpoint_max": max(FLAGS.average_last, 5),
        "save_summary_steps": FLAGS.log_every,
        "average_last_checkpoints": 0,  # averaged in its own timed stage
    }
    if FLAGS.train_steps:
        train["max_step"] = FLAGS.train_steps
    return {
        "model_dir": model_dir,
        "data": {
            "train_features_file": paths[TRAIN]["source"],
            "train_labels_file": paths[TRAIN]["target"],
            "eval_features_file": paths[DEV]["source"],
            "eval_labels_file": paths[DEV]["target"],
            "source_vocabulary": paths["vocabulary"],
            "target_vocabulary": paths["vocabulary"],
            "source_sequence_controls": {"start": False, "end": True},  # t2t's EOS on inputs
        },
        "params": {
            "optimizer": "Adam",
            "optimizer_params": {"beta_1": hparams.optimizer_adam_beta1,
                                 "beta_2": hparams.optimizer_adam_beta2,
                                 "epsilon": hparams.optimizer_adam_epsilon},
            "learning_rate": hparams.learning_rate_constant,
            "decay_type": "NoamDecay",
            "decay_params": {"model_dim": hparams.hidden_size,
                             "warmup_steps": hparams.learning_rate_warmup_steps},
            "label_smoothing": hparams.label_smoothing,
            "average_loss_in_time": True,  # loss / number of target tokens, as t2t
            "beam_width": DECODE.beam_size,
            "length_penalty": DECODE.alpha,
            # t2t_lite allows input length + extra_length tokens; OpenNMT-tf takes one number.
            "maximum_decoding_length": hparams.max_length + DECODE.extra_length,
        },
        "train": train,
        "infer": {"batch_type": "examples", "batch_size": DECODE_BATCH_SIZE,
                  "length_bucket_width": 1},  # sorted by length, written in input order
    }


# --- Running onmt-main and reading its log -------------------------------------------------------

PROGRESS = re.compile(r"Step = \d+|Saved|time limit|training loop|Evaluation result|Error")


def run_logged(command: list, log_path: str, what: str) -> float:
    """peer_training.run_logged, echoing onmt-main's progress lines."""
    return peer_training.run_logged(command, log_path, what, progress=PROGRESS)


# OpenNMT-tf's log lines: "2026-01-01 10:00:00.123000: I runner.py:310] Step = 100 ; ..."
TIMESTAMP = r"(?:(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+): .*?)?"
LOG_LINE = re.compile(
    TIMESTAMP + r"Step = (?P<step>\d+) ; steps/s = (?P<steps_per_s>[\d.]+), tokens/s = \d+ "
    r"\((?P<source>\d+) source, (?P<target>\d+) target\) ; "
    r"Learning rate = (?P<learning_rate>[-\d.e]+) ; Loss = (?P<loss>[-\d.e]+|nan|inf)")
SAVED = re.compile(TIMESTAMP + r"Saved checkpoint \S*ckpt-(?P<step>\d+)")
LOOP = re.compile(r"training loop: (\d+) updates in ([\d.]+) s, last loss (\S+)")
EVALUATION = re.compile(r"Evaluation result for step (\d+): loss = ([-\d.e]+|nan|inf)")
ONMT_THROUGHPUT_WARMUP = 2  # TrainingStats(warmup_steps=2) resets its counters after updates 1, 2


def seconds_of(timestamp):
    if timestamp is None:
        return None
    return datetime.datetime.strptime(timestamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def parse_training_log(text: str) -> dict:
    """OpenNMT-tf's throughput windows, the last checkpoint's step and the training loop's time.

    A "Step = k" line reports the updates since OpenNMT-tf last reset its counters: at the
    previous log line or checkpoint save (and after updates 1 and 2, its own warm-up). Its
    steps/s has 2 decimals, so where both ends carry timestamps the window's steps/s is
    recomputed from them: (k - start step) / (time - start time), the start being the last
    "Step" or "Saved checkpoint" line before it from update 2 on. Each window is
    {step, first_step, steps_per_s, source, target (tokens/s), learning_rate, loss}."""
    events = []  # (position in the log, step, seconds, match or None for a save)
    for match in LOG_LINE.finditer(text):
        events.append((match.start(), int(match["step"]), seconds_of(match["time"]), match))
    for match in SAVED.finditer(text):
        events.append((match.start(), int(match["step"]), seconds_of(match["time"]), None))
    events.sort(key=lambda event: event[0])
    windows, start = [], None
    for _, step, seconds, match in events:
        if match is not None:
            window = {key: float(match[key]) for key in
                      ("steps_per_s", "source", "target", "learning_rate", "loss")}
            window.update(step=step, first_step=max(start[0] + 1 if start else 1,
                                                    ONMT_THROUGHPUT_WARMUP + 1))
            if (start and start[0] >= ONMT_THROUGHPUT_WARMUP and start[1] and seconds
                    and seconds > start[1]):
                window["steps_per_s"] = (step - start[0]) / (seconds - start[1])
            windows.append(window)
        start = (step, seconds)
    saved = [int(match["step"]) for match in SAVED.finditer(text)]
    loop = LOOP.findall(text)
    return {"windows": windows, "last_checkpoint": max(saved) if saved else 0,
            "loop_seconds": float(loop[-1][1]) if loop else None,
            "last_loss": float(loop[-1][2]) if loop else None}


def learning_rate_difference(windows: list, hparams):
    """The largest |logged rate - t2t_lite's rate| (the log line after update k shows the
    rate of update k + 1)."""
    differences = [abs(w["learning_rate"] - float(schedules.learning_rate(w["step"] + 1, hparams)))
                   for w in windows]
    return max(differences) if differences else None


def checkpoint_count(model_dir: str) -> int:
    """How many checkpoints the model folder's `checkpoint` state lists."""
    path = os.path.join(model_dir, "checkpoint")
    if not os.path.exists(path):
        return 0
    with open(path, encoding="utf-8") as handle:
        return sum(line.startswith("all_model_checkpoint_paths") for line in handle)


# --- The run ---------------------------------------------------------------------------------

def train_and_score(venv_python: str, hparams, problem, versions: dict) -> dict:
    work_dir = os.path.abspath(FLAGS.work_dir)
    data_dir = os.path.abspath(FLAGS.data_dir)
    model_dir = os.path.join(work_dir, "model")
    onmt_main = [venv_python, "-m", "opennmt.bin.main"]
    result, start = {}, time.time()

    paths, pieces = prepare_data(problem, data_dir, FLAGS.tmp_dir, os.path.join(work_dir, "data"),
                                 FLAGS.test_sentences)
    result["train_pairs"] = paths["counts"][TRAIN]
    config_path = os.path.join(work_dir, "config.yml")
    model_path = os.path.join(work_dir, "model.py")
    write_yaml(config_path, onmt_config(hparams, paths, model_dir))
    with open(model_path, "w", encoding="utf-8") as handle:
        handle.write(model_file_text(hparams))
    if not FLAGS.continue_training:
        shutil.rmtree(model_dir, ignore_errors=True)  # a fresh model, not a continued one
    elif not checkpoint_count(model_dir):
        raise PeerError(f"--continue_training: no checkpoint in {model_dir} to continue from")
    result["prepare_seconds"] = time.time() - start

    common_args = ["--config", config_path, "--model", model_path, "--seed", str(FLAGS.seed),
                   "--intra_op_parallelism_threads", str(FLAGS.intra_op_parallelism_threads),
                   "--inter_op_parallelism_threads", str(FLAGS.inter_op_parallelism_threads)]
    if FLAGS.jit_compile:
        common_args.append("--jit_compile")
    train_log = os.path.join(work_dir, "train.log")
    curve_dir = os.path.join(work_dir, "curve")
    shutil.rmtree(curve_dir, ignore_errors=True)
    curve_args = ([f"--curve_every={FLAGS.curve_every_minutes * 60}", f"--curve_dir={curve_dir}"]
                  if FLAGS.curve_every_minutes else [])
    result["train_seconds"] = run_logged(
        [venv_python, TIMED_TRAIN, str(FLAGS.train_minutes * 60)] + curve_args + common_args
        + ["train"], train_log, "train")
    with open(train_log, encoding="utf-8") as handle:
        log = parse_training_log(handle.read())
    if not log["last_checkpoint"] or log["last_loss"] is None:
        raise PeerError(f"training ended without a checkpoint or a loss; see {train_log}")
    floor = losses.smoothed_distribution_entropy(paths["vocabulary_size"], hparams.label_smoothing)
    result.update({
        "steps": log["last_checkpoint"], "train_loop_seconds": log["loop_seconds"],
        **throughput(log["windows"], FLAGS.skip_steps),
        "final_loss": log["last_loss"], "final_loss_minus_floor": log["last_loss"] - floor,
        "loss_floor": floor,
        "learning_rate_max_abs_diff": learning_rate_difference(log["windows"], hparams),
        "log_windows": log["windows"]})

    if FLAGS.decode:
        checkpoint_dir = model_dir
        average_log = os.path.join(work_dir, "average.log")
        count = min(FLAGS.average_last, checkpoint_count(model_dir))
        result["averaged_checkpoints"] = max(count, 1)
        result["average_seconds"] = 0.0
        if count > 1:
            checkpoint_dir = os.path.join(model_dir, "avg")
            result["average_seconds"] = run_logged(
                onmt_main + common_args + ["average_checkpoints", "--output_dir", checkpoint_dir,
                                           "--max_count", str(count)], average_log, "average")
        pieces_path = os.path.join(work_dir, "test_2016_flickr.beam4.pieces")
        result["decode_seconds"] = run_logged(
            onmt_main + common_args + ["--checkpoint_path", checkpoint_dir, "infer",
                                       "--features_file", paths["test_source"],
                                       "--predictions_file", pieces_path],
            os.path.join(work_dir, "infer.log"), "infer")
        hypotheses = [pieces.decode(line) for line in decoder.read_sentences(pieces_path)]
        output_files.write_lines(os.path.join(work_dir, "test_2016_flickr.beam4.en"), hypotheses)
        scores = decoder.score(hypotheses, paths["test_references"])
        result.update({"bleu": scores["bleu"], "bleu_signature": scores["bleu_signature"],
                       "bleu_text": scores["bleu_text"], "test_sentences": len(hypotheses)})

    if FLAGS.dev_loss:
        result.update(dev_loss([venv_python, EVAL_LOSS] + common_args, work_dir))
    if FLAGS.curve_every_minutes:
        stage = time.time()
        result["dev_bleu_curve"] = dev_bleu_curve(onmt_main, common_args, work_dir, curve_dir,
                                                  paths, pieces)
        result["dev_bleu_seconds"] = time.time() - stage
    result["wall_seconds"] = time.time() - start
    return result


DEV_LOSS_DEFINITION = ("OpenNMT-tf's evaluation loss: cross entropy per target token (</s> "
                       "included), without label smoothing")


def dev_loss(onmt_command: list, work_dir: str) -> dict:
    """`onmt-main eval` of the last checkpoint on the whole dev split (the config's
    eval_features_file / eval_labels_file), through eval_loss.py: the loss without the
    translations OpenNMT-tf's evaluator would also make and discard."""
    log_path = os.path.join(work_dir, "eval.log")
    seconds = run_logged(onmt_command + ["eval"], log_path, "eval")
    with open(log_path, encoding="utf-8") as handle:
        found = EVALUATION.findall(handle.read())
    if not found:
        raise PeerError(f"onmt-main eval printed no evaluation result; see {log_path}")
    step, loss = found[-1]
    return {"dev_loss": float(loss), "dev_loss_step": int(step),
            "dev_loss_definition": DEV_LOSS_DEFINITION, "eval_seconds": seconds}


def dev_bleu_curve(onmt_main: list, common_args: list, work_dir: str, curve_dir: str,
                   paths: dict, pieces) -> list:
    """Each curve checkpoint (timed_train.py's curve.json) translates the dev BLEU sentences
    greedily (`onmt-main infer` with params.beam_width 1 on that checkpoint); the pieces are
    detokenized and scored by t2t_lite's `decoder.score`, as the test set. Returns the curve's
    points with `bleu` added."""
    with open(os.path.join(curve_dir, "curve.json"), encoding="utf-8") as handle:
        points = json.load(handle)
    sources, references = peer_training.dev_bleu_sentences(
        paths, FLAGS.dev_bleu_source, FLAGS.dev_bleu_reference, FLAGS.dev_bleu_sentences)
    source_path = os.path.join(curve_dir, "dev_bleu.source")
    output_files.write_lines(source_path, [pieces.encode(line) for line in sources])
    greedy_config = os.path.join(work_dir, "greedy.yml")
    write_yaml(greedy_config, {"params": {"beam_width": 1}})
    config_index = common_args.index("--config") + 1
    greedy_args = (common_args[:config_index + 1] + [greedy_config]
                   + common_args[config_index + 1:])
    scored = []
    for point in points:
        output = f"{point['path']}.dev_bleu.pieces"
        run_logged(onmt_main + greedy_args + ["--checkpoint_path", point["path"], "infer",
                                              "--features_file", source_path,
                                              "--predictions_file", output],
                   f"{point['path']}.infer.log", f"dev BLEU, step {point['step']}")
        hypotheses = [pieces.decode(line) for line in decoder.read_sentences(output)]
        scores = decoder.score(hypotheses, references)
        scored.append({**point, "bleu": scores["bleu"], "bleu_signature": scores["bleu_signature"]})
    return scored


# --- Decoding speed: onmt-main infer and CTranslate2 (benchmarks/decode_speed.py --compare) -------

DECODE_SCRIPT = os.path.join(HERE, "decode.py")
CTRANSLATE2_CONVERTER = "ct2-opennmt-tf-converter"  # installed beside the environment's Python
# OpenNMT-tf's own inference batching (its Transformer auto_config): batches drawn from buckets
# of lengths 5 tokens wide. run.py's --decode config has 1 (less padding, more partial batches).
INFER_LENGTH_BUCKET_WIDTH = 5
ONMT_DEFAULT_MAXIMUM_DECODING_LENGTH = 250  # params.maximum_decoding_length when not set


def decoding_checkpoint(work_dir: str) -> str:
    """The checkpoint `--decode` translates with in a run.py work dir: the average in model/avg
    when there, else the latest in model/."""
    import tensorflow as tf
    model_dir = os.path.join(work_dir, "model")
    for directory in (os.path.join(model_dir, "avg"), model_dir):
        checkpoint = tf.train.latest_checkpoint(directory) if os.path.isdir(directory) else None
        if checkpoint:
            return checkpoint
    raise PeerError(f"no checkpoint in {model_dir} (nor in its avg/): train the peer there "
                    f"first (run.py --work_dir={work_dir})")


def prepare_decoding(venv_python: str, work_dir: str, pieces, out_dir: str, sources: list,
                     latency_sources: list, beam_size: int, alpha: float, batch_size: int,
                     length_bucket_width: int = INFER_LENGTH_BUCKET_WIDTH,
                     checkpoint: str = None) -> dict:
    """What `onmt-main infer` and CTranslate2 need to translate `sources` with the model that
    run.py trained in `work_dir`, written to `out_dir`: the sources and the latency sentences as
    OpenNMT-tf tokens, and decode.yml, the work dir's config.yml with beam_width, length_penalty
    and the inference batching set, and model_dir moved into `out_dir` (onmt-main copies the
    model definition into model_dir; the peer's folder is only read). Returns the paths, the
    checkpoint and the configuration's maximum_decoding_length."""
    paths = {name: os.path.join(work_dir, name) for name in ("config.yml", "model.py")}
    paths["vocab.txt"] = os.path.join(work_dir, "data", "vocab.txt")
    for path in paths.values():
        if not os.path.exists(path):
            raise PeerError(f"no {path}: the peer's work dir must be one that run.py trained "
                            f"in (config.yml, model.py, data/vocab.txt, model/)")
    os.makedirs(out_dir, exist_ok=True)
    vocabulary = os.path.join(out_dir, "vocab.txt")
    pieces.write_vocabulary(vocabulary)
    with open(vocabulary, encoding="utf-8") as ours, \
            open(paths["vocab.txt"], encoding="utf-8") as theirs:
        if ours.read() != theirs.read():
            raise PeerError(f"{paths['vocab.txt']} is not the vocabulary of this data dir's "
                            f"SentencePiece model: the peer was trained on other data")
    setup = {"model": paths["model.py"], "checkpoint": checkpoint or decoding_checkpoint(work_dir),
             "source": os.path.join(out_dir, "source.tokens"),
             "latency_source": os.path.join(out_dir, "latency.tokens"),
             "config": os.path.join(out_dir, "decode.yml")}
    output_files.write_lines(setup["source"], [pieces.encode(line) for line in sources])
    output_files.write_lines(setup["latency_source"],
                             [pieces.encode(line) for line in latency_sources])
    overrides = {"model_dir": os.path.join(out_dir, "onmt_model_dir"),
                 "params": {"beam_width": beam_size, "length_penalty": alpha},
                 "infer": {"batch_size": batch_size, "batch_type": "examples",
                           "length_bucket_width": length_bucket_width}}
    config = harness.run_child([venv_python, DECODE_SCRIPT, "config",
                                f"--output={setup['config']}",
                                f"--overrides={json.dumps(overrides)}", paths["config.yml"]],
                               None, "CONFIG", os.path.join(out_dir, "config.log"))
    setup["max_decoding_length"] = config.get("params", {}).get(
        "maximum_decoding_length", ONMT_DEFAULT_MAXIMUM_DECODING_LENGTH)
    setup["length_bucket_width"] = length_bucket_width
    return setup


def convert_to_ctranslate2(venv_python: str, setup: dict, output_dir: str) -> float:
    """`ct2-opennmt-tf-converter` of the setup's checkpoint into a float32 CTranslate2 model in
    output_dir (replaced); returns its wall time. Its output goes to output_dir + ".log"."""
    converter = os.path.join(os.path.dirname(venv_python), CTRANSLATE2_CONVERTER)
    return run_logged([converter, "--config", setup["config"], "--model_type", setup["model"],
                       "--model_path", setup["checkpoint"], "--output_dir", output_dir,
                       "--quantization", "float32", "--force"],
                      output_dir.rstrip("/") + ".log", CTRANSLATE2_CONVERTER)


def infer_command(venv_python: str, setup: dict, predictions: str, intra_threads: int,
                  inter_threads: int) -> list:
    """`onmt-main infer` on the setup's sources, timed by decode.py (prints "DECODE {json}")."""
    return [venv_python, DECODE_SCRIPT, "infer", f"--latency_source={setup['latency_source']}",
            "--", "--config", setup["config"], "--model", setup["model"],
            "--checkpoint_path", setup["checkpoint"],
            "--intra_op_parallelism_threads", str(intra_threads),
            "--inter_op_parallelism_threads", str(inter_threads),
            "infer", "--features_file", setup["source"], "--predictions_file", predictions]


def ctranslate2_threads(intra_threads: int, parallel_batches: int) -> tuple:
    """(intra_threads, inter_threads) of CTranslate2: `intra_threads` per batch (0: the cores
    divided among the batches translated at once, each batch having threads of its own in
    CTranslate2) and `parallel_batches` batches translated at once (CTranslate2's
    inter_threads, t2t_lite's parallel_batches)."""
    return intra_threads or max(1, decoder.usable_cores() // parallel_batches), parallel_batches


def ctranslate2_command(venv_python: str, setup: dict, model_dir: str, output: str,
                        beam_size: int, alpha: float, batch_size: int, intra_threads: int,
                        parallel_batches: int, compute_type: str = "float32",
                        sentencepiece_model: str = None) -> list:
    """CTranslate2 on the converted model with `compute_type`, timed by decode.py (prints
    "DECODE {json}") and run by `venv_python` (the peer's environment, whose CTranslate2 is
    3.24, or CTranslate2 4.x's: peers/ctranslate2_runtime.py), with the configuration's
    maximum_decoding_length. CTranslate2's length penalty divides a hypothesis' log
    probability by length^alpha, not by GNMT's ((5 + length) / 6)^alpha as OpenNMT-tf and
    t2t_lite do, so it may rank a few beams differently. With `sentencepiece_model` the setup's
    source files and the output are raw text (decode.py's --sentencepiece_model)."""
    intra, inter = ctranslate2_threads(intra_threads, parallel_batches)
    return [venv_python, DECODE_SCRIPT, "ctranslate2", f"--model_dir={model_dir}",
            f"--source={setup['source']}", f"--output={output}",
            f"--latency_source={setup['latency_source']}", f"--compute_type={compute_type}",
            f"--beam_size={beam_size}", f"--length_penalty={alpha}",
            f"--batch_size={batch_size}", f"--max_decoding_length={setup['max_decoding_length']}",
            f"--intra_threads={intra}", f"--inter_threads={inter}",
            *[f"--sentencepiece_model={sentencepiece_model}"] * bool(sentencepiece_model)]


def print_table(result: dict, hparams):
    limits = [f"{FLAGS.train_steps} steps"] if FLAGS.train_steps else []
    limits += [f"{FLAGS.train_minutes:g} min"] if FLAGS.train_minutes else []
    print(f"\n{result['toolkit']} (Python {result['python']}); {HPARAMS_SET} shape on {PROBLEM}; "
          f"warmup {hparams.learning_rate_warmup_steps}, constant "
          f"{hparams.learning_rate_constant:g}; limit {' / '.join(limits)}; log every "
          f"{FLAGS.log_every}, throughput after step {FLAGS.skip_steps} "
          f"({result['throughput_windows']} windows)")
    peer_training.print_throughput_table(result)
    difference = fmt(result["learning_rate_max_abs_diff"], ".1e")
    print(f"loss: the last update's (OpenNMT-tf's label-smoothed cross entropy; loss-floor "
          f"subtracts {result['loss_floor']:.3f} as t2t_lite's does); logged learning rates vs "
          f"t2t_lite's schedule: max |difference| {difference} (the log has 6 decimals)")
    if "bleu" in result:
        print(f"{result['bleu_text']}  ({result['bleu_signature']}; averaged "
              f"{result['averaged_checkpoints']} checkpoint(s))")
    if "dev_loss" in result:
        print(f"dev loss {result['dev_loss']:.4f} at step {result['dev_loss_step']} "
              f"({result['dev_loss_definition']}; the whole dev split)")
    if result.get("dev_bleu_curve"):
        points = "  ".join(f"{p['seconds'] / 60:.1f} min (step {p['step']}) {p['bleu']:.2f}"
                           for p in result["dev_bleu_curve"])
        print(f"dev BLEU (greedy) over training time: {points}")


def main(unused_argv):
    if not FLAGS.train_steps and not FLAGS.train_minutes:
        raise PeerError("give --train_steps or --train_minutes (or both)")
    peer_training.run(
        ensure_environment, installed_versions, check_representable, train_and_score,
        print_table,
        lambda versions: f"OpenNMT-tf {versions['opennmt_tf']} / TF {versions['tensorflow']}",
        {"jit_compile": FLAGS.jit_compile})


if __name__ == "__main__":
    define_flags()
    harness.run_main(main)
