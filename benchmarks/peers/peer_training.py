"""What the peers' run.py programs (opennmt_tf/, eole/) share to train and score t2t_lite's
`transformer_small` alike: the flags they have in common, the hparams and problem data, the
sentence pairs and SentencePiece pieces they all train on, the dev BLEU sentences, their
configurations as YAML, their toolkits' programs run with a log, the medians of their log
windows and the results table and JSON. Each peer keeps its own configuration mapping and log
format in its folder.
"""
import json
import os
import time

from t2t_lite.bin.common import FLAGS, flags, registry

from t2t_lite.data.problem import DEV, TRAIN  # noqa: E402  (after common: its quiet start)
from t2t_lite.decoding import decoder, output_files  # noqa: E402
from t2t_lite.decoding.search import SearchHParams  # noqa: E402

from peer_environment import PeerError  # noqa: E402  (it puts benchmarks/ on sys.path)
import harness  # noqa: E402
from harness import HPARAMS_SET, PROBLEM, fmt  # noqa: E402

DECODE = SearchHParams()  # t2t_lite's defaults: beam 4, alpha 0.6
DECODE_BATCH_SIZE = decoder.TranslatorHParams().batch_size  # and 32 sentences a batch


def define_shared_flags(venv_dir: str, pythons: str, threads: str, minutes: bool = True):
    """The flags every peer's run.py defines alike, with its own environment's default folder,
    its Pythons, what its thread flags set and whether it can stop after --train_minutes (each
    defines its others itself and adopts these with `flags.adopt_module_key_flags`, so that
    --help lists them)."""
    harness.define_data_flags(flags, test_sentences=True)
    flags.DEFINE_string("work_dir", None, "Folder of the peer's data, configuration, model and "
                        "outputs.")
    flags.DEFINE_string("venv_dir", venv_dir, "The toolkit's virtual environment (created when "
                        "missing, reused when present).")
    flags.DEFINE_string("python", None, f"Python {pythons} to create it with (default: one on "
                        "PATH or under pyenv).")
    flags.DEFINE_integer("train_steps", 0, "Stop after this many updates, counted from 0 also "
                         "when continuing (0: no limit where --train_minutes is given).",
                         lower_bound=0)
    flags.DEFINE_float("train_minutes", 0, "Stop after this many minutes of training (0: no "
                       "limit)." if minutes else "Not supported: the toolkit stops only at its "
                       "train_steps (0 is the only accepted value).", lower_bound=0)
    flags.DEFINE_integer("warmup_steps", None, "learning_rate_warmup_steps (default: "
                         "transformer_small's).")
    flags.DEFINE_float("learning_rate_constant", None, "learning_rate_constant: the toolkit's "
                       "noam scale (default: transformer_small's).")
    flags.DEFINE_boolean("continue_training", False, "Train further from the latest checkpoint "
                         "in --work_dir/model (optimizer state and update count included) "
                         "instead of a fresh model; the schedule flags must be that model's.")
    flags.DEFINE_integer("save_every", 100, "Updates between checkpoints.", lower_bound=1)
    flags.DEFINE_integer("average_last", 1, "Checkpoints averaged before decoding (1: the last "
                         "one as it is).", lower_bound=1)
    flags.DEFINE_boolean("decode", False, "Translate test_2016_flickr (beam 4, length penalty "
                         "0.6) and score it with sacreBLEU.")
    flags.DEFINE_string("dev_bleu_source", None, "German sentences of the dev BLEU, one a line "
                        "(default: the first --dev_bleu_sentences of the dev split).")
    flags.DEFINE_string("dev_bleu_reference", None, "Their English references.")
    flags.DEFINE_integer("dev_bleu_sentences", 100, "Dev sentences of the dev BLEU when no files "
                         "are given.", lower_bound=1)
    flags.DEFINE_integer("log_every", 25, "Updates per log line.", lower_bound=1)
    flags.DEFINE_integer("skip_steps", 20, "Log windows that start within this many updates are "
                         "left out of the throughput (warm-up).", lower_bound=0)
    flags.DEFINE_integer("seed", 1, "The toolkit's seed.")
    for name, pool in (("intra_op", "threads of one operation"),
                       ("inter_op", "operations at once")):
        flags.DEFINE_integer(f"{name}_parallelism_threads", 0, f"{threads}'s {pool} (0: its own "
                             "choice).", lower_bound=0)
    flags.DEFINE_string("output_json", None, "Write the results to this JSON file.")
    flags.mark_flags_as_required(["data_dir", "work_dir"])


def run(ensure_environment, installed_versions, check_representable, train_and_score,
        print_table, toolkit, extra: dict):
    """A peer's run.py after its own checks: its environment (made once) and versions,
    transformer_small with the run's schedule (refused where the toolkit cannot express it),
    the problem's data; then `train_and_score(venv_python, hparams, problem, versions)`, the
    table and the JSON. `toolkit(versions)` names it; `extra`: its own settings."""
    start = time.time()
    venv_python = ensure_environment(os.path.expanduser(FLAGS.venv_dir), FLAGS.python)
    setup_seconds, versions = time.time() - start, installed_versions(venv_python)
    hparams = peer_hparams(FLAGS.warmup_steps, FLAGS.learning_rate_constant)
    check_representable(hparams)
    problem = problem_with_data(FLAGS.data_dir, FLAGS.tmp_dir)
    result = {"toolkit": toolkit(versions), "python": versions["python"], "versions": versions,
              "setup_seconds": setup_seconds, "warmup_steps": hparams.learning_rate_warmup_steps,
              "learning_rate_constant": hparams.learning_rate_constant,
              "train_steps_limit": FLAGS.train_steps, "train_minutes_limit": FLAGS.train_minutes,
              **extra, **{name: FLAGS[name].value for name in (
                  "intra_op_parallelism_threads", "inter_op_parallelism_threads")}}
    result.update(train_and_score(venv_python, hparams, problem, versions))
    print_table(result, hparams)
    if FLAGS.output_json:
        harness.write_json(FLAGS.output_json, result)


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
    output_files.write_lines(paths["test_source"], [pieces.encode(line) for line in sources])
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
    """harness.run_logged with the toolkit's progress lines (`progress`) echoed and Python's
    output unbuffered; returns its wall time."""
    environment = dict(os.environ, PYTHONUNBUFFERED="1")
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    start = time.time()
    harness.run_logged(command, log_path, environment, progress, what=what)
    return time.time() - start


def throughput(windows: list, skip_steps: int) -> dict:
    """harness.window_medians of the peers' windows ({step, first_step, steps_per_s, source,
    target (tokens/s)}): a line at or before a toolkit's own warm-up reports rates of 0."""
    return harness.window_medians(windows, skip_steps, target="target", source="source")


# --- Results -------------------------------------------------------------------------------------

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
