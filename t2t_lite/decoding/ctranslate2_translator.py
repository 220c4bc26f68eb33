"""Searching with a CTranslate2 model folder (`t2t_lite-decoder --ctranslate2_model=E`).

`t2t_lite-exporter --format=ctranslate2` writes the folder (serving/ctranslate2_export.py);
this module runs CTranslate2's search on batches of t2t_lite's source ids, so that the decoder's
Translator keeps its reading, batching by length, per-line handling, progress and writing, and
only the search changes hands.

What differs from t2t_lite's own search (docs/decoding.md says by how much BLEU):
- The length penalty: CTranslate2 divides a hypothesis' log probability by length^alpha (its
  `length_penalty`), t2t by GNMT's ((5 + length) / 6)^alpha; alpha is passed as it is.
- The stopping rule: CTranslate2 ends a sentence once beam_size hypotheses have finished
  (its patience 1), t2t_lite's default when no alive hypothesis can beat the best finished one.
- The length limit: one number for a batch in CTranslate2 (`max_decoding_length`), here its
  longest input + extra_length; t2t_lite allows each sentence its own input length +
  extra_length.
Greedy search (beam_size=1) has none of these differences: its output equals t2t_lite's up
to floating-point rounding (tests/serving/test_ctranslate2_export.py).
"""
import json
import os

from t2t_lite.data.vocab import EOS_ID
from t2t_lite.errors import UserError

CTRANSLATE2_EXTRA = "pip install 't2t_lite[ctranslate2]'"
SENTENCEPIECE_MODEL = "sentencepiece.model"  # beside model.bin, for SentencePiece problems
EXPORT_RECORD = "t2t_lite_export.json"  # what the exporter wrote the folder from


class CTranslate2Error(UserError, RuntimeError):
    """CTranslate2 is not installed, or a folder is not a CTranslate2 model t2t_lite wrote."""


def import_ctranslate2():
    """The ctranslate2 module, or one CTranslate2Error naming the extra that installs it."""
    try:
        import ctranslate2
    except ImportError as error:
        raise CTranslate2Error(f"CTranslate2 is not installed ({error}): {CTRANSLATE2_EXTRA}") \
            from error
    return ctranslate2


def export_record(folder: str) -> dict:
    """The exporter's record of `folder` (checkpoint, quantization, max_positions), or a
    CTranslate2Error when the folder is not one t2t_lite-exporter wrote."""
    path = os.path.join(folder, EXPORT_RECORD)
    if not os.path.isfile(os.path.join(folder, "model.bin")) or not os.path.isfile(path):
        raise CTranslate2Error(f"--ctranslate2_model={folder} is not a CTranslate2 model "
                               f"written by t2t_lite-exporter --format=ctranslate2 (no "
                               f"model.bin and {EXPORT_RECORD} there)")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


class CTranslate2Search:
    """Callable rows -> (ids, scores), the search of decoder.Translator done by CTranslate2.

    rows: source ids, each ending with EOS (Translator.encode's); the EOS is left to the
    model's config (add_source_eos). Returns, per row, the output ids ending with EOS and the
    score CTranslate2 gives the hypothesis (log probability / length^alpha).

    Args:
        folder: the exported model folder.
        tokens: the vocabulary's tokens in id order (vocabulary.tokens), the folder's too.
        search_hparams: beam_size, alpha (CTranslate2's length_penalty) and extra_length.
        parallel_batches: batches searched at once (CTranslate2's inter_threads).
        threads: the threads of each (intra_threads; the decoder's intra-op choice).
    """

    def __init__(self, folder: str, tokens: list, search_hparams, parallel_batches: int = 1,
                 threads: int = 1):
        ctranslate2 = import_ctranslate2()
        self.max_positions = export_record(folder)["max_positions"]
        self.tokens = tokens
        self.ids = {token: i for i, token in enumerate(tokens)}
        self.search_hparams = search_hparams
        self.translator = ctranslate2.Translator(
            folder, device="cpu", compute_type="default", inter_threads=parallel_batches,
            intra_threads=threads)

    def __call__(self, rows: list):
        hp = self.search_hparams
        sources = [[self.tokens[i] for i in row[:-1]] for row in rows]  # EOS: the config's
        limit = min(max(map(len, rows)) + hp.extra_length, self.max_positions)
        results = self.translator.translate_batch(
            sources, beam_size=hp.beam_size, length_penalty=hp.alpha,
            max_decoding_length=limit, max_input_length=0, return_scores=True)
        ids = [[self.ids[token] for token in result.hypotheses[0]] + [EOS_ID]
               for result in results]
        return ids, [result.scores[0] for result in results]
