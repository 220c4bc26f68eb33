"""The Translator (text in, text out over a search engine: results.py), the files a decoding
reads and writes (translations, scores of given translations, interactive decoding), and the
output's scores (exact match, sacreBLEU). Lines are sorted by length within windows of
batches and written back in input order as each window is done (output_files).

--decode_hparams set both the search (search.SearchHParams) and how the Translator batches it
and what is written of it (TranslatorHParams); parse_decode_hparams gives each name its place.
"""
import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import os
import sys
import threading

import sacrebleu
import tensorflow as tf
from absl import logging

from t2t_lite.data import text_files
from t2t_lite.data.vocab import EOS_ID
from t2t_lite.decoding.model_engine import ModelEngine
from t2t_lite.decoding.output_files import (DecodingOutputs, OutputForm, TranslationsFile,
                                            target_score_line)
from t2t_lite.decoding import strategies
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.errors import DataError
from t2t_lite.hparams_lib import HParamsError, parse_overrides
from t2t_lite.progress import progress_bar


@dataclasses.dataclass(frozen=True)
class TranslatorHParams:
    """How the Translator runs the search and what the decoder writes of it, the rest of t2t's
    --decode_hparams. batch_size:
    sentences per batch. jit_compile: the search compiled with XLA, with fixed-size caches and
    batches padded to a few shapes (off by default: on a CPU the growing caches without XLA
    are faster, benchmarks/decode_speed.py). parallel_batches: batches searched at once, each
    from a thread of its own (CTranslate2's inter_threads); 0 (the default) is one per CPU core
    when TensorFlow sees no GPU, else 1 (`parallel_batches_for`)."""
    batch_size: int = 32
    jit_compile: bool = False
    parallel_batches: int = 0
    # What is written (output_files): t2t's return_beams (the num_hypotheses best in Moses
    # n-best format beside the 1-best) and write_beam_scores (the 1-best's score after a tab);
    # alignments from the encoder-decoder attention of decoder layer alignment_layer averaged
    # over heads (-1: the last).
    return_beams: bool = False
    write_beam_scores: bool = False
    alignments: bool = False
    alignment_layer: int = -1


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, which a container's CPU limit
    can narrow; os.cpu_count() counts the host's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def parallel_batches_for(translator_hparams: TranslatorHParams) -> int:
    """translator_hparams.parallel_batches, 0 resolved: one batch per CPU core without a GPU
    (a step on 32 sentences x 4 beams cannot keep two cores busy: benchmarks/decode_speed.py),
    1 with one."""
    if translator_hparams.parallel_batches:
        return translator_hparams.parallel_batches
    return 1 if tf.config.list_physical_devices("GPU") else usable_cores()


def intra_op_threads_for(translator_hparams: TranslatorHParams, sentences: int) -> int:
    """The intra-op pool (one per process, shared by the batches searched at once) for
    `sentences` lines: 1 when a batch runs on every core at once (as CTranslate2's
    intra_threads=1 x inter_threads = cores), else every core, so a short input gets them."""
    batches = max(1, -(-sentences // translator_hparams.batch_size))
    cores = usable_cores()
    return 1 if min(parallel_batches_for(translator_hparams), batches) >= cores else cores


def size_thread_pools(translator_hparams: TranslatorHParams, sentences: int,
                      intra_op_threads: int = 0, inter_op_threads: int = 0):
    """TensorFlow's thread pools for translating `sentences` lines: the sizes given, and for an
    intra-op size of 0 `intra_op_threads_for`. Must run before TensorFlow runs any operation in
    this process (t2t_lite-decoder's thread flags)."""
    tf.config.threading.set_intra_op_parallelism_threads(
        intra_op_threads or intra_op_threads_for(translator_hparams, sentences))
    tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads)


DECODE_HPARAMS_KINDS = (SearchHParams, TranslatorHParams)
# What scoring given translations takes of the decode hparams: it searches nothing.
SCORING_SETTINGS = frozenset({"batch_size", "parallel_batches"})


def decode_hparams_names() -> list:
    """Every name --decode_hparams takes, the search's then the Translator's."""
    return [field.name for kind in DECODE_HPARAMS_KINDS for field in dataclasses.fields(kind)]


def _hypotheses_asked(values: dict) -> dict:
    """The beam_size, num_hypotheses and return_beams that --decode_hparams' `values` imply:
    the strategy's (strategies.chosen: sampling's beam_size is 1 unless given); return_beams
    without num_hypotheses returns its whole n-best list (t2t's return_beams), and
    num_hypotheses above 1 writes the n-best lists."""
    settings = {field.name: field.default for field in dataclasses.fields(SearchHParams)}
    strategy = strategies.chosen({**settings, **values})
    settings.update({**strategy.implies, **values})
    return_beams = values.get("return_beams", False) or values.get("num_hypotheses", 1) > 1
    num_hypotheses = values.get("num_hypotheses",
                                strategy.n_best(settings) if return_beams else 1)
    return {"num_hypotheses": num_hypotheses, "return_beams": return_beams,
            "beam_size": settings["beam_size"]}


def parse_decode_hparams(overrides: str = "") -> tuple:
    """(SearchHParams, TranslatorHParams) of a --decode_hparams string such as
    "beam_size=4,alpha=0.6,batch_size=32,jit_compile=true", over their defaults. Each name goes
    to the settings that have it; an unknown name or a bad value is an HParamsError naming
    --decode_hparams (an unknown name listing the names of both), and so is a beam_size or
    batch_size below 1 or a negative parallel_batches, stop_after_finished or extra_length, and
    a float setting that is nan or infinite (hparams_lib's type check)."""
    # One namespace of both settings' fields (their names differ), for the typed parsing.
    every_name = dataclasses.make_dataclass("DecodeHParams", [
        (field.name, field.type, dataclasses.field(default=field.default))
        for kind in DECODE_HPARAMS_KINDS for field in dataclasses.fields(kind)])
    values = parse_overrides(overrides, every_name(), "--decode_hparams", "decode hparam")
    for name, least in (("beam_size", 1), ("batch_size", 1), ("parallel_batches", 0),
                        ("stop_after_finished", 0), ("extra_length", 0)):
        if name in values and values[name] < least:
            raise HParamsError(f"--decode_hparams: {name}={values[name]}: must be at least "
                               f"{least}")
    values.update(_hypotheses_asked(values))
    return tuple(kind(**{field.name: values[field.name] for field in dataclasses.fields(kind)
                         if field.name in values})
                 for kind in DECODE_HPARAMS_KINDS)


class Translator:
    """Text in, text out: encode, batch by length, search (or score), decode.

    Lines are sorted by length into batches within windows of WINDOW_BATCHES batches, up to
    `parallel_batches` batches searched at once from threads of their own, and the results
    put back in input order a window at a time. The engine (results.py) searches and scores:
    the model's (model_engine.ModelEngine, the default) or CTranslate2's. No line stops the
    others: an empty line or one the vocabulary cannot encode (a warning) gets no result, one
    longer than `max_input_length` tokens is cut with a warning (`warnings` keeps them by line
    number). A line's samples are decided by `seed` and its index in the run alone, whatever
    its batch (docs/decoding.md, sampling).
    """

    # Batches sorted by length together and written together: 2,048 lines at the default
    # batch_size, so that a test set of a few thousand lines keeps almost all of the gain.
    WINDOW_BATCHES = 64
    # How often a wait for a batch searched in another thread checks that the threads live.
    THREAD_CHECK_SECONDS = 1.0

    def __init__(self, model, encoders: dict, search_hparams: SearchHParams = None,
                 max_input_length: int = None, source_name: str = "input",
                 translator_hparams: TranslatorHParams = None, engine=None, seed: int = 0):
        self.model = model
        self.encoders = encoders
        self.search_hparams = search_hparams or SearchHParams()
        self.translator_hparams = translator_hparams or TranslatorHParams()
        self.max_input_length = max_input_length
        self.source_name = source_name
        self.seed = seed
        self.warnings = {}  # line number -> what was wrong with it, as logged
        self.parallel_batches = parallel_batches_for(self.translator_hparams)
        hp = self.translator_hparams
        self.engine = engine or ModelEngine(
            model, self.search_hparams, hp.jit_compile, hp.batch_size,
            hp.alignment_layer if hp.alignments else None)

    def encode(self, number: int, line: str, feature: str = "inputs", name: str = None,
               eos: bool = True):
        """The ids of line `number` of `name` (the source's) with the `feature` vocabulary,
        EOS last if `eos`, cut to max_input_length with a warning; None for no result: an
        empty source line (an empty prefix is []) or one it cannot encode (a warning)."""
        name = name or self.source_name
        if not line.strip():
            return [EOS_ID] if feature == "targets" and eos else (None if eos else [])
        try:
            ids = self.encoders[feature].encode(line)
        except ValueError as error:
            return self._warn(number, f"{name} line {number} not translated: {error}")
        limit = self.max_input_length and self.max_input_length - eos
        if limit and len(ids) > limit:
            self._warn(number, f"{name} line {number}: {len(line)} characters, "
                       f"{len(ids) + eos} tokens; cut to max_length={self.max_input_length} "
                       f"tokens")
            ids = ids[:limit]
        return ids + [EOS_ID] if eos else ids

    def encode_prefix(self, number: int, line: str, name: str = "--target_prefix_file"):
        """The target ids that translations of line `number` begin with ([] for an empty
        line), or None (a warning naming line `number` of `name`) for a prefix the target
        vocabulary cannot encode or spell: a character it has never seen (a SentencePiece
        model without byte fallback) becomes its unknown piece, and no translation would
        begin with the prefix."""
        ids = self.encode(number, line, "targets", name, eos=False)
        vocabulary, unknown = self.encoders["targets"], self._unknown_target_id
        if ids is None or unknown not in ids:
            return ids
        unseen = sorted({char for char in line if unknown in vocabulary.encode(char)})
        return self._warn(number, f"{name} line {number} not translated: the target "
                          f"vocabulary cannot spell {''.join(unseen)!r} (it becomes "
                          f"{vocabulary.unknown_token}), so no translation begins with the "
                          f"prefix")

    @functools.cached_property
    def _unknown_target_id(self) -> int:
        """The id of the target vocabulary's unknown piece (one encode never gives, for a
        vocabulary that refuses what it does not know)."""
        vocabulary = self.encoders["targets"]
        return vocabulary.tokens.index(vocabulary.unknown_token)

    def _warn(self, number: int, message: str):
        """Logs what is wrong with line `number` (which keeps its place) and keeps it."""
        logging.warning("%s", message)
        self.warnings.setdefault(number, message)

    def text(self, hypothesis) -> str:
        """A hypothesis' translation: its ids decoded by the targets vocabulary."""
        return self.encoders["targets"].decode(hypothesis.ids)

    def texts(self, results: list) -> list:
        """Per line the texts of its hypotheses, best first ([] for a line not translated)."""
        return [[self.text(hypothesis) for hypothesis in hypotheses or ()]
                for hypotheses in results]

    def translate(self, lines: list, show_progress: bool = True) -> list:
        return self.translate_with_scores(lines, show_progress)[0]

    def translate_with_scores(self, lines: list, show_progress: bool = True):
        """(translations, scores) of the 1-best: beam scores (log probability / length
        penalty) or greedy log probabilities; "" and None for lines not translated."""
        outputs, scores = [], []
        with contextlib.closing(self.translate_in_order(lines, show_progress)) as windows:
            for _, results in windows:
                outputs += [texts[0] if texts else "" for texts in self.texts(results)]
                scores += [hypotheses[0].score if hypotheses else None
                           for hypotheses in results]
        return outputs, scores

    def translate_in_order(self, lines: list, show_progress: bool = True, prefixes=None,
                           first_line: int = 0, first_number: int = 1):
        """Yields (index of its first line, its results) of each window of `lines` in input
        order: a line's Hypotheses, best first, or None for a line not translated. `prefixes`:
        a target prefix per line ("": none). `first_line`: the index of lines[0] in the run
        (interactive decoding's count), which with `seed` decides a line's samples;
        `first_number`: the line number of lines[0] in its source, which the warnings name."""
        sources = [self.encode(number, line)
                   for number, line in enumerate(lines, start=first_number)]
        if prefixes is None:
            items = [None if source is None else (source,) for source in sources]
        else:
            items = [None if source is None or prefix is None else (source, prefix)
                     for source, prefix in zip(sources, (
                         self.encode_prefix(number, line)
                         for number, line in enumerate(prefixes, start=first_number)))]

        def search(batch, indices):
            sources = [item[0] for item in batch]
            batch_prefixes = [item[1] for item in batch] if prefixes is not None else None
            seeds = [(self.seed % 2 ** 31, (first_line + i) % 2 ** 31) for i in indices]
            return self.engine.search(sources, batch_prefixes, seeds)
        return self._in_order(items, search, "decoding", show_progress)

    def score_in_order(self, lines: list, targets: list, show_progress: bool = True):
        """Yields (index of its first line, its results) of each window of (line, target)
        pairs in input order: a pair's TargetScore (one teacher-forced pass a batch), or None
        for a pair not scored (an empty or unencodable source, an unencodable target)."""
        items = []
        for number, (line, target) in enumerate(zip(lines, targets), start=1):
            source = self.encode(number, line)
            target_ids = None if source is None else self.encode(number, target, "targets",
                                                                 "--score_targets")
            items.append(None if target_ids is None else (source, target_ids))

        def score(batch, indices):
            return self.engine.score([item[0] for item in batch], [item[1] for item in batch])
        return self._in_order(items, score, "scoring", show_progress)

    def _in_order(self, items: list, run_batch, what: str, show_progress: bool):
        """Yields (first index, results) of each window of `items` (tuples of source ids first,
        or None for no result), sorted by source length within WINDOW_BATCHES batches, run by
        `run_batch(batch, its items' indices)` in up to `parallel_batches` threads and put back in
        order; batches go on into the next windows meanwhile, and closing the generator
        cancels those not started."""
        batch_size = self.translator_hparams.batch_size
        window_lines = self.WINDOW_BATCHES * batch_size
        windows = []  # (first line, end, the batches of its lines' indices)
        for first in range(0, len(items), window_lines):
            end = min(first + window_lines, len(items))
            todo = sorted((i for i in range(first, end) if items[i] is not None),
                          key=lambda i: len(items[i][0]))
            windows.append((first, end, [todo[start:start + batch_size]
                                         for start in range(0, len(todo), batch_size)]))
        batches = [batch for _, _, window_batches in windows for batch in window_batches]
        results = [None] * len(items)

        def run(indices):
            return indices, run_batch([items[i] for i in indices], indices)

        def run_in_order(pool):
            """`run` of each batch, in order, in the pool's threads. A batch not done while
            none of the pool's threads lives (they end only when it shuts down) is a
            MemoryError: a thread whose start fails for want of memory ("Exception ignored in
            thread started by") ends, and its batches would be waited for for ever."""
            futures = [pool.submit(run, indices) for indices in batches]
            for future in futures:
                while not concurrent.futures.wait([future], self.THREAD_CHECK_SECONDS).done:
                    if not any(thread.name.startswith(prefix)
                               for thread in threading.enumerate()):
                        raise MemoryError(
                            f"{threads} of the {threads} threads that search batches at "
                            f"once ended before their batch was searched (a thread that "
                            f"cannot get the memory it starts with ends so)")
                yield future.result()

        threads = min(self.parallel_batches, max(len(batches), 1))
        prefix = f"search-batches-{id(results)}_"  # the pool's threads' names
        # One at a time runs in this thread, which keeps the caller's tf.device or strategy
        # scope, and starts no pool.
        pool = concurrent.futures.ThreadPoolExecutor(threads, prefix[:-1]) \
            if threads > 1 else None
        try:
            with progress_bar(what, total=sum(map(len, batches)), unit="sentences",
                              disable=not show_progress) as bar:
                done = run_in_order(pool) if pool else map(run, batches)
                for first, end, window_batches in windows:
                    for indices, batch_results in itertools.islice(done, len(window_batches)):
                        for index, result in zip(indices, batch_results):
                            results[index] = result
                        bar.update(len(indices))
                    yield first, results[first:end]
        finally:
            if pool:  # a consumer that stops early (a failed write) waits for no more batches
                pool.shutdown(wait=True, cancel_futures=True)


def exact_match(hypotheses: list, references: list) -> float:
    return sum(h == r for h, r in zip(hypotheses, references)) / max(len(references), 1)


def score(hypotheses: list, references: list) -> dict:
    """Exact-match accuracy and sacreBLEU (with its signature) of detokenized text."""
    bleu = sacrebleu.metrics.BLEU()
    result = bleu.corpus_score(hypotheses, [references])
    return {"exact_match": exact_match(hypotheses, references), "bleu": result.score,
            "bleu_signature": str(bleu.get_signature()), "bleu_text": str(result)}


def read_sentences(path: str, flag: str = None) -> list:
    """The lines of a UTF-8 file (tf.io.gfile; stdin for None) without their ends, invalid
    UTF-8 replaced by U+FFFD with a warning. A folder, a missing file or one that cannot be
    read is a DataError naming `flag` when given."""
    if path is None:
        return list(text_files.decode_lines(sys.stdin.buffer, "stdin", invalid_utf8="replace"))
    named = f"--{flag}={path}" if flag else path
    if tf.io.gfile.isdir(path):
        raise DataError(f"{named} is a folder: give a file of sentences, one a line")
    try:
        return list(text_files.read_lines(path, invalid_utf8="replace"))
    except DataError as error:
        raise DataError(f"--{flag}: {error}" if flag else str(error)) from None


def read_line_for_line(path: str, flag: str, lines: list, source: str) -> list:
    """The lines of `path` (read_sentences), a line for each of `lines` (read from `source`):
    another count is a DataError naming both files and counts."""
    paired = read_sentences(path, flag)
    if len(paired) != len(lines):
        raise DataError(f"--{flag}={path} has {len(paired)} lines but {source} has "
                        f"{len(lines)}: a line for each input line")
    return paired


def output_form(translator_hparams: TranslatorHParams) -> OutputForm:
    """What the decoder writes of each translation, from --decode_hparams."""
    hp = translator_hparams
    return OutputForm(n_best=hp.return_beams, with_scores=hp.write_beam_scores,
                      alignments=hp.alignments)


def write_translations(translator: Translator, lines: list, path: str = None,
                       show_progress: bool = True, prefixes: list = None) -> list:
    """Translates `lines` into the file `path` (stdout for None), each window as soon as it
    is decoded (with the n-best lists, scores and alignments translator_hparams ask for), and
    returns the 1-best translations. A write that fails stops the decoding at once."""
    form = output_form(translator.translator_hparams)
    with DecodingOutputs(path, len(lines), form) as written, \
            contextlib.closing(translator.translate_in_order(lines, show_progress,
                                                             prefixes)) as windows:
        for first, results in windows:
            written.write(first, translator.texts(results), results)
    return written.translations


def write_target_scores(translator: Translator, lines: list, targets: list, path: str = None,
                        show_progress: bool = True) -> list:
    """Scores each (line, target) pair into the file `path` (stdout for None) as the windows
    are scored, and returns the TargetScores (None for a pair not scored)."""
    scores = []
    with TranslationsFile(path, len(lines)) as output, \
            contextlib.closing(translator.score_in_order(lines, targets,
                                                         show_progress)) as windows:
        for _, results in windows:
            output.write([target_score_line(result) for result in results])
            scores += results
    return scores


def decode_interactively(translator: Translator, stdin=None):
    """t2t's --decode_interactive: translates a line at a time, writing and flushing each
    answer (as on stdout: output_files) before reading the next; a prompt on stderr when
    stdin is a terminal. The search is traced before the first line arrives."""
    stdin = stdin or sys.stdin.buffer
    translator.engine.search([[EOS_ID]])  # the tracing, before any line arrives
    logging.info("ready: translating stdin a line at a time (end it with Ctrl-D)")
    prompt = stdin.isatty()
    form = output_form(translator.translator_hparams)
    lines = text_files.decode_lines(_prompted_lines(stdin, prompt), "stdin",
                                    invalid_utf8="replace")
    with DecodingOutputs(None, 0, form) as written:
        for index, line in enumerate(lines):
            results = [result for _, window in translator.translate_in_order(
                [line], show_progress=False, first_line=index, first_number=index + 1)
                for result in window]
            written.write(index, translator.texts(results), results)


def _prompted_lines(stdin, prompt: bool):
    """The byte lines of stdin as they arrive, a prompt on stderr before each if asked."""
    while True:
        if prompt:
            sys.stderr.write("> ")
            sys.stderr.flush()
        line = stdin.readline()
        if not line:
            return
        yield line


def check_alignment_layer(translator_hparams: TranslatorHParams, layers: int):
    """An alignment_layer the model has (-layers <= it < layers), or an HParamsError."""
    layer = translator_hparams.alignment_layer
    if translator_hparams.alignments and not -layers <= layer < layers:
        raise HParamsError(f"--decode_hparams: alignment_layer={layer}: the model has "
                           f"{layers} decoder layers ({-layers} to {layers - 1})")


def check_sampling_topk(search_hparams: SearchHParams, vocab_size: int):
    """A sampling_topk of at most the `vocab_size` pieces there are, or an HParamsError (in
    both engines: CTranslate2 fails on more, and t2t_lite would sample among fewer silently)."""
    topk = search_hparams.sampling_topk
    if topk > vocab_size:
        raise HParamsError(f"--decode_hparams: sampling_topk={topk}: the model's vocabulary has "
                           f"{vocab_size} pieces: at most {vocab_size} (0: every piece)")
