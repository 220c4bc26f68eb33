"""The eole peer: the comparison Transformer trained and scored by eole 0.6.4 / PyTorch 2.13.

  python benchmarks/peers/eole/run.py --data_dir=D --work_dir=W --train_steps=N
      [--warmup_steps=400 --learning_rate_constant=0.5] [--continue_training]
      [--save_every=100 --average_last=3 --decode] [--ctranslate2_dir=DIR]
      [--dev_bleu_source=F --dev_bleu_reference=F | --dev_bleu] [--log_every=25]
      [--output_json=F]

1. Environment: eole 0.6.4 needs Python >= 3.11 and torch 2.10-2.14. A virtual environment
   with torch==2.13.0 (installed first, on its own, so that pip takes the CPU build and eole
   finds its requirement met), eole==0.6.4, ctranslate2==4.8.5 (eole requires >=4,<5),
   aiohttp (eole's command line imports it without declaring it), the sacrebleu version of this
   Python and sentencepiece (this Python's version if eole admits it, else 0.2.2: eole requires
   <=0.2.2) is created in --venv_dir once and reused; a change of these requirements installs
   them again. Without a Python 3.11 the program says so and exits with status 3, so that
   callers can leave the peer's row out.
2. Data: the sentence pairs, SentencePiece model and tokens of the OpenNMT-tf peer
   (`prepare_data` and `PieceTokens` of ../peer_training.py, which both peers share): pieces
   written one sentence a line, separated by spaces. eole reads such files without a transform (it
   splits lines on spaces). Each source line gets a literal `</s>` token, eole's EOS, as
   t2t_lite appends EOS to its inputs (eole adds nothing to the source of an encoder-decoder
   model). The vocabulary file holds the pieces; eole puts its <unk>, <blank>, <s>, </s> first.
3. Training: `transformer_small` (t2t_lite's registered set, with the caller's warmup and
   constant) as an eole configuration (README.md has the table), `eole train` for
   --train_steps updates, a checkpoint every --save_every updates, through launch.py (which
   sets PyTorch's thread pools). Its data workers fill buckets of one pass over their share
   of the pairs (eole's default bucket would hold about 18 copies of Multi30k).
4. Throughput from eole's own log lines
       [2026-01-01 10:00:00,123 INFO] Step 100/ 1000; acc: 30.1; ppl: 40.12; xent: 3.69; ...
       lr: 1.23e-03; sents: 4000; bsz: 2700/2900/160; 2600/2800 tok/s; 95 sec;
   (one every --log_every updates; `bsz` is the mean source / target tokens / sentences per
   batch of the window): each window's updates over the time between its line and the one
   before, less the checkpoint saves in it; medians over the windows that start after
   --skip_steps.
5. Dev BLEU at the last checkpoint (--dev_bleu_source / --dev_bleu_reference, or --dev_bleu for
   the first --dev_bleu_sentences dev pairs): greedy `eole predict` (beam 1, no length
   penalty), detokenized with the SentencePiece model and scored by t2t_lite's `decoder.score`.
6. With --decode: the last --average_last checkpoints averaged (average.py), test_2016_flickr
   translated with beam 4 and eole's GNMT length penalty ("wu", alpha 0.6; it counts a
   hypothesis one token longer than t2t_lite) (`eole predict`), scored as in 5.
7. With --ctranslate2_dir: the decoded model converted to CTranslate2 4.x (CTranslate2's own
   eole converter, `python -m ctranslate2.converters.eole_ct2`).

README.md lists what was checked in eole's source and what differs from t2t_lite.
"""
import datetime
import filecmp
import math
import os
import re
import shutil
import sys
import time
from importlib import metadata

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry
common.load_tensorflow()  # the programs' start: a quiet TensorFlow

from t2t_lite.data.problem import TRAIN  # noqa: E402  (after common: its quiet start)
from t2t_lite.decoding import decoder, output_files  # noqa: E402
from t2t_lite.training import schedules  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the peers' shared modules
import peer_environment  # noqa: E402  (it puts benchmarks/, the harness's, on sys.path too)
import peer_training  # noqa: E402
import harness  # noqa: E402
from harness import fmt  # noqa: E402
from peer_environment import PeerError  # noqa: E402
from peer_training import (DECODE, DECODE_BATCH_SIZE, HPARAMS_SET, PROBLEM,  # noqa: E402
                           prepare_data, throughput, write_yaml)

DEFAULT_VENV_DIR = os.path.join("~", ".cache", "t2t_lite", "peers", "eole")
LAUNCH = os.path.join(HERE, "launch.py")
AVERAGE = os.path.join(HERE, "average.py")
EOLE_VERSION = "0.6.4"
# eole 0.6.4 requires torch>=2.10,<2.15. 2.13.0 is pinned and installed before eole: its CPU
# build lies in pip's find-links here, and an unpinned torch would pull a CUDA build.
TORCH_VERSION = "2.13.0"
CTRANSLATE2_VERSION = "4.8.5"  # eole requires ctranslate2>=4,<5; 4.8.5 is the newest
EOLE_SENTENCEPIECE_MAX = "0.2.2"  # eole 0.6.4 requires sentencepiece>=0.1.94,<=0.2.2
# eole's command line imports every eole/bin module, and eole/bin/tools/load_test.py imports
# aiohttp, which eole 0.6.4 does not declare: without it `eole train` fails to start.
AIOHTTP_VERSION = "3.14.5"
SUPPORTED_PYTHONS = ("3.11",)  # eole needs >= 3.11; the torch 2.13 CPU wheel here is cp311
CTRANSLATE2_CONVERTER = "ctranslate2.converters.eole_ct2"  # CTranslate2 has no console script
SOURCE_EOS = "</s>"  # eole's EOS token (DefaultTokens.EOS), appended to every source line
EOLE_SPECIALS = ("<unk>", "<blank>", "<s>", "</s>")  # eole's DefaultTokens, ids 0-3 here


def define_flags():
    """run.py's flags (defined when it runs as a program), named as opennmt_tf/run.py's:
    peer_training's shared ones and its own."""
    peer_training.define_shared_flags(DEFAULT_VENV_DIR, "3.11", "PyTorch", minutes=False)
    flags.adopt_module_key_flags(peer_training)
    flags.DEFINE_string("ctranslate2_dir", None, "Convert the decoded model (the average, or the "
                        "last checkpoint) to a float32 CTranslate2 4.x model in this folder.")
    flags.DEFINE_boolean("dev_bleu", False, "Score the last checkpoint on the dev BLEU sentences "
                         "(greedy); implied by --dev_bleu_source / --dev_bleu_reference.")
    flags.DEFINE_integer("num_workers", 2, "eole's num_workers: processes that read and batch the "
                         "training data (eole's default 2; 0: in the training process).",
                         lower_bound=0)
    flags.DEFINE_integer("bucket_size", 0, "eole's bucket_size: examples read, sorted by length "
                         "and cut into batches at a time, per data worker (0: one pass over the "
                         "worker's share of the training pairs; eole's default 262,144 would "
                         "hold about 18 copies of each pair of Multi30k).", lower_bound=0)


# --- Environment -------------------------------------------------------------------------------

def version_tuple(version: str) -> tuple:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def sentencepiece_version(ours: str) -> str:
    """This Python's sentencepiece version if eole 0.6.4 admits it, else the newest it does."""
    return ours if version_tuple(ours) <= version_tuple(EOLE_SENTENCEPIECE_MAX) else \
        EOLE_SENTENCEPIECE_MAX


def requirements() -> list:
    """torch, eole, CTranslate2 and aiohttp pinned; sacrebleu at this Python's version and
    sentencepiece as near it as eole allows (run.py tokenizes and scores in this Python; the
    environment's copies are eole's dependencies). The first line is installed on its own,
    first."""
    return [f"torch=={TORCH_VERSION}", f"eole=={EOLE_VERSION}",
            f"ctranslate2=={CTRANSLATE2_VERSION}", f"aiohttp=={AIOHTTP_VERSION}",
            f"sacrebleu=={metadata.version('sacrebleu')}",
            f"sentencepiece=={sentencepiece_version(metadata.version('sentencepiece'))}"]


def ensure_environment(venv_dir: str, requested_python: str = None) -> str:
    """eole's environment's Python, after creating the environment or completing its install if
    needed (peer_environment.ensure_environment; torch installed first, on its own). Exits with
    status 3 when it must be created and no Python 3.11 exists."""
    return peer_environment.ensure_environment(
        venv_dir, requirements(), "eole", requested_python, SUPPORTED_PYTHONS,
        f"eole peer skipped: eole {EOLE_VERSION} needs Python 3.11 or newer, and the torch "
        f"{TORCH_VERSION} CPU wheel is for 3.11", install_first=1)


def installed_versions(venv_python: str) -> dict:
    return peer_environment.installed_versions(
        venv_python, {name: name for name in ("eole", "torch", "ctranslate2", "sacrebleu",
                                              "sentencepiece")})


# --- Data: the peers' pieces, with the source EOS and eole's vocabulary -------------------------

def write_vocabulary(pieces, path: str) -> int:
    """eole's vocabulary file: one piece token a line, without counts (eole 0.6.4 reads a file
    whose first line has no count as tokens only) and without specials (eole puts <unk>,
    <blank>, <s>, </s> first). Returns eole's vocabulary size."""
    tokens = [token for token in pieces.tokens if token is not None]
    if set(tokens) & set(EOLE_SPECIALS):
        raise PeerError("the SentencePiece model has pieces named as eole's special tokens")
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(token + "\n" for token in tokens)
    return len(tokens) + len(EOLE_SPECIALS)


def with_source_eos(line: str) -> str:
    return f"{line} {SOURCE_EOS}" if line else SOURCE_EOS


def write_training_pairs(source_path: str, target_path: str, out_source: str, out_target: str,
                         max_length: int) -> dict:
    """The training pairs for eole: the source with its EOS, and, as t2t_lite's max_length, the
    pairs whose longer side (pieces + EOS) exceeds `max_length` left out. Returns the counts."""
    kept = dropped = 0
    with open(source_path, encoding="utf-8") as sources, \
            open(target_path, encoding="utf-8") as targets, \
            open(out_source, "w", encoding="utf-8") as source_out, \
            open(out_target, "w", encoding="utf-8") as target_out:
        for source, target in zip(sources, targets):
            source, target = source.rstrip("\n"), target.rstrip("\n")
            if max(len(source.split(" ")), len(target.split(" "))) + 1 > max_length:
                dropped += 1
                continue
            source_out.write(with_source_eos(source) + "\n")
            target_out.write(target + "\n")
            kept += 1
    return {"kept": kept, "dropped": dropped}


def write_sources(path: str, sentences: list, pieces):
    """Raw source sentences as eole's input: pieces and the source EOS."""
    output_files.write_lines(path, [with_source_eos(pieces.encode(line)) for line in sentences])


def output_hypotheses(path: str, pieces) -> list:
    """eole's predictions (piece tokens, one line a sentence) as detokenized text."""
    return [pieces.decode(line) for line in decoder.read_sentences(path)]


# --- eole's configuration ----------------------------------------------------------------------

def check_representable(hparams):
    """The hparams that eole's Transformer and noam decay can express here, or an error."""
    peer_training.check_representable(hparams)
    if (hparams.layer_preprocess_sequence, hparams.layer_postprocess_sequence) != ("n", "da"):
        raise PeerError("run.py maps only pre-norm (n/da) onto eole")
    if hparams.clip_grad_norm:
        raise PeerError("run.py maps only clip_grad_norm 0 (eole's max_grad_norm 0)")
    if hparams.timing_signal != "concat":
        raise PeerError(f"timing_signal {hparams.timing_signal!r}: run.py maps only 'concat' "
                        "(eole's SinusoidalConcat)")
    if hparams.optimizer_multistep_accumulate_steps != 1:
        raise PeerError("run.py maps only optimizer_multistep_accumulate_steps 1 (accum_count)")


def model_config(hparams) -> dict:
    """eole's `model` section for the hparams (README.md's table)."""
    encoder_layers = hparams.num_encoder_layers or hparams.num_hidden_layers
    decoder_layers = hparams.num_decoder_layers or hparams.num_hidden_layers
    return {
        "architecture": "transformer",
        "hidden_size": hparams.hidden_size,
        "heads": hparams.num_heads,
        "transformer_ff": hparams.filter_size,
        "mlp_activation_fn": "relu",
        "encoder": {"encoder_type": "transformer", "layers": encoder_layers},
        "decoder": {"decoder_type": "transformer", "layers": decoder_layers},
        "embeddings": {"word_vec_size": hparams.hidden_size,
                       "position_encoding_type": "SinusoidalConcat"},  # t2t's sin | cos halves
        "layer_norm": "standard",
        "norm_eps": hparams.norm_epsilon,
        "add_qkvbias": False,  # t2t's attention projections have no bias
        "add_ffnbias": True,  # t2t's feed-forward dense layers have biases
        "share_embeddings": True,  # one joint vocabulary: encoder and decoder embeddings
        "share_decoder_embeddings": True,  # and the softmax weights
        "generator_bias": False,  # t2t's softmax is the shared embedding matrix, no bias
    }


def worker_share(pairs: int, workers: int, worker: int) -> int:
    """How many of `pairs` training lines eole's data worker `worker` reads in a pass: with
    stride = max(1, workers), line i when (i // stride) % stride == worker (ParallelCorpus.load
    with DynamicDatasetIter._init_datasets's stride and offset)."""
    stride = max(1, workers)
    return sum(1 for i in range(pairs) if (i // stride) % stride == worker)


def pass_bucket_size(pairs: int, workers: int) -> int:
    """A bucket of one pass over a worker's share (the largest share). eole fills a bucket from
    its endless corpus reader, sorts it by length, cuts it into batches and shuffles them; a
    bucket larger than a pass holds copies of the same pairs (and its batches drop a source
    already in them), a smaller one sorts less widely."""
    return max(worker_share(pairs, workers, worker) for worker in range(max(1, workers)))


def train_config(hparams, data: dict, model_dir: str, run: dict) -> dict:
    """eole's training configuration (`eole train -config`). `run` has train_steps, save_every,
    average_last, num_workers, bucket_size (0: one pass of a worker's share), seed, log_every
    and train_from (None for a fresh model): run.py's flags."""
    training = {
        "model_path": model_dir,
        "train_steps": run["train_steps"],
        "save_checkpoint_steps": run["save_every"],
        "keep_checkpoint": max(run["average_last"], 5),
        "world_size": 1,
        "gpu_ranks": [],
        "compute_dtype": "fp32",
        "num_workers": run["num_workers"],
        "bucket_size": run["bucket_size"] or pass_bucket_size(data["counts"]["kept"],
                                                              run["num_workers"]),
        "batch_type": "tokens",
        "batch_size": hparams.batch_size,
        "batch_size_multiple": 1,
        "normalization": "tokens",
        "accum_count": [hparams.optimizer_multistep_accumulate_steps],
        "accum_steps": [0],
        "optim": "adam",
        "adam_beta1": hparams.optimizer_adam_beta1,
        "adam_beta2": hparams.optimizer_adam_beta2,
        "adam_eps": hparams.optimizer_adam_epsilon,
        "learning_rate": hparams.learning_rate_constant,
        "decay_method": "noam",
        "warmup_steps": hparams.learning_rate_warmup_steps,
        "max_grad_norm": 0.0,  # eole's default is 5; t2t clips nothing
        "label_smoothing": hparams.label_smoothing,
        "param_init_method": "xavier_uniform",
        "dropout": [hparams.layer_prepostprocess_dropout],
        "attention_dropout": [hparams.attention_dropout],
        "dropout_steps": [0],
        "log_attention_entropy": False,  # a diagnostic t2t does not compute
    }
    if run["train_from"]:
        training["train_from"] = run["train_from"]
    return {
        "seed": run["seed"],
        "report_every": run["log_every"],
        "src_vocab": data["vocabulary"],
        "share_vocab": True,
        "src_vocab_size": data["vocabulary_size"],
        "tgt_vocab_size": data["vocabulary_size"],
        "vocab_size_multiple": 1,
        "src_words_min_frequency": 0,
        "tgt_words_min_frequency": 0,
        "data": {"corpus_1": {"path_src": data["train_source"],
                              "path_tgt": data["train_target"]}},
        "training": training,
        "model": model_config(hparams),
    }


def predict_config(model_path: str, source: str, output: str, beam_size: int,
                   length_penalty: str, alpha: float, max_length: int, seed: int = 1,
                   batch_size: int = DECODE_BATCH_SIZE) -> dict:
    """eole's inference configuration (`eole predict -config`): `batch_size` sentences a batch
    (t2t_lite's default 32), one fixed length limit (max_length_ratio 0; eole's default would
    take min(max_length, 2 * the batch's source length + 5))."""
    config = {"model_path": model_path, "src": source, "output": output,
              "seed": seed, "world_size": 1, "gpu_ranks": [], "compute_dtype": "fp32",
              "batch_type": "sents", "batch_size": batch_size,
              "beam_size": beam_size, "length_penalty": length_penalty,
              "max_length": max_length, "max_length_ratio": 0.0}
    if length_penalty != "none":
        config["alpha"] = alpha
    return config


# --- Running eole and reading its log ------------------------------------------------------------

PROGRESS = re.compile(r"\] Step \d+|Saving optimizer|Start training loop|Loading|Error|error")


def run_logged(command: list, log_path: str, what: str) -> float:
    """peer_training.run_logged, echoing eole's progress lines."""
    return peer_training.run_logged(command, log_path, what, progress=PROGRESS)


def eole_command(venv_python: str, *args) -> list:
    return [venv_python, LAUNCH, str(FLAGS.intra_op_parallelism_threads),
            str(FLAGS.inter_op_parallelism_threads), *args]


# eole's log lines: "[2026-01-01 10:00:00,123 INFO] Step 100/ 1000; acc: ..." (Statistics.output)
TIMESTAMP = r"\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) \w+\] "
NUMBER = r"[-+\w.]+"
LOG_LINE = re.compile(
    TIMESTAMP + r"Step\s+(?P<step>\d+)(?:/\s*\d+)?; acc:\s*(?P<accuracy>" + NUMBER + r"); "
    r"ppl:\s*(?P<ppl>" + NUMBER + r"); xent:\s*(?P<xent>" + NUMBER + r");.*?"
    r"lr:\s*(?P<learning_rate>" + NUMBER + r"); sents:\s*(?P<sentences>\d+); "
    r"bsz:\s*(?P<source_per_batch>\d+)/\s*(?P<target_per_batch>\d+)/"
    r"\s*(?P<sentences_per_batch>\d+);"
    r"\s*(?P<eole_source>\d+)/\s*(?P<eole_target>\d+) tok/s;")
LOOP_START = re.compile(TIMESTAMP + r"Start training loop")
SAVE_START = re.compile(TIMESTAMP + r"Saving optimizer and weights to step_(?P<step>\d+)")
SAVE_END = re.compile(TIMESTAMP + r"Saving config and vocab")


def seconds_of(timestamp: str) -> float:
    return datetime.datetime.strptime(timestamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def loss_of(match) -> float:
    """The window's mean label-smoothed cross entropy per target token: ln(ppl) (ppl has 2
    decimals, so it is at least as precise as xent's 2 decimals), else xent."""
    try:
        ppl = float(match["ppl"])
    except ValueError:
        ppl = float("nan")
    return math.log(ppl) if math.isfinite(ppl) and ppl > 0 else float(match["xent"])


def parse_training_log(text: str, start_step: int = 0, accum_count: int = 1) -> dict:
    """eole's throughput windows, the saved checkpoints and the training loop's time.

    A "Step k" line reports the updates since the previous one (or since the loop started, after
    update `start_step`: the checkpoint a continued run starts from):
    eole's Statistics are created anew after each report. A window runs from the previous
    line's time (or the "Start training loop" line's) to its own, less the time of the
    checkpoint saves in it ("Saving optimizer ..." to "Saving config and vocab", the weights and
    optimizer state; eole's own tok/s counts them). Its tokens are eole's per-batch means times
    the window's batches (updates * accum_count). Each window is {step, first_step, steps_per_s,
    source, target (tokens/s), target_per_update, learning_rate, loss, eole_source,
    eole_target}."""
    events = []  # (position, kind, seconds, match)
    for kind, pattern in (("line", LOG_LINE), ("start", LOOP_START), ("save", SAVE_START),
                          ("saved", SAVE_END)):
        for match in pattern.finditer(text):
            events.append((match.start(), kind, seconds_of(match["time"]), match))
    events.sort(key=lambda event: event[0])
    windows, previous, loop_start, save_start, saving, saves = [], None, None, None, 0.0, []
    for _, kind, seconds, match in events:
        if kind == "start":
            loop_start = seconds
            previous = (start_step, seconds)
            saving = 0.0
        elif kind == "save":
            save_start = seconds
            saves.append((int(match["step"]), seconds))
        elif kind == "saved" and save_start is not None:
            saving += seconds - save_start
            save_start = None
        elif kind == "line":
            step = int(match["step"])
            batches = (step - previous[0]) * accum_count if previous else None
            window = {"step": step, "first_step": previous[0] + 1 if previous else 1,
                      "learning_rate": float(match["learning_rate"]), "loss": loss_of(match),
                      "target_per_update": float(match["target_per_batch"]) * accum_count,
                      "source_per_update": float(match["source_per_batch"]) * accum_count,
                      "eole_source": float(match["eole_source"]),
                      "eole_target": float(match["eole_target"])}
            duration = seconds - previous[1] - saving if previous else None
            if batches and duration and duration > 0:
                window["seconds"] = duration
                window["steps_per_s"] = (step - previous[0]) / duration
                window["target"] = float(match["target_per_batch"]) * batches / duration
                window["source"] = float(match["source_per_batch"]) * batches / duration
            else:  # no start time: eole's own rates (they include checkpoint saves)
                window["target"], window["source"] = window["eole_target"], window["eole_source"]
                window["steps_per_s"] = (window["target"] / window["target_per_update"]
                                         if window["target_per_update"] else 0.0)
            windows.append(window)
            previous, saving = (step, seconds), 0.0
    last_step = max([step for step, _ in saves], default=0)
    last_save = max([seconds for step, seconds in saves if step == last_step], default=None)
    return {"windows": windows, "saved_steps": sorted({step for step, _ in saves}),
            "last_checkpoint": last_step,
            # from "Start training loop" to the last save, which follows the last update
            "loop_seconds": (last_save - loop_start) if loop_start and last_save else None,
            "last_loss": windows[-1]["loss"] if windows else None}


def learning_rate_difference(windows: list, hparams) -> dict:
    """The largest |logged rate - t2t_lite's rate| and relative difference: the "Step k" line
    shows the rate of update k (eole's `learning_rate(step=k)`), with 3 significant digits."""
    absolute, relative = [], []
    for window in windows:
        ours = float(schedules.learning_rate(window["step"], hparams))
        absolute.append(abs(window["learning_rate"] - ours))
        relative.append(absolute[-1] / ours if ours else 0.0)
    return {"learning_rate_max_abs_diff": max(absolute) if absolute else None,
            "learning_rate_max_rel_diff": max(relative) if relative else None}


def torch_smoothed_entropy(vocab_size: int, label_smoothing: float) -> float:
    """The floor of eole's loss: the entropy of PyTorch's label-smoothed target
    (torch.nn.CrossEntropyLoss(label_smoothing=eps): eps / V on every class, 1 - eps + eps / V
    on the right one; t2t gives eps / (V - 1) to the wrong classes only)."""
    low = label_smoothing / vocab_size
    confidence = 1.0 - label_smoothing + low
    entropy = -confidence * math.log(confidence)
    if low > 0:
        entropy -= (vocab_size - 1) * low * math.log(low)
    return entropy


STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoints(model_dir: str) -> list:
    """eole's checkpoints in `model_dir` (its `step_N` folders) as (step, path), oldest first."""
    if not os.path.isdir(model_dir):
        return []
    found = []
    for name in os.listdir(model_dir):
        match = STEP_DIR.match(name)
        path = os.path.join(model_dir, name)
        if match and os.path.exists(os.path.join(path, "model.00.safetensors")):
            found.append((int(match[1]), path))
    return sorted(found)


def predict(venv_python: str, work_dir: str, name: str, config: dict, what: str) -> float:
    """`eole predict` with `config` written to work_dir/NAME.yaml; returns its wall time."""
    config_path = os.path.join(work_dir, f"{name}.yaml")
    write_yaml(config_path, config)
    return run_logged(eole_command(venv_python, "predict", "-config", config_path),
                      os.path.join(work_dir, f"{name}.log"), what)


def dev_bleu_requested() -> bool:
    return bool(FLAGS.dev_bleu or FLAGS.dev_bleu_source or FLAGS.dev_bleu_reference)


def dev_bleu(venv_python: str, work_dir: str, checkpoint: tuple, paths: dict, pieces) -> list:
    """The dev BLEU sentences translated greedily (beam 1, no length penalty) with the last
    checkpoint and scored as the test set: one point of `dev_bleu_curve`."""
    sources, references = peer_training.dev_bleu_sentences(
        paths, FLAGS.dev_bleu_source, FLAGS.dev_bleu_reference, FLAGS.dev_bleu_sentences)
    step, model_path = checkpoint
    source_path = os.path.join(work_dir, "dev_bleu.source")
    output = os.path.join(work_dir, f"dev_bleu.step_{step}.pieces")
    write_sources(source_path, sources, pieces)
    seconds = predict(venv_python, work_dir, "greedy",
                      predict_config(model_path, source_path, output, 1, "none", 0.0,
                                     max_decoding_length(), FLAGS.seed),
                      f"dev BLEU, step {step}")
    hypotheses = output_hypotheses(output, pieces)
    output_files.write_lines(os.path.join(work_dir, f"dev_bleu.step_{step}.en"), hypotheses)
    scores = decoder.score(hypotheses, references)
    return [{"step": step, "path": model_path, "sentences": len(sources),
             "bleu": scores["bleu"], "bleu_signature": scores["bleu_signature"],
             "seconds_to_decode": seconds}]


def max_decoding_length() -> int:
    """t2t_lite allows input length + extra_length tokens; eole takes one number (as OpenNMT-tf's
    peer: max_length + extra_length)."""
    return registry.hparams(HPARAMS_SET).max_length + DECODE.extra_length


def average(venv_python: str, model_dir: str, saved: list, count: int, log_path: str):
    """The model to decode: the average of the last `count` checkpoints (average.py) in
    model_dir/avg, or the last checkpoint as it is. Returns (path, averaged, seconds)."""
    chosen = saved[-count:] if count > 1 else saved[-1:]
    if len(chosen) == 1:
        return chosen[0][1], 1, 0.0
    output = os.path.join(model_dir, "avg")
    seconds = run_logged([venv_python, AVERAGE, output] + [path for _, path in chosen],
                         log_path, "average")
    return output, len(chosen), seconds


def convert_to_ctranslate2(venv_python: str, model_path: str, output_dir: str,
                           version: str) -> dict:
    """CTranslate2's eole converter on `model_path` into a float32 model in output_dir
    (replaced)."""
    command = [venv_python, "-m", CTRANSLATE2_CONVERTER, "--model_path", model_path,
               "--output_dir", output_dir, "--quantization", "float32", "--force"]
    seconds = run_logged(command, output_dir.rstrip("/") + ".log", "ctranslate2")
    return {"ctranslate2_dir": output_dir, "ctranslate2_seconds": seconds,
            "ctranslate2_converter": f"python -m {CTRANSLATE2_CONVERTER} (CTranslate2 "
                                     f"{version}), float32",
            "ctranslate2_source_eos": f"source tokens end with {SOURCE_EOS!r}, as in training"}


# --- Decoding speed: eole predict and CTranslate2 (benchmarks/decode_speed.py --compare) --------

def prepare_decoding(work_dir: str, pieces, out_dir: str, sources: list, latency_sources: list,
                     beam_size: int, alpha: float, batch_size: int, model: str = None) -> dict:
    """What `eole predict` and CTranslate2 need to translate `sources` with the model run.py
    trained in `work_dir` (opennmt_tf/run.py's `prepare_decoding` for eole), once its vocabulary
    is checked to be this data dir's: the sources and latency sentences as eole's tokens and
    decode.yaml (beam_size, GNMT's length penalty with alpha, batch_size sentences a batch) in
    `out_dir`. The model is `model`, else what --decode translated (decode.py's
    `decoding_model`). Returns their paths, the model, the length limit and the settings."""
    model_dir = os.path.join(work_dir, "model")
    saved = checkpoints(model_dir)
    if not (model or saved):
        raise PeerError(f"no checkpoint in {model_dir} (train the eole peer there first: its "
                        f"run.py --work_dir={work_dir})")
    os.makedirs(out_dir, exist_ok=True)
    vocabularies = [os.path.join(out_dir, "eole_vocab.txt"),
                    os.path.join(work_dir, "data", "eole_vocab.txt")]  # ours, the model's
    write_vocabulary(pieces, vocabularies[0])
    if not os.path.exists(vocabularies[1]) or not filecmp.cmp(*vocabularies, shallow=False):
        raise PeerError(f"{vocabularies[1]} is missing or not the vocabulary of this data dir's "
                        f"SentencePiece model")
    eole = {"model": model or harness.peer_module("eole/decode.py").decoding_model(model_dir,
                                                                                   saved),
            **{name: os.path.join(out_dir, file) for name, file in (
                ("source", "source.tokens"), ("latency_source", "latency.tokens"),
                ("config", "decode.yaml"))},
            "max_decoding_length": max_decoding_length()}
    for path, lines in ((eole["source"], sources), (eole["latency_source"], latency_sources)):
        write_sources(path, lines, pieces)
    config = predict_config(eole["model"], eole["source"],
                            os.path.join(out_dir, "predictions.tokens"), beam_size, "wu", alpha,
                            eole["max_decoding_length"], batch_size=batch_size)
    write_yaml(eole["config"], config)
    eole["settings"] = {key: config[key] for key in (
        "beam_size", "length_penalty", "alpha", "batch_type", "batch_size", "max_length",
        "max_length_ratio")}
    return eole


# --- The run ---------------------------------------------------------------------------------

def prepare(problem, work_dir: str, hparams) -> tuple:
    """The peers' tokenized pairs (prepare_data), then eole's training files and vocabulary."""
    data_dir = os.path.abspath(FLAGS.data_dir)
    out_dir = os.path.join(work_dir, "data")
    paths, pieces = prepare_data(problem, data_dir, FLAGS.tmp_dir, out_dir, FLAGS.test_sentences)
    data = {"vocabulary": os.path.join(out_dir, "eole_vocab.txt"),
            "train_source": os.path.join(out_dir, "train.eole.source"),
            "train_target": os.path.join(out_dir, "train.eole.target")}
    data["vocabulary_size"] = write_vocabulary(pieces, data["vocabulary"])
    data["counts"] = write_training_pairs(paths[TRAIN]["source"], paths[TRAIN]["target"],
                                          data["train_source"], data["train_target"],
                                          hparams.max_length)
    return paths, pieces, data


def train_and_score(venv_python: str, hparams, problem, versions: dict) -> dict:
    work_dir = os.path.abspath(FLAGS.work_dir)
    model_dir = os.path.join(work_dir, "model")
    result, start = {}, time.time()

    paths, pieces, data = prepare(problem, work_dir, hparams)
    result.update({"train_pairs": data["counts"]["kept"],
                   "train_pairs_over_max_length": data["counts"]["dropped"],
                   "vocabulary_size": data["vocabulary_size"]})
    train_from = None
    if FLAGS.continue_training:
        saved = checkpoints(model_dir)
        if not saved:
            raise PeerError(f"--continue_training: no checkpoint in {model_dir} to continue from")
        if saved[-1][0] >= FLAGS.train_steps:
            raise PeerError(f"--continue_training: the latest checkpoint is at update "
                            f"{saved[-1][0]}, not before --train_steps={FLAGS.train_steps}")
        train_from = saved[-1][1]
        result["continued_from_step"] = saved[-1][0]
    else:
        shutil.rmtree(model_dir, ignore_errors=True)  # a fresh model, not a continued one
    config_path = os.path.join(work_dir, "train.yaml")
    run = {"train_steps": FLAGS.train_steps, "save_every": FLAGS.save_every,
           "average_last": FLAGS.average_last, "num_workers": FLAGS.num_workers,
           "bucket_size": FLAGS.bucket_size, "seed": FLAGS.seed, "log_every": FLAGS.log_every,
           "train_from": train_from}
    config = train_config(hparams, data, model_dir, run)
    result["bucket_size"] = config["training"]["bucket_size"]
    write_yaml(config_path, config)
    result["prepare_seconds"] = time.time() - start

    train_log = os.path.join(work_dir, "train.log")
    result["train_seconds"] = run_logged(
        eole_command(venv_python, "train", "-config", config_path), train_log, "train")
    with open(train_log, encoding="utf-8") as handle:
        log = parse_training_log(handle.read(), result.get("continued_from_step", 0))
    saved = checkpoints(model_dir)
    if not saved or log["last_loss"] is None or saved[-1][0] != log["last_checkpoint"]:
        raise PeerError(f"training ended without a checkpoint or a loss; see {train_log}")
    floor = torch_smoothed_entropy(data["vocabulary_size"], hparams.label_smoothing)
    result.update({
        "steps": saved[-1][0], "train_loop_seconds": log["loop_seconds"],
        **throughput(log["windows"], FLAGS.skip_steps),
        "final_loss": log["last_loss"], "final_loss_minus_floor": log["last_loss"] - floor,
        "loss_floor": floor,
        **learning_rate_difference(log["windows"], hparams),
        "checkpoints": [step for step, _ in saved],
        "log_windows": log["windows"]})

    if dev_bleu_requested():
        stage = time.time()
        result["dev_bleu_curve"] = dev_bleu(venv_python, work_dir, saved[-1], paths, pieces)
        result["dev_bleu_seconds"] = time.time() - stage

    if FLAGS.decode or FLAGS.ctranslate2_dir:
        model_path, count, seconds = average(venv_python, model_dir, saved, FLAGS.average_last,
                                             os.path.join(work_dir, "average.log"))
        result.update({"averaged_checkpoints": count, "average_seconds": seconds,
                       "averaged_steps": [step for step, _ in saved[-count:]],
                       "decoded_model": model_path})
    if FLAGS.decode:
        test_source = os.path.join(work_dir, "data", "test.eole.source")
        references = paths["test_references"]
        sources = decoder.read_sentences(problem.text_paths(FLAGS.data_dir, "test")["inputs"])
        write_sources(test_source, sources[:len(references)], pieces)
        pieces_path = os.path.join(work_dir, "test_2016_flickr.beam4.pieces")
        result["decode_seconds"] = predict(
            venv_python, work_dir, "decode",
            predict_config(model_path, test_source, pieces_path, DECODE.beam_size, "wu",
                           DECODE.alpha, max_decoding_length(), FLAGS.seed),
            "predict")
        hypotheses = output_hypotheses(pieces_path, pieces)
        output_files.write_lines(os.path.join(work_dir, "test_2016_flickr.beam4.en"), hypotheses)
        scores = decoder.score(hypotheses, references)
        result.update({"bleu": scores["bleu"], "bleu_signature": scores["bleu_signature"],
                       "bleu_text": scores["bleu_text"], "test_sentences": len(hypotheses)})
    if FLAGS.ctranslate2_dir:
        result.update(convert_to_ctranslate2(venv_python, model_path,
                                             os.path.abspath(FLAGS.ctranslate2_dir),
                                             versions["ctranslate2"]))
    result["wall_seconds"] = time.time() - start
    return result


def print_table(result: dict, hparams):
    print(f"\n{result['toolkit']} (Python {result['python']}); {HPARAMS_SET} shape on {PROBLEM}; "
          f"warmup {hparams.learning_rate_warmup_steps}, constant "
          f"{hparams.learning_rate_constant:g}; limit {FLAGS.train_steps} steps; log every "
          f"{FLAGS.log_every}, throughput after step {FLAGS.skip_steps} "
          f"({result['throughput_windows']} windows)")
    peer_training.print_throughput_table(result)
    print(f"loss: the last log window's mean (eole's label-smoothed cross entropy, ln ppl; "
          f"loss-floor subtracts {result['loss_floor']:.3f}, its floor); logged learning rates "
          f"vs t2t_lite's schedule: max relative difference "
          f"{fmt(result['learning_rate_max_rel_diff'], '.1e')} (the log has 3 digits)")
    for point in result.get("dev_bleu_curve", []):
        print(f"dev BLEU (greedy, {point['sentences']} sentences) at step {point['step']}: "
              f"{point['bleu']:.2f}")
    if "bleu" in result:
        print(f"{result['bleu_text']}  ({result['bleu_signature']}; averaged "
              f"{result['averaged_checkpoints']} checkpoint(s))")
    if "ctranslate2_dir" in result:
        print(f"CTranslate2 model: {result['ctranslate2_dir']} ({result['ctranslate2_converter']})")


def main(unused_argv):
    if not FLAGS.train_steps:
        raise PeerError("give --train_steps (eole stops only at its train_steps)")
    if FLAGS.train_minutes:
        raise PeerError("--train_minutes is not supported: eole 0.6.4 stops only at "
                        "train_steps; give --train_steps alone")
    peer_training.run(ensure_environment, installed_versions, check_representable,
                      train_and_score, print_table,
                      lambda versions: f"eole {versions['eole']} / PyTorch {versions['torch']}",
                      {"num_workers": FLAGS.num_workers})


if __name__ == "__main__":
    define_flags()
    harness.run_main(main)
