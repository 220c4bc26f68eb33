"""Datagen's --vocab_from: the vocabulary of another data folder, of a trained model (found by its
hparams.json record and checked by sha256) or a SentencePiece file, copied atomically under the
new problem's name so that the new data's ids mean what the model's mean (docs/problems.md)."""
import dataclasses
import hashlib
import json
import os

import tensorflow as tf

from t2t_lite.data.records import file_sha256
from t2t_lite.data.vocab import SentencePieceVocabulary
from t2t_lite.errors import DataError
from t2t_lite.storage import atomic_files, output_paths, run_description

VOCABULARY_PATTERN = "vocab.*.model"  # the names of datagen's vocabulary files
TRAINED = "trained"  # the origin of a vocabulary trained in its data folder
SHORT = run_description.SHORT_SHA256  # hex digits of a sha256 in messages
_SUFFIX = ".model"


@dataclasses.dataclass(frozen=True)
class VocabularySource:
    """The vocabulary file --vocab_from names: its path, content, sha256, and the origin to
    record (`origin_record`)."""
    vocab_from: str  # --vocab_from as given, made absolute
    path: str        # the file
    contents: bytes
    sha256: str

    def origin_record(self) -> dict:
        return {"from": self.vocab_from, "file": self.path, "sha256": self.sha256}

    def described(self) -> str:
        """"FILE (sha256 0123456789ab)", with "from --vocab_from=PATH" when PATH is a folder."""
        text = f"{self.path} (sha256 {self.sha256[:SHORT]})"
        if self.path == self.vocab_from:
            return text
        return f"{text}, from --vocab_from={self.vocab_from}"


def find(vocab_from: str) -> VocabularySource:
    """The vocabulary file that --vocab_from=`vocab_from` names (see the module's docstring),
    read and checked; DataError naming it when there is none, several, or one that is not the
    one a trained model's record names."""
    given = output_paths.absolute(vocab_from)
    if not tf.io.gfile.exists(given):
        raise DataError(f"--vocab_from={vocab_from}: no such file or folder")
    if tf.io.gfile.isdir(given):
        path, recorded_sha256 = _in_folder(given)
    else:
        path, recorded_sha256 = given, None
    with tf.io.gfile.GFile(path, "rb") as handle:
        contents = handle.read()
    sha256 = hashlib.sha256(contents).hexdigest()
    if recorded_sha256 is not None and sha256 != recorded_sha256:
        raise DataError(
            f"--vocab_from={vocab_from}: {path} (sha256 {sha256[:SHORT]}) is not the vocabulary "
            f"the model was trained with: {run_description.description_path(given)} records "
            f"{path} with sha256 {recorded_sha256[:SHORT]} (its data folder was generated "
            f"again since). Pass a copy of the model's own vocabulary file with "
            f"--vocab_from=FILE")
    try:
        SentencePieceVocabulary(path)
    except DataError:
        raise DataError(f"--vocab_from={vocab_from}: {path} is not a SentencePiece vocabulary "
                        f"of t2t_lite ({len(contents):,} bytes; datagen writes them as "
                        f"{VOCABULARY_PATTERN}, with PAD = 0 and EOS = 1)") from None
    return VocabularySource(given, path, contents, sha256)


def _in_folder(folder: str) -> tuple:
    """(vocabulary file, recorded sha256 or None) of a trained model's folder (by its record)
    or else of a data folder (its one vocab.*.model)."""
    record_path = run_description.description_path(folder)
    record = (run_description.recorded_vocabulary(folder)
              if tf.io.gfile.exists(record_path) else None)
    if record is not None:
        return _recorded_file(folder, record, record_path)
    found = sorted(tf.io.gfile.glob(os.path.join(folder, VOCABULARY_PATTERN)))
    if len(found) > 1:
        names = ", ".join(os.path.basename(path) for path in found)
        raise DataError(f"--vocab_from={folder} holds several vocabularies ({names}): pass the "
                        f"one to take, e.g. --vocab_from={found[0]}")
    if not found:
        raise DataError(f"--vocab_from={folder} holds no vocabulary: neither a "
                        f"{VOCABULARY_PATTERN} (a data folder's) nor an hparams.json that "
                        f"records one (a trained model's folder). Pass a data folder, a "
                        f"trained model's folder or a SentencePiece .model file")
    return found[0], None


def _recorded_file(folder: str, record: dict, record_path: str) -> tuple:
    """(file, sha256) that a trained model's "vocabulary" record names."""
    files = record["files"]
    if not files:
        raise DataError(f"--vocab_from={folder}: the model there has a vocabulary made in code "
                        f"({record['vocab_size']} ids, see {record_path}), not a file to take")
    if len(files) > 1:
        names = ", ".join(_joined(record.get("data_dir"), file["name"]) for file in files)
        raise DataError(f"--vocab_from={folder}: {record_path} records several vocabulary files "
                        f"({names}): pass the one to take with --vocab_from=FILE")
    path = _joined(record.get("data_dir"), files[0]["name"])
    if not tf.io.gfile.exists(path):
        raise DataError(
            f"--vocab_from={folder}: {record_path} records the vocabulary {path} (sha256 "
            f"{files[0]['sha256'][:SHORT]}), which is no longer there. Pass a copy of that file "
            f"with --vocab_from=FILE")
    return path, files[0]["sha256"]


def origin_path(vocabulary_path: str) -> str:
    """The record of where a copied vocabulary came from, beside it: vocab.P.bpe.origin.json for
    vocab.P.bpe.model (not a name that starts with the vocabulary's: on ram:// it would make
    the vocabulary look present)."""
    stem = (vocabulary_path[:-len(_SUFFIX)] if vocabulary_path.endswith(_SUFFIX)
            else vocabulary_path + "_")
    return stem + ".origin.json"


def origin(vocabulary_path: str) -> dict:
    """Where the vocabulary file at `vocabulary_path` came from, as a manifest records it:
    the record beside it when it is of this file (its sha256), else {"from": "trained"}; with
    the file's sha256."""
    sha256 = file_sha256(vocabulary_path)
    recorded = _read_origin(vocabulary_path)
    if recorded and recorded.get("sha256") == sha256:
        return recorded
    return {"from": TRAINED, "sha256": sha256}


def _read_origin(vocabulary_path: str):
    path = origin_path(vocabulary_path)
    try:
        with tf.io.gfile.GFile(path, "r") as handle:
            recorded = json.loads(handle.read())
    except (tf.errors.OpError, ValueError):  # none (NotFoundError), or not one of ours
        return None
    return recorded if isinstance(recorded, dict) and isinstance(recorded.get("from"),
                                                                 str) else None


def check_replaces(vocabulary_path: str, source: VocabularySource, data_dir: str):
    """Nothing when data_dir has no vocabulary yet or holds `source`'s (the same sha256, kept);
    else a DataError naming both files: the data already there was encoded with the other."""
    if not tf.io.gfile.exists(vocabulary_path):
        return
    there = origin(vocabulary_path)
    if there["sha256"] == source.sha256:
        return
    how = ("trained there" if there["from"] == TRAINED
           else f"taken from --vocab_from={there['from']}")
    raise DataError(
        f"--data_dir={data_dir} already holds another vocabulary: {vocabulary_path} (sha256 "
        f"{there['sha256'][:SHORT]}, {how}) is not {source.described()}. The data there was "
        f"encoded with it: use another --data_dir, or empty this one to start again")


def copy(source: VocabularySource, vocabulary_path: str):
    """Writes `source`'s bytes to `vocabulary_path` atomically, and the record of its origin
    beside it first (a record without its file is ignored: `origin` compares the sha256)."""
    tf.io.gfile.makedirs(os.path.dirname(vocabulary_path))
    with atomic_files.atomic_write(origin_path(vocabulary_path)) as handle:
        handle.write(json.dumps(source.origin_record(), indent=1) + "\n")
    with atomic_files.atomic_write(vocabulary_path, "wb") as handle:
        handle.write(source.contents)


def forget_origin(vocabulary_path: str):
    """Removes the record of a copied vocabulary's origin (before one is trained there)."""
    atomic_files.remove_if_exists(origin_path(vocabulary_path))


def _joined(folder: str, name: str) -> str:
    return tf.io.gfile.join(folder, name) if folder else name
