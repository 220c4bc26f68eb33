"""Decoding text files with a trained model, and scoring the output (exact match, sacreBLEU).

Lines are sorted by length into batches (less padding), decoded, and written back in input
order, one output line per input line, as t2t's `decode_from_file` did. t2t sorted the whole
file and wrote it once every line was decoded, so that a full disk lost hours of decoding at
the end; here the lines are sorted within windows of Translator.WINDOW_BATCHES batches
(fairseq-interactive's --buffer-size does the same) and each window is written as soon as it
is decoded (`TranslationsFile`: under a temporary name, renamed when complete; on a failure
the lines completed are kept in OUT.partial).

t2t's --decode_hparams set both what the search does (search.SearchHParams) and how the
Translator batches and compiles it (TranslatorHParams); parse_decode_hparams gives each name to
the settings it belongs to.
"""
import concurrent.futures
import contextlib
import dataclasses
import itertools
import os
import sys

import keras
import sacrebleu
import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints, registry
from t2t_lite.storage import atomic_files, output_paths, outputs
from t2t_lite.storage.atomic_files import atomic_write
from t2t_lite.data import text_files
from t2t_lite.errors import DataError
from t2t_lite.data.vocab import EOS_ID
from t2t_lite.decoding.ctranslate2_translator import CTranslate2Search
from t2t_lite.decoding.search import SearchHParams, search
from t2t_lite.hparams_lib import HParamsError, parse_overrides
from t2t_lite.models.building import build_model
from t2t_lite.progress import progress_bar
from t2t_lite.storage.run_description import checked_vocabulary
from t2t_lite.storage.storage_errors import (StorageError, full_storage_message, is_full_storage,
                                     reported_full_storage)


@dataclasses.dataclass(frozen=True)
class TranslatorHParams:
    """How the Translator runs the search, the rest of t2t's --decode_hparams. batch_size:
    sentences per batch. jit_compile: the search compiled with XLA, with fixed-size caches and
    batches padded to a few shapes (off by default: on a CPU the growing caches without XLA
    are faster, benchmarks/decode_speed.py). parallel_batches: batches searched at once, each
    from a thread of its own (CTranslate2's inter_threads); 0 (the default) is one per CPU core
    when TensorFlow sees no GPU, else 1 (`parallel_batches_for`)."""
    batch_size: int = 32
    jit_compile: bool = False
    parallel_batches: int = 0


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, which a container's CPU limit
    can narrow; os.cpu_count() counts the host's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def parallel_batches_for(translator_hparams: TranslatorHParams) -> int:
    """translator_hparams.parallel_batches, with 0 resolved: one batch per CPU core on a
    CPU-only machine (a step's operations on a batch of 32 sentences x 4 beams are too small
    to keep two cores busy, so two batches at once, one thread each, translate faster:
    benchmarks/decode_speed.py), and 1 when a GPU is visible."""
    if translator_hparams.parallel_batches:
        return translator_hparams.parallel_batches
    return 1 if tf.config.list_physical_devices("GPU") else usable_cores()


def intra_op_threads_for(translator_hparams: TranslatorHParams, sentences: int) -> int:
    """The intra-op pool (one per process, shared by the batches searched at once) for
    translating `sentences` lines: 1 when there is a batch for every core at once
    (parallel_batches_for, but no more than the input's batches), each batch then running its
    operations on its own thread (as CTranslate2's intra_threads=1 x inter_threads = cores);
    else every core, shared, so that a short input still gets every core."""
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


def parse_decode_hparams(overrides: str = "") -> tuple:
    """(SearchHParams, TranslatorHParams) of a --decode_hparams string such as
    "beam_size=4,alpha=0.6,batch_size=32,jit_compile=true", over their defaults. Each name goes
    to the settings that have it; an unknown name or a bad value is an HParamsError naming
    --decode_hparams (an unknown name listing the names of both), and so is a beam_size or
    batch_size below 1 or a negative parallel_batches or stop_after_finished."""
    # One namespace of both settings' fields (their names differ), for the typed parsing.
    every_name = dataclasses.make_dataclass("DecodeHParams", [
        (field.name, field.type, dataclasses.field(default=field.default))
        for kind in DECODE_HPARAMS_KINDS for field in dataclasses.fields(kind)])
    values = parse_overrides(overrides, every_name(), "--decode_hparams", "decode hparam")
    for name, least in (("beam_size", 1), ("batch_size", 1), ("parallel_batches", 0),
                        ("stop_after_finished", 0)):
        if name in values and values[name] < least:
            raise HParamsError(f"--decode_hparams: {name}={values[name]}: must be at least "
                               f"{least}")
    return tuple(kind(**{field.name: values[field.name] for field in dataclasses.fields(kind)
                         if field.name in values})
                 for kind in DECODE_HPARAMS_KINDS)


def load_model(model_name: str, hparams, vocab_size: int, output_dir: str,
               checkpoint_path: str = None):
    """Builds the model for inference and restores `checkpoint_path` (default: the latest in
    output_dir). With hparams.mixed_precision bfloat16 or float16 it computes in that dtype
    with its weights in it too (build_model's for_inference), the checkpoint's float32 values
    cast once here, whether the model was trained so or in float32 (decoding a float32 model
    in bfloat16 is hparams.mixed_precision=bfloat16 over its recorded hparams)."""
    checkpoint_path = checkpoints.resolve(output_dir, checkpoint_path)
    model = build_model(model_name, hparams, vocab_size, for_inference=True)
    if hparams.compute_dtype == "float32":
        checkpoints.restore(checkpoint_path, model)
        logging.info("restored %s", checkpoint_path)
    else:
        _restore_cast(checkpoint_path, model)
        logging.info("restored %s, its weights cast to %s", checkpoint_path,
                     hparams.compute_dtype)
    return model


def _restore_cast(checkpoint_path: str, model):
    """checkpoints.restore into variables of another dtype than the checkpoint's (TensorFlow
    restores a variable only in the dtype it was saved in): each stored value is read and
    cast."""
    checkpoints.check_compatible(checkpoint_path, model)
    stored = checkpoints.reader(checkpoint_path)
    for path, variable in checkpoints.model_variables(model).items():
        value = stored.get_tensor(checkpoints.checkpoint_key(path))
        variable.assign(tf.cast(value, variable.dtype))


class Translator:
    """Text in, text out: encode, batch by length, search, decode.

    Lines are sorted by length into batches of translator_hparams.batch_size (less padding),
    within windows of WINDOW_BATCHES batches, and the results put back in input order, one
    window after the other (`translate_in_order`). Up to
    `parallel_batches_for(translator_hparams)` (resolved once, as `parallel_batches`) batches
    are searched at once, from threads of their own (TensorFlow runs them in parallel; each
    batch's output does not depend on the others). With XLA (translator_hparams.jit_compile),
    every batch is padded to batch_size rows and its length rounded up to a multiple of
    LENGTH_MULTIPLE, and the search keeps fixed shapes, so that it compiles for a few shapes
    only.
    No line stops the others: an empty line gives an empty translation, a line the vocabulary
    cannot encode gives an empty translation and a warning naming it, and a line longer than
    `max_input_length` tokens is cut to that length (with EOS) with a warning.
    """

    LENGTH_MULTIPLE = 16
    # Batches sorted by length together and written together: 2,048 lines at the default
    # batch_size, so that a test set of a few thousand lines keeps almost all of the gain.
    WINDOW_BATCHES = 64
    # How often a wait for a batch searched in another thread checks that the threads live.
    THREAD_CHECK_SECONDS = 1.0

    def __init__(self, model, encoders: dict, search_hparams: SearchHParams = None,
                 max_input_length: int = None, source_name: str = "input",
                 translator_hparams: TranslatorHParams = None, search_rows=None):
        self.model = model
        self.encoders = encoders
        self.search_hparams = search_hparams or SearchHParams()
        self.translator_hparams = translator_hparams or TranslatorHParams()
        self.max_input_length = max_input_length
        self.source_name = source_name
        self.parallel_batches = parallel_batches_for(self.translator_hparams)
        # One trace for every batch shape (XLA still compiles each shape it meets).
        self._search = tf.function(self._search_batch,
                                   jit_compile=self.translator_hparams.jit_compile,
                                   input_signature=[tf.TensorSpec([None, None], tf.int32)])
        # rows of source ids -> (output ids, scores) per row: the model's search, or another
        # engine's over the same model (ctranslate2_translator.CTranslate2Search).
        self.search_rows = search_rows or self._search_padded

    def _search_batch(self, inputs):
        return search(self.model, inputs, self.search_hparams,
                      fixed_shapes=self.translator_hparams.jit_compile)

    def _search_padded(self, rows: list):
        """The model's search of source id rows, padded into one batch."""
        length = max(map(len, rows))
        if self.translator_hparams.jit_compile:  # few shapes, few compilations
            batch_size = self.translator_hparams.batch_size
            rows = rows + [[EOS_ID]] * (batch_size - len(rows))
            length = -(-length // self.LENGTH_MULTIPLE) * self.LENGTH_MULTIPLE
        batch = keras.utils.pad_sequences(rows, maxlen=length, padding="post", value=0)
        ids, batch_scores = self._search(tf.constant(batch, tf.int32))
        return ids.numpy(), batch_scores.numpy()

    def encode(self, number: int, line: str):
        """Source ids ending with EOS, or None for a line that gets an empty translation."""
        if not line.strip():
            return None
        try:
            ids = self.encoders["inputs"].encode(line)
        except ValueError as error:
            logging.warning("%s line %d not translated: %s", self.source_name, number, error)
            return None
        if self.max_input_length and len(ids) + 1 > self.max_input_length:
            logging.warning("%s line %d: %d characters, %d tokens; cut to max_length=%d tokens",
                            self.source_name, number, len(line), len(ids) + 1,
                            self.max_input_length)
            ids = ids[:self.max_input_length - 1]
        return ids + [EOS_ID]

    def translate(self, lines: list, show_progress: bool = True) -> list:
        return self.translate_with_scores(lines, show_progress)[0]

    def translate_with_scores(self, lines: list, show_progress: bool = True):
        """(translations, scores): beam scores (log probability / length penalty) or greedy
        log probabilities; None for lines not translated."""
        outputs, scores = [], []
        with contextlib.closing(self.translate_in_order(lines, show_progress)) as windows:
            for _, window_outputs, window_scores in windows:
                outputs += window_outputs
                scores += window_scores
        return outputs, scores

    def translate_in_order(self, lines: list, show_progress: bool = True):
        """Yields (index of its first line, translations, scores) of one window of `lines`
        after the other, in input order, each as soon as its batches are searched: a window
        is WINDOW_BATCHES batches of lines, sorted by length within it. Batches searched at
        once (parallel_batches) go on into the next windows meanwhile; closing the generator
        cancels those not started."""
        encoded = [self.encode(number, line) for number, line in enumerate(lines, start=1)]
        batch_size = self.translator_hparams.batch_size
        window_lines = self.WINDOW_BATCHES * batch_size
        windows = []  # (first line, end, the batches of its lines' indices)
        for first in range(0, len(lines), window_lines):
            end = min(first + window_lines, len(lines))
            todo = sorted((i for i in range(first, end) if encoded[i] is not None),
                          key=lambda i: len(encoded[i]))
            windows.append((first, end, [todo[start:start + batch_size]
                                         for start in range(0, len(todo), batch_size)]))
        batches = [batch for _, _, window_batches in windows for batch in window_batches]
        outputs, scores = [""] * len(lines), [None] * len(lines)

        def search_batch(indices):
            return (indices,) + tuple(self.search_rows([encoded[i] for i in indices]))

        def searched_in_order(pool):
            """search_batch of each batch, in order, in the pool's threads. A batch not done
            while a thread of the pool has ended is a MemoryError: a thread whose start fails
            inside it for want of memory ("Exception ignored in thread started by") ends
            without the result of the batch it took, which would be waited for for ever."""
            futures = [pool.submit(search_batch, batch) for batch in batches]
            for future in futures:
                while not concurrent.futures.wait([future], self.THREAD_CHECK_SECONDS).done:
                    # The pool's own set of its threads, which end only when it shuts down.
                    ended = [thread for thread in pool._threads if not thread.is_alive()]
                    if ended:
                        raise MemoryError(
                            f"{len(ended)} of the {threads} threads that search batches at "
                            f"once ended before their batch was searched (a thread that "
                            f"cannot get the memory it starts with ends so)")
                yield future.result()

        threads = min(self.parallel_batches, max(len(batches), 1))
        # One at a time runs in this thread, which keeps the caller's tf.device or strategy
        # scope, and starts no pool.
        pool = concurrent.futures.ThreadPoolExecutor(threads) if threads > 1 else None
        try:
            with progress_bar("decoding", total=sum(map(len, batches)), unit="sentences",
                              disable=not show_progress) as bar:
                searched = searched_in_order(pool) if pool else map(search_batch, batches)
                for first, end, window_batches in windows:
                    for indices, ids, batch_scores in itertools.islice(searched,
                                                                       len(window_batches)):
                        for index, row, row_score in zip(indices, ids, batch_scores):
                            outputs[index] = self.encoders["targets"].decode([int(i) for i in row])
                            scores[index] = float(row_score)
                        bar.update(len(indices))
                    yield first, outputs[first:end], scores[first:end]
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
    """The lines of a UTF-8 file (through tf.io.gfile; or stdin for None), without their line
    ends. A line that is not valid UTF-8 is kept, with U+FFFD for its bad bytes, and a warning
    names it: every input line gets its output line. A folder, a missing file or one that
    cannot be read is a DataError, naming `flag` when given (the flag that names `path`); a
    folder would read as no lines."""
    if path is None:
        return list(text_files.decode_lines(sys.stdin.buffer, "stdin", invalid_utf8="replace"))
    named = f"--{flag}={path}" if flag else path
    if tf.io.gfile.isdir(path):
        raise DataError(f"{named} is a folder: give a file of sentences, one a line")
    try:
        return list(text_files.read_lines(path, invalid_utf8="replace"))
    except DataError as error:
        raise DataError(f"--{flag}: {error}" if flag else str(error)) from None


def write_lines(path: str, lines: list):
    """Writes UTF-8 lines atomically through tf.io.gfile (or to stdout for None)."""
    if path is None:
        sys.stdout.write("".join(line + "\n" for line in lines))
        return
    with atomic_write(path) as handle:
        handle.write("".join(line + "\n" for line in lines))


class TranslationsFile:
    """Where the decoder writes its translations, as they are done: `write` appends lines
    (in input order) and flushes them. A file is written under atomic_files' temporary name
    (`.OUT.incomplete`), created with the first lines (or at the end, for none), and renamed to
    its own when the block ends without error, so a file at OUT is always whole and an earlier
    OUT stays until then (t2t wrote OUT once every line was decoded). When a write fails or
    the block raises, the temporary is removed and the lines written before are kept in
    OUT.partial (`partial_path`) instead; a write that fails (a full disk, an I/O error) is one StorageError naming the
    flag, the file and what was kept, and any other error is preceded by a warning saying
    what was kept. A complete run removes an OUT.partial left by an earlier one. Without a
    path, lines go to stdout (a full disk there is a StorageError naming stdout)."""

    def __init__(self, path: str = None, total: int = 0, flag: str = "decode_to_file"):
        self.path, self.total, self.flag = path, total, flag
        self.written = []  # the lines written and flushed so far
        self._handle = None

    @staticmethod
    def partial_path(path: str) -> str:
        return path + ".partial"

    def __enter__(self):
        if self.path is not None:
            self._temporary = atomic_files.temporary_path(self.path)
        return self

    def _open(self):
        """Creates the temporary at the first lines to write (or at the end, for none): a
        run that dies before (out of memory, in native code) leaves no file."""
        self._handle = tf.io.gfile.GFile(self._temporary, "w")
        try:
            self._handle.write("")  # GFile creates the file at its first write
        except (OSError, tf.errors.OpError) as error:
            raise self._write_error(error, "No translation was written") from error

    def write(self, lines: list):
        text = "".join(line + "\n" for line in lines)
        if self.path is not None and self._handle is None:
            self._open()
        if self._handle is None:
            with reported_full_storage("stdout"):
                sys.stdout.write(text)
                sys.stdout.flush()
        else:
            self._handle.write(text)
            self._handle.flush()
        self.written += lines

    def __exit__(self, kind, error, traceback):
        if self.path is None:
            return False
        if error is None:
            if self._handle is None:
                self._open()  # no lines: an empty file
            try:
                self._handle.close()
                tf.io.gfile.rename(self._temporary, self.path, overwrite=True)
            except (OSError, tf.errors.OpError) as failure:
                raise self._write_error(failure, self._keep_partial()) from failure
            atomic_files.remove_if_exists(self.partial_path(self.path))
            return False
        try:
            if self._handle is not None:
                self._handle.close()
        except (OSError, tf.errors.OpError):
            pass  # the failed write's error again, or the interrupted one's
        kept = self._keep_partial()
        if isinstance(error, (OSError, tf.errors.OpError)):
            raise self._write_error(error, kept) from error
        logging.warning("decoding stopped: %s", kept)  # the error itself follows
        return False

    def _write_error(self, error, kept: str) -> StorageError:
        """One line: the flag, the file, the cause (a full disk, else the error's message), and
        what was kept."""
        if is_full_storage(error):
            cause = full_storage_message(self.path, self.flag)
        else:
            message = output_paths.one_line(getattr(error, "message", error))
            cause = f"--{self.flag}={self.path}: cannot write: {message}"
        return StorageError(f"{cause}. {kept}")

    def _keep_partial(self) -> str:
        """Writes the lines written so far to OUT.partial, once the temporary is removed
        (on a full disk it frees the space they need); says what was kept."""
        partial = self.partial_path(self.path)
        try:
            atomic_files.remove_if_exists(self._temporary)
            atomic_files.remove_if_exists(partial)  # an earlier run's: not this run's lines
            if not self.written:
                return f"No translation was kept (of {self.total} lines)"
            with atomic_write(partial) as handle:
                handle.write("".join(line + "\n" for line in self.written))
        except (OSError, tf.errors.OpError) as error:
            return (f"The translations done could not be kept in {partial} either: "
                    f"{output_paths.one_line(getattr(error, 'message', error))}")
        return (f"The translations of lines 1-{len(self.written)} (of {self.total}) are kept "
                f"in {partial}")


def write_translations(translator: Translator, lines: list, path: str = None,
                       show_progress: bool = True) -> list:
    """Translates `lines` into the file `path` (stdout for None), writing each window of
    translations as soon as it is decoded (TranslationsFile), and returns the translations.
    A write that fails stops the decoding at once."""
    with TranslationsFile(path, len(lines)) as output, \
            contextlib.closing(translator.translate_in_order(lines, show_progress)) as windows:
        for _, window_outputs, _ in windows:
            output.write(window_outputs)
    return output.written


def decode_from_file(problem_name: str, model_name: str, hparams, data_dir: str,
                     output_dir: str, decode_from: str = None, decode_to: str = None,
                     reference: str = None, search_hparams: SearchHParams = SearchHParams(),
                     translator_hparams: TranslatorHParams = TranslatorHParams(),
                     checkpoint_path: str = None, attention_dir: str = None,
                     attention_sentences: int = 5, thread_pools: tuple = None,
                     ctranslate2_model: str = None):
    """Translates every line of `decode_from` into `decode_to` as it goes
    (write_translations); with `attention_dir`, draws the attention of the first
    `attention_sentences` lines and their translations there (t2t_lite.visualize); with
    `reference`, returns and logs the scores. With `thread_pools` (intra-op, inter-op threads;
    0: chosen by size_thread_pools), sizes TensorFlow's pools once the input is read: the
    caller must not have run a TensorFlow operation yet. A data_dir whose vocabulary is not
    the one output_dir's hparams.json records is a VocabularyError before any work. With
    `ctranslate2_model` (a folder of t2t_lite-exporter --format=ctranslate2) CTranslate2
    searches instead of the checkpoint's model (ctranslate2_translator), its hparams.json
    standing for output_dir's; attention pictures need the model itself."""
    problem = registry.problem(problem_name)
    # Everything that can be wrong with the inputs and outputs fails here, before the work.
    lines = read_sentences(decode_from, "decode_from_file")
    if thread_pools is not None:
        size_thread_pools(translator_hparams, len(lines), *thread_pools)
    references = None if reference is None else read_sentences(reference, "score_reference")
    if references is not None and len(references) != len(lines):
        raise DataError(f"{reference} has {len(references)} lines but {decode_from} has "
                        f"{len(lines)}")
    checked_vocabulary(ctranslate2_model or output_dir, problem, data_dir)
    wanted = [outputs.Output.file(decode_to, "decode_to_file")] if decode_to is not None else []
    if attention_dir:
        wanted.append(outputs.Output.folder(attention_dir, "attention_dir", lock_name=None))
    # TranslationsFile names a failed write of the translations itself.
    with outputs.opened(*wanted, name_full_disk=False):
        encoders = problem.feature_encoders(data_dir)
        if ctranslate2_model:
            model = None
            search_rows = CTranslate2Search(
                ctranslate2_model, encoders["targets"].tokens, search_hparams,
                parallel_batches_for(translator_hparams),
                (thread_pools or (0,))[0] or intra_op_threads_for(translator_hparams, len(lines)))
        else:
            model = load_model(model_name, hparams, problem.vocab_size(data_dir), output_dir,
                               checkpoint_path)
            search_rows = None
        translator = Translator(model, encoders, search_hparams, problem.max_length,
                                decode_from or "stdin", translator_hparams, search_rows)
        translations = write_translations(translator, lines, decode_to)
        if attention_dir:
            from t2t_lite import visualize  # matplotlib only when pictures are asked for
            sentences = list(zip(lines, translations))[:attention_sentences]
            paths = visualize.write_attention_pictures(model, encoders, sentences, attention_dir)
            logging.info("attention pictures of %d sentences (%d files) in %s", len(sentences),
                         len(paths), attention_dir)
    if references is None:
        return None
    scores = score(translations, references)
    logging.info("exact match %.2f%% (%d sentences); %s", 100 * scores["exact_match"],
                 len(lines), scores["bleu_text"])
    return scores
