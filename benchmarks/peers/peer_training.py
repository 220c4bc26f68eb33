"""What the peers' run.py programs (opennmt_tf/, eole/) share to train and score t2t_lite's
`transformer_small` alike: the flags they have in common, the hparams and problem data, the
sentence pairs and SentencePiece pieces they all train on, the dev BLEU sentences, their
configurations as YAML, their toolkits' programs run with a log, the medians of their log
windows and the results table and JSON. Each peer keeps its own configuration mapping and log
format in its folder.
"""
import json
import os
import statistics
import subprocess
import time

from t2t_lite.bin.common import flags, registry

from t2t_lite.data.problem import DEV, TRAIN  # noqa: E402  (after common: its quiet start)
from t2t_lite.decoding import decoder  # noqa: E402
from t2t_lite.decoding.search import SearchHParams  # noqa: E402

from peer_environment import PeerError  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TMP_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))
PROBLEM = "translate_multi30k_deen"
HPARAMS_SET = "transformer_small"
DECODE = SearchHParams()  # t2t_lite's defaults: beam 4, alpha 0.6
DECODE_BATCH_SIZE = decoder.TranslatorHParams().batch_size  # and 32 sentences a batch


def define_shared_flags():
    """The flags that every peer's run.py defines alike (each defines its others itself, and
    adopts these as its own with `flags.adopt_module_key_flags`, so that --help lists them)."""
    flags.DEFINE_string("data_dir", None, "t2t_lite's generated translate_multi30k_deen (its "
                        "SentencePiece model and test text); generated from --tmp_dir if absent.")
    flags.DEFINE_string("tmp_dir", DEFAULT_TMP_DIR, "Folder of the raw Multi30k files.")
    flags.DEFINE_string("work_dir", None, "Folder of the peer's data, configuration, model and "
                        "outputs.")
    flags.DEFINE_integer("warmup_steps", None, "learning_rate_warmup_steps (default: "
                         "transformer_small's).")
    flags.DEFINE_integer("average_last", 1, "Checkpoints averaged before decoding (1: the last "
                         "one as it is).")
    flags.DEFINE_integer("test_sentences", 0, "Decode only the first this many test sentences (0: "
                         "all 1,000).")
    flags.DEFINE_string("dev_bleu_reference", None, "Their English references.")
    flags.DEFINE_integer("skip_steps", 20, "Log windows that start within this many updates are "
                         "left out of the throughput (warm-up).")
    flags.DEFINE_string("output_json", None, "Write the results to this JSON file.")
    flags.mark_flags_as_required(["data_dir", "work_dir"])


# --- The model and the data ----------------------------------------------------------------------

def peer_hparams(warmup_steps: int = None, learning_rate_constant: float = None):
    """transformer_small with the caller's warmup and constant (None: its own)."""
    overrides = {"learning_rate_warmup_steps": warmup_steps,
                 "learning_rate_constant": learning_rate_constant}
    return registry.hparams(HPARAMS_SET).replace(
        **{k: v for k, v in overrides.items() if v is not None})


def check_representable(hparams):
    """What every peer's Transformer and noam schedule can express (each peer checks its norm
    placement and the rest), or an error."""
    schedule = tuple(hparams.learning_rate_schedule)
    if schedule not in (("constant", "linear_warmup", "rsqrt_decay", "rsqrt_hidden_size"),
                        ("constant", "noam")):
        raise PeerError(f"learning_rate_schedule {'*'.join(schedule)} has no NoamDecay form")
    if not hparams.shared_embedding_and_softmax_weights:
        raise PeerError("the comparison shares source, target and softmax embeddings")


def problem_with_data(data_dir: str, tmp_dir: str):
    """The problem, its data generated in `data_dir` from `tmp_dir` first (what t2t_lite-datagen
    does) when its vocabulary or test text is missing."""
    problem = registry.problem(PROBLEM)
    test_paths = problem.text_paths(data_dir, "test").values()
    if not os.path.exists(problem.vocab_path(data_dir)) or not all(map(os.path.exists,
                                                                        test_paths)):
        problem.generate_data(data_dir, tmp_dir)
    return problem


class PieceTokens:
    """SentencePiece ids <-> the space-separated tokens of the peers' files (OpenNMT-tf's
    SpaceTokenizer and eole split lines on spaces).

    A piece id's token is the piece itself, or `<piece_ID>` for a piece that a whitespace split
    would cut or drop (this model has a tab and a no-break space piece). The control pieces
    (<pad>, </s>) and <unk> have no token of their own: OpenNMT-tf has its own <blank>, </s> and
    <unk>.
    """

    RESERVED = ("<blank>", "<s>", "</s>")  # ids 0, 1, 2 of every OpenNMT-tf vocabulary
    UNKNOWN = "<unk>"  # OpenNMT-tf's out-of-vocabulary bucket, the id after the file's

    def __init__(self, vocabulary):
        self.processor = vocabulary.processor
        self.tokens = []
        for piece_id in range(self.processor.get_piece_size()):
            piece = self.processor.id_to_piece(piece_id)
            if self.processor.is_control(piece_id) or self.processor.is_unknown(piece_id):
                self.tokens.append(None)
            elif not piece or any(char.isspace() or not char.isprintable() for char in piece):
                self.tokens.append(f"<piece_{piece_id}>")
            else:
                self.tokens.append(piece)
        self.ids = {token: i for i, token in enumerate(self.tokens) if token is not None}
        named = [token for token in self.tokens if token is not None]
        if len(self.ids) != len(named) or set(self.RESERVED + (self.UNKNOWN,)) & set(named):
            raise PeerError("the SentencePiece model has pieces that collide with OpenNMT-tf's "
                            "special tokens or with each other")
        self.ids[self.UNKNOWN] = self.processor.unk_id()

    def encode(self, text: str) -> str:
        return " ".join(self.tokens[i] or self.UNKNOWN for i in self.processor.encode(text))

    def decode(self, line: str) -> str:
        return self.processor.decode([self.ids[token] for token in line.split(" ") if token])

    def write_vocabulary(self, path: str) -> int:
        """OpenNMT-tf's vocabulary file (the format `onmt-build-vocab --from_format
        sentencepiece` writes): <blank>, <s>, </s>, then one token a line. Returns OpenNMT-tf's
        vocabulary size (the file's lines + <unk>)."""
        lines = list(self.RESERVED) + [token for token in self.tokens if token is not None]
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(token + "\n" for token in lines)
        return len(lines) + 1


def prepare_data(problem, data_dir: str, tmp_dir: str, out_dir: str, test_sentences: int = 0):
    """Tokenized train / dev / test source files and the vocabulary in `out_dir`. Returns
    their paths, the number of pairs of each split, the vocabulary size, the test references
    (the first `test_sentences` if not 0) and the dev pairs as text (`dev_pairs`), and the
    PieceTokens."""
    os.makedirs(out_dir, exist_ok=True)
    pieces = PieceTokens(problem.feature_encoders(data_dir)["inputs"])
    paths = {"vocabulary": os.path.join(out_dir, "vocab.txt"), "counts": {}, "dev_pairs": []}
    paths["vocabulary_size"] = pieces.write_vocabulary(paths["vocabulary"])
    for split in (TRAIN, DEV):
        names = {side: os.path.join(out_dir, f"{split}.{side}") for side in ("source", "target")}
        count = 0
        with open(names["source"], "w", encoding="utf-8") as source, \
                open(names["target"], "w", encoding="utf-8") as target:
            for sample in problem.generate_samples(data_dir, tmp_dir, split):
                if not sample["inputs"].strip() or not sample["targets"].strip():
                    continue  # t2t_lite's datagen skips these pairs (SplitStats.keep)
                source.write(pieces.encode(sample["inputs"]) + "\n")
                target.write(pieces.encode(sample["targets"]) + "\n")
                count += 1
                if split == DEV:
                    paths["dev_pairs"].append((sample["inputs"], sample["targets"]))
        paths[split] = names
        paths["counts"][split] = count
    test = problem.text_paths(data_dir, "test")
    paths["test_source"] = os.path.join(out_dir, "test.source")
    sources, references = (decoder.read_sentences(test[feature])
                           for feature in ("inputs", "targets"))
    if test_sentences:
        sources, references = sources[:test_sentences], references[:test_sentences]
    decoder.write_lines(paths["test_source"], [pieces.encode(line) for line in sources])
    paths["test_references"] = references
    return paths, pieces


def dev_bleu_sentences(paths: dict, source: str, reference: str, count: int):
    """(sources, references) of the dev BLEU: the files `source` and `reference` (--dev_bleu_source
    and --dev_bleu_reference), else the first `count` dev pairs of `prepare_data`'s paths."""
    if source or reference:
        if not (source and reference):
            raise PeerError("give both --dev_bleu_source and --dev_bleu_reference")
        sources = decoder.read_sentences(source)
        references = decoder.read_sentences(reference)
        if len(sources) != len(references):
            raise PeerError(f"--dev_bleu_source has {len(sources)} lines but "
                            f"--dev_bleu_reference has {len(references)}")
        return sources, references
    pairs = paths["dev_pairs"][:count]
    return [source for source, _ in pairs], [reference for _, reference in pairs]


# --- Configurations, programs and their logs ------------------------------------------------------

def yaml_text(value, indent: int = 0) -> str:
    """A nested dict of scalars as YAML. Floats always carry a '.', since PyYAML (YAML 1.1)
    reads 1e-09 as a string; strings are JSON-quoted, which YAML reads as they are."""
    lines = []
    for key, item in value.items():
        prefix = " " * indent + f"{key}:"
        if isinstance(item, dict):
            lines.append(prefix + "\n" + yaml_text(item, indent + 2))
            continue
        if isinstance(item, bool):
            text = "true" if item else "false"
        elif isinstance(item, float):
            text = repr(item)
            mantissa, _, exponent = text.partition("e")
            if exponent and "." not in mantissa:
                text = f"{mantissa}.0e{exponent}"
        elif isinstance(item, int):
            text = str(item)
        else:
            text = json.dumps(item)
        lines.append(f"{prefix} {text}")
    return "\n".join(lines)


def write_yaml(path: str, config: dict):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(yaml_text(config) + "\n")


def run_logged(command: list, log_path: str, what: str, progress) -> float:
    """Runs `command` with its output into `log_path` (written as it comes) and the lines that
    match `progress` (a compiled pattern: the toolkit's progress lines) echoed without the
    logger's prefix; returns its wall time. A failure names the log and shows its end."""
    environment = dict(os.environ, PYTHONUNBUFFERED="1")
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    start = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=environment)
        for line in process.stdout:
            log.write(line)
            log.flush()
            if progress.search(line):
                print(f"  [{what}] {line.rstrip().split('] ', 1)[-1]}", flush=True)
        status = process.wait()
    if status:
        with open(log_path, encoding="utf-8") as log:
            tail = "".join(log.readlines()[-25:])
        raise PeerError(f"{what} failed (exit status {status}); the end of {log_path}:\n{tail}")
    return time.time() - start


def throughput(windows: list, skip_steps: int) -> dict:
    """Medians over the log windows ({step, first_step, steps_per_s, source, target (tokens/s)})
    that start after `skip_steps` and hold an update (None without any): a log line at or before
    a toolkit's own warm-up (OpenNMT-tf's update 2) reports rates of 0."""
    kept = [window for window in windows
            if window["first_step"] > skip_steps and window["step"] >= window["first_step"]]
    if not kept:
        return {"target_tokens_per_s": None, "source_tokens_per_s": None, "steps_per_s": None,
                "target_tokens_per_step": None, "throughput_windows": 0}
    median = statistics.median
    return {"target_tokens_per_s": median(w["target"] for w in kept),
            "source_tokens_per_s": median(w["source"] for w in kept),
            "steps_per_s": median(w["steps_per_s"] for w in kept),
            "target_tokens_per_step": median(w["target"] / w["steps_per_s"] for w in kept),
            "throughput_windows": len(kept)}


# --- Results -------------------------------------------------------------------------------------

def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_throughput_table(result: dict):
    """The results table's header and its one row: steps, time, throughput, loss and BLEU."""
    header = (f"{'steps':>6}{'train s':>9}{'target tok/s':>14}{'source tok/s':>14}"
              f"{'steps/s':>9}{'tok/step':>10}{'loss':>8}{'loss-floor':>11}{'BLEU':>7}")
    print(header + "\n" + "-" * len(header))
    print(f"{result['steps']:>6}{result['train_seconds']:>9.1f}"
          f"{fmt(result['target_tokens_per_s'], '.0f'):>14}"
          f"{fmt(result['source_tokens_per_s'], '.0f'):>14}{fmt(result['steps_per_s'], '.3f'):>9}"
          f"{fmt(result.get('target_tokens_per_step'), '.0f'):>10}{result['final_loss']:>8.3f}"
          f"{result['final_loss_minus_floor']:>11.3f}{fmt(result.get('bleu'), '.2f'):>7}")


def write_json(path: str, result: dict):
    """The results as JSON in `path` (--output_json), if given."""
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}")
