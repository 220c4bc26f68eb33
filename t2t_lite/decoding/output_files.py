"""The files a decoding writes as it goes (docs/decoding.md has their formats): the
translations (with `write_beam_scores` each 1-best's score after a tab), beside them OUT.nbest
(Moses n-best lines `index ||| translation ||| score`) and OUT.align (the 1-best's `i-j`
pairs) when asked; or the scores of given translations (`log-likelihood<TAB>pieces<TAB>mean`).
Each is a TranslationsFile (whole or kept in OUT.partial); on stdout an input's n-best lines or
its 1-best, with ` ||| i-j ...` for alignments. A line not translated keeps its place, empty.
"""
import dataclasses
import sys

import tensorflow as tf
from absl import logging

from t2t_lite.decoding.alignments import alignment_text
from t2t_lite.storage import atomic_files, output_paths
from t2t_lite.storage.atomic_files import atomic_write
from t2t_lite.storage.storage_errors import (StorageError, full_storage_message, is_full_storage,
                                             reported_full_storage)

NBEST_SUFFIX = ".nbest"
ALIGNMENT_SUFFIX = ".align"


@dataclasses.dataclass(frozen=True)
class OutputForm:
    """What is written of each translation (the decoder's return_beams, write_beam_scores and
    alignments)."""
    n_best: bool = False
    with_scores: bool = False
    alignments: bool = False

    def paths(self, path: str) -> dict:
        """{what: file} of a decoding into `path`: the translations, and the n-best lists and
        alignments when asked."""
        paths = {"translations": path}
        if self.n_best:
            paths["n_best"] = path + NBEST_SUFFIX
        if self.alignments:
            paths["alignments"] = path + ALIGNMENT_SUFFIX
        return paths


def score_text(score) -> str:
    """A score as written: 6 decimals, '' for none (a line not translated)."""
    return "" if score is None else f"{score:.6f}"


def best_line(text: str, hypotheses, form: OutputForm) -> str:
    """The 1-best line of one input: its translation (''), with its score after a tab."""
    if not form.with_scores:
        return text
    return f"{text}\t{score_text(hypotheses[0].score if hypotheses else None)}"


def n_best_lines(index: int, texts: list, hypotheses) -> list:
    """Moses n-best lines of input `index` (0-based): one per hypothesis, best first; one with
    an empty translation and score for a line not translated."""
    if not hypotheses:
        return [f"{index} |||  ||| "]
    return [f"{index} ||| {text} ||| {score_text(hypothesis.score)}"
            for text, hypothesis in zip(texts, hypotheses)]


def target_score_line(target_score) -> str:
    """A scored pair's line: log-likelihood, pieces and mean per piece, tab-separated ('' for a
    pair not scored)."""
    if target_score is None:
        return ""
    return (f"{score_text(target_score.log_likelihood)}\t{target_score.pieces}\t"
            f"{score_text(target_score.mean)}")


def write_lines(path: str, lines: list):
    """Writes UTF-8 lines atomically through tf.io.gfile (or to stdout for None)."""
    if path is None:
        sys.stdout.write("".join(line + "\n" for line in lines))
        return
    with atomic_write(path) as handle:
        handle.write("".join(line + "\n" for line in lines))


class TranslationsFile:
    """Where the decoder writes its translations as they are done: `write` appends lines in
    input order and flushes them, under atomic_files' temporary name (created with the first
    lines), renamed to OUT when the block ends without error (a complete run removes an older
    OUT.partial). On a failure the lines written are kept in OUT.partial (`partial_path`): a
    failed write is one StorageError naming the flag, the file and what was kept, any other
    error follows a warning saying so. Without a path, lines go to stdout."""

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


class DecodingOutputs:
    """The TranslationsFiles of one decoding into `path` (stdout for None), in `form`; `write`
    adds the lines of a window of results, in input order, to each.

    Args:
        path: --decode_to_file, or None for stdout.
        total: the input's lines (for what a failure says was kept).
        form: OutputForm.
    """

    def __init__(self, path: str, total: int, form: OutputForm = OutputForm()):
        self.path, self.form = path, form
        paths = {"translations": None} if path is None else form.paths(path)
        self.files = {what: TranslationsFile(file, total) for what, file in paths.items()}
        self.translations = []  # the 1-best texts written so far

    def __enter__(self):
        for output in self.files.values():
            output.__enter__()
        return self

    def __exit__(self, kind, error, traceback):
        failure = None
        for output in self.files.values():
            try:
                output.__exit__(kind, error, traceback)
            except StorageError as closing:
                failure = failure or closing
        if failure is not None:
            raise failure
        return False

    def write(self, first: int, texts: list, results: list):
        """Writes the window of inputs first, first + 1, ...: `texts` per input the texts of
        its hypotheses ([] for a line not translated), `results` its Hypotheses (None)."""
        best = [text[0] if text else "" for text in texts]
        lines = {"translations": [best_line(text, hypotheses, self.form)
                                  for text, hypotheses in zip(best, results)]}
        if self.path is None:
            lines["translations"] = self._stdout_lines(first, texts, results,
                                                       lines["translations"])
        else:
            if self.form.n_best:
                lines["n_best"] = [line for index, (text, hypotheses) in
                                   enumerate(zip(texts, results), start=first)
                                   for line in n_best_lines(index, text, hypotheses)]
            if self.form.alignments:
                lines["alignments"] = [alignment_text(hypotheses[0].alignment if hypotheses
                                                      else ()) for hypotheses in results]
        for what, output in self.files.items():
            output.write(lines[what])
        self.translations += best

    def _stdout_lines(self, first, texts, results, best):
        """One input's lines on stdout: its n-best lines with return_beams, else its 1-best,
        ' ||| ' and its alignment after each with alignments."""
        lines = []
        for index, (text, hypotheses, line) in enumerate(zip(texts, results, best),
                                                         start=first):
            these = n_best_lines(index, text, hypotheses) if self.form.n_best else [line]
            if self.form.alignments:
                alignments = [hypothesis.alignment for hypothesis in hypotheses or ()] or [()]
                these = [f"{line} ||| {alignment_text(pairs)}"
                         for line, pairs in zip(these, alignments)]
            lines += these
        return lines
