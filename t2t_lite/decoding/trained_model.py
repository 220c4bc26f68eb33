"""A trained model opened for inference, the one way the decoder, both exporters and
`t2t_lite.load` take one: its hparams.json record (`open_run`: inference may change only
mixed_precision), its vocabulary, its checkpoint; and `TranslationModel`, which translates and
scores sentences with the model or with its CTranslate2 folder alike."""
import dataclasses
import os

from absl import logging

from t2t_lite import checkpoints, registry
from t2t_lite.decoding.ctranslate2_translator import EXPORT_RECORD, CTranslate2Engine
from t2t_lite.decoding.decoder import (SCORING_SETTINGS, Translator, check_alignment_layer,
                                       check_sampling_topk,
                                       parallel_batches_for, intra_op_threads_for,
                                       parse_decode_hparams)
from t2t_lite.decoding.results import TargetScore, Translation, Translations
from t2t_lite.errors import FlagError
from t2t_lite.hparams_lib import TRAINING_ONLY_HPARAMS, HParamsError, parse_overrides
from t2t_lite.models import restoring
from t2t_lite.storage.run_description import (checked_vocabulary, description_path,
                                              listed_changes, recorded_vocabulary, saved_run)

# What inference may take other than the record: the dtype it computes in.
INFERENCE_SETTINGS = frozenset({"mixed_precision"})
# Checkpoint names: the trainer's best, the average where the README writes it.
RUN_FOLDERS = {"best": "best", "averaged": os.path.join("averaged", "model.ckpt")}


@dataclasses.dataclass
class TrainedRun:
    """A trained run's folder (or a CTranslate2 folder exported from one), the problem, model
    and hparams to use it with, and its vocabulary's folder."""
    folder: str
    problem_name: str
    model_name: str
    hparams: object
    data_dir: str

    @property
    def problem(self):
        return registry.problem(self.problem_name)

    @property
    def ctranslate2(self) -> bool:
        """Whether the folder is a CTranslate2 model (t2t_lite-exporter --format=ctranslate2)."""
        return os.path.isfile(os.path.join(self.folder, EXPORT_RECORD))

    def check_vocabulary(self) -> dict:
        """The vocabulary record, or a VocabularyError when data_dir's is not the recorded one."""
        return checked_vocabulary(self.folder, self.problem, self.data_dir)

    def checkpoint(self, path: str = None) -> str:
        """The checkpoint prefix of `path` (a prefix, a folder, or one of RUN_FOLDERS in the
        run's folder), by default the latest; a CheckpointError lists those that exist."""
        if path in RUN_FOLDERS and not os.path.exists(path):
            path = os.path.join(self.folder, RUN_FOLDERS[path])
        return checkpoints.resolve(self.folder, path)

    def load_model(self, checkpoint: str = None, hparams=None):
        """The model restored from `checkpoint` (`checkpoint`'s) with `hparams` (the run's)."""
        return restoring.load_model(self.model_name, hparams or self.hparams,
                                    self.problem.vocab_size(self.data_dir), self.folder,
                                    self.checkpoint(checkpoint))


def open_run(folder: str, data_dir: str = None, problem: str = None, model: str = None,
             hparams_set: str = None, hparams="") -> TrainedRun:
    """The run `folder`'s hparams.json records, where `problem` and `model` may only repeat
    the record and `hparams_set` and `hparams` ("a=1,b=x" or a dict) change only what
    inference may (inference_hparams); without hparams.json, the arguments'. `data_dir`: the
    vocabulary's folder (default: the recorded one). Runs no TensorFlow op."""
    run, path = saved_run(folder), description_path(folder)
    for name, value in (("problem", problem), ("hparams_set", hparams_set)):
        if not (run or value):
            raise FlagError(f"--{name} is required (no hparams.json in --output_dir)")
    names = recorded_names(run, path, problem, model) if run else (problem,
                                                                   model or "transformer")
    requested = _requested(run.get("hparams"), hparams_set, hparams)
    if run:
        given = " ".join(f"--{name}={value}" for name, value in
                         (("hparams_set", hparams_set), ("hparams", hparams)) if value)
        requested = inference_hparams(run["hparams"], requested, path, given)
    data_dir = data_dir or (recorded_vocabulary(folder) or {}).get("data_dir")
    if not data_dir:
        raise FlagError(f"--data_dir is required ({path} records no vocabulary)")
    return TrainedRun(folder, *names, requested, data_dir)


def _requested(recorded, hparams_set: str, overrides):
    """The hparams set `hparams_set` (default: `recorded`) with the --hparams `overrides`
    ("a=1,b=x" or a dict), type-checked; a FlagError names the flag at fault."""
    try:
        hparams = registry.hparams(hparams_set) if hparams_set else recorded
    except registry.RegistryError as error:
        raise FlagError(f"--hparams_set: {error}") from None
    changes = overrides if isinstance(overrides, dict) else parse_overrides(
        overrides or "", hparams, "--hparams")
    try:
        return type(hparams).from_dict({**hparams.to_dict(), **changes})
    except HParamsError as error:
        raise FlagError(f"--hparams: {error}") from None


def recorded_names(run: dict, path: str, problem: str = None, model: str = None) -> tuple:
    """(problem name, model name) of the `run` recorded in `path`; a `problem` or `model`
    asked for (None: not asked) that differs is a FlagError naming both and `path`."""
    requested = {"problem": problem, "model": model}
    refused = {name: (run[name], value) for name, value in requested.items()
               if value is not None and value != run[name]}
    if refused:
        given = " ".join(f"--{name}={value}" for name, (_, value) in refused.items())
        several = len(refused) > 1
        raise FlagError(
            f"{given} {'differ' if several else 'differs'} from the trained model: "
            f"{listed_changes(refused, path)}. A trained model is decoded and exported with the "
            f"problem and model it was trained on: drop {'them' if several else 'it'} from "
            f"the flags")
    return run["problem"], run["model"]


def inference_hparams(recorded, requested, path: str, given: str):
    """The `recorded` hparams with the `requested` INFERENCE_SETTINGS ("auto": the record's);
    what only training reads is ignored with a warning, any other difference (a checkpoint
    would restore into another shape dropping weights) is a FlagError naming each hparam,
    both values, `path` and the flags `given`."""
    for name in ("mixed_precision", "length_bucketing"):  # "auto": the trainer's choice
        if getattr(requested, name) == "auto":
            requested = requested.replace(**{name: getattr(recorded, name)})
    before, after = recorded.to_dict(), requested.to_dict()
    changed = {name: (before[name], after[name]) for name in before
               if before[name] != after[name]}
    refused = {name: values for name, values in changed.items()
               if name not in INFERENCE_SETTINGS | TRAINING_ONLY_HPARAMS}
    if refused:
        raise FlagError(
            f"{given} changes the trained model: {listed_changes(refused, path)}. A trained "
            f"model is decoded and exported as it was trained (only mixed_precision may "
            f"change): drop "
            f"{'them' if len(refused) > 1 else 'it'} from the flags")
    ignored = {name: values for name, values in changed.items()
               if name in TRAINING_ONLY_HPARAMS}
    if ignored:
        logging.warning("%s: ignored, only training reads them: %s", given,
                        listed_changes(ignored, path))
    return recorded.replace(**{name: after[name] for name in changed
                               if name in INFERENCE_SETTINGS})


def decode_hparams(settings: dict) -> tuple:
    """(SearchHParams, TranslatorHParams) of decode settings given as keywords, by the one
    parser of --decode_hparams (the same names, defaults and checks)."""
    for name, value in settings.items():
        if not isinstance(value, (bool, int, float, str)) or set(str(value)) & set(",="):
            raise HParamsError(f"--decode_hparams: {name}={value!r}: expected a number or a word")
    return parse_decode_hparams(",".join(f"{name}={value}" for name, value in settings.items()))


class TranslationModel:
    """A trained model that translates and scores sentences (t2t_lite.load's), searched by
    t2t_lite or, for a CTranslate2 folder, by CTranslate2, through the decoder's Translator:
    `run` a TrainedRun whose vocabulary is checked, `checkpoint` TrainedRun.checkpoint's,
    `seed` sampling's, `intra_op_threads` CTranslate2's per batch (0: the decoder's choice).
    Its translate calls are one run, as the lines of one decoder input: with sampling, a
    sentence's samples are decided by the seed and its index among the sentences translated
    since the model was made."""

    def __init__(self, run: TrainedRun, checkpoint: str = None, seed: int = 0,
                 intra_op_threads: int = 0):
        if run.ctranslate2 and checkpoint:
            raise FlagError(f"a checkpoint does not go with the CTranslate2 model {run.folder}")
        self.run, self.seed, self.intra_op_threads = run, seed, intra_op_threads
        self.encoders = run.problem.feature_encoders(run.data_dir)
        self.model = None if run.ctranslate2 else run.load_model(checkpoint)
        self._translators = {}
        self.sentences_translated = 0

    def translator(self, search_hparams, translator_hparams, sentences: int = 1,
                   source_name: str = "input") -> Translator:
        """The Translator of these settings for `sentences` lines (kept for the next call)."""
        if self.model is not None:
            check_alignment_layer(translator_hparams, self.run.hparams.decoder_layers)
        check_sampling_topk(search_hparams, self.encoders["targets"].vocab_size)
        threads = self.intra_op_threads or intra_op_threads_for(translator_hparams, sentences)
        key = (search_hparams, translator_hparams, source_name,
               threads if self.model is None else 0)
        if key not in self._translators:
            engine = None if self.model is not None else CTranslate2Engine(
                self.run.folder, self.encoders["targets"].tokens, search_hparams,
                parallel_batches_for(translator_hparams), threads,
                alignments=translator_hparams.alignments)
            self._translators[key] = Translator(
                self.model, self.encoders, search_hparams, self.run.problem.max_length,
                source_name, translator_hparams, engine, self.seed)
        return self._translators[key]

    def translate(self, sentences: list, prefixes: list = None, **settings) -> list:
        """Translates `sentences` with --decode_hparams' settings as keywords (beam_size,
        alpha, num_hypotheses, extra_length, sampling_topk, alignments=True ...), each
        beginning with its `prefixes` ("": none). Returns per sentence its Translations
        (results.py): hypotheses best first, [] for one not translated, with its error."""
        first_line = self.sentences_translated
        translator, results = self._results(settings, sentences, lambda translator, lines: (
            translator.translate_in_order(lines, False, prefixes, first_line)))
        self.sentences_translated += len(results)
        return [Translations([Translation(translator.text(hypothesis), *hypothesis[1:])
                              for hypothesis in hypotheses or ()], error)
                for hypotheses, error in results]

    def score(self, sources: list, targets: list, **settings) -> list:
        """The model's log-likelihood of each target given its source, nothing searched:
        per pair a results.TargetScore (log_likelihood, pieces, mean; None and 0 for a pair
        not scored, with its error). `settings`: batch_size, parallel_batches; any other
        decode setting is an HParamsError (scoring searches nothing)."""
        refused = sorted(set(settings) - SCORING_SETTINGS)
        if refused:
            raise HParamsError(f"--decode_hparams: {', '.join(refused)} does not apply to "
                               f"scoring (it searches nothing: "
                               f"{' and '.join(sorted(SCORING_SETTINGS))} apply)")
        _, results = self._results(settings, sources, lambda translator, lines: (
            translator.score_in_order(lines, list(targets), False)))
        return [(result or TargetScore(None, 0))._replace(error=error)
                for result, error in results]

    def _results(self, settings: dict, sentences, windows) -> tuple:
        """(the Translator of the decode `settings`, per sentence its result and its error:
        the decoder's warning, "empty" or None) of `windows(translator, sentences)`."""
        sentences = list(sentences)
        translator = self.translator(*decode_hparams(settings), len(sentences))
        translator.warnings.clear()
        results = [result for _, window in windows(translator, sentences) for result in window]
        return translator, [(result, translator.warnings.get(number) or (
            None if sentence.strip() else "empty"))
            for number, (sentence, result) in enumerate(zip(sentences, results), 1)]


def load(folder: str, checkpoint: str = None, data_dir: str = None, hparams="",
         seed: int = 0) -> TranslationModel:
    """t2t_lite.load: the TranslationModel of a trained run's folder or a CTranslate2 folder."""
    run = open_run(folder, data_dir, hparams=hparams)
    run.check_vocabulary()
    return TranslationModel(run, checkpoint, seed)
