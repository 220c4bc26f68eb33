"""Typed hyperparameters and tensor2tensor's "name=value,name=value" overrides.

tensor2tensor kept its hyperparameters in an untyped bag of about 150 keys. Here they are one
dataclass with a documented field per key; the names are tensor2tensor's so that a user's
`--hparams="num_hidden_layers=2,learning_rate_warmup_steps=400"` means what it meant there.
"""
import dataclasses
import math
import typing
from typing import Tuple

from t2t_lite.errors import UserError, unknown_name_message
from t2t_lite.learning_rate_factors import LEARNING_RATE_FACTORS

# The allowed values of the hparams below. The first two are what layers/sublayer.py and
# layers/timing_signal.py compute (their OPERATIONS and FORMS), spelled in both places: the
# model passes the layers these values, and neither module imports the other.
SUBLAYER_OPERATIONS = "nda"  # n: layer norm, d: dropout, a: add the residual
TIMING_SIGNALS = ("concat", "interleaved")
MIXED_PRECISION = ("auto", "float32", "bfloat16", "float16")
LENGTH_BUCKETING = ("auto", "longer", "each")

# The hparams of how the weights are optimised: the learning-rate schedule, Adam's constants,
# gradient clipping, dropout, label smoothing and the loss's chunking. They change neither the
# variables, nor the function a checkpoint computes, nor the order of the batches, so a
# resumed run may change them (the trainer records the change in hparams.json).
OPTIMIZATION_HPARAMS = frozenset({
    "learning_rate_schedule", "learning_rate_constant", "learning_rate_warmup_steps",
    "optimizer_adam_beta1", "optimizer_adam_beta2", "optimizer_adam_epsilon", "clip_grad_norm",
    "layer_prepostprocess_dropout", "attention_dropout", "relu_dropout", "label_smoothing",
    "output_layer_chunk_rows"})
# What training alone reads: the optimisation, and how the examples are batched, the updates
# accumulated and the weights first drawn. A trained model computes the same without them, so
# decoding and exporting it ignore them.
TRAINING_ONLY_HPARAMS = OPTIMIZATION_HPARAMS | frozenset({
    "optimizer_multistep_accumulate_steps", "initializer_gain", "batch_size", "max_length",
    "min_length_bucket", "length_bucket_step", "length_bucketing", "sentencepiece_alpha"})


class HParamsError(UserError, ValueError):
    """A bad hyperparameter name, value or override string."""


@dataclasses.dataclass(frozen=True)
class HParams:
    """The hyperparameters of a Transformer run, with tensor2tensor's names and meanings.

    The defaults are `transformer_base` (tensor2tensor's v3 defaults); `hparams/transformer.py`
    registers the named sets that change them.
    """

    # --- Model size (paper Table 3, "base") ---
    hidden_size: int = 512                   # d_model
    filter_size: int = 2048                  # d_ff, the inner size of the feed-forward network
    num_heads: int = 8                       # h
    num_hidden_layers: int = 6               # N, for both stacks unless overridden below
    num_encoder_layers: int = 0              # 0: use num_hidden_layers
    num_decoder_layers: int = 0              # 0: use num_hidden_layers
    # --- Sublayer connection: t2t's layer_preprocess / layer_postprocess sequences ---
    # "n" / "da" is pre-norm: x + dropout(f(norm(x))), with a final norm after each stack.
    # "none" / "dan" is the paper's post-norm: norm(x + dropout(f(x))).
    layer_preprocess_sequence: str = "n"
    layer_postprocess_sequence: str = "da"
    norm_epsilon: float = 1e-6
    # --- Regularisation (paper §5.4) ---
    layer_prepostprocess_dropout: float = 0.1  # residual dropout, also applied to the embeddings
    attention_dropout: float = 0.1           # on the attention weights
    relu_dropout: float = 0.1                # inside the feed-forward network, after the relu
    label_smoothing: float = 0.1
    # The training and evaluation loss project this many target positions to the vocabulary at
    # a time, fused with the softmax, the loss and its gradient (training/output_layer_loss.py);
    # 0 computes the whole batch's logits unfused. Smaller chunks hold less memory (a large
    # vocabulary on a GPU); on a CPU one chunk per 4096-token batch was the fastest.
    output_layer_chunk_rows: int = 4096
    # --- Embeddings and positions (paper §3.4, §3.5) ---
    shared_embedding_and_softmax_weights: bool = True
    timing_signal: str = "concat"            # t2t's sin|cos halves, or the paper's "interleaved"
    initializer_gain: float = 1.0            # Glorot-uniform scale (t2t's uniform_unit_scaling)
    # --- Optimiser (paper §5.3) ---
    optimizer_adam_beta1: float = 0.9
    optimizer_adam_beta2: float = 0.997
    optimizer_adam_epsilon: float = 1e-9
    clip_grad_norm: float = 0.0              # 0: no clipping
    learning_rate_schedule: Tuple[str, ...] = (
        "constant", "linear_warmup", "rsqrt_decay", "rsqrt_hidden_size")
    learning_rate_constant: float = 2.0
    learning_rate_warmup_steps: int = 8000
    # Gradients of this many batches are averaged into one update (t2t's MultistepAdam), so
    # that the paper's 25,000-token batches fit on one device; the schedule counts updates.
    optimizer_multistep_accumulate_steps: int = 1
    # --- Precision: the compute dtype of the layers. Weights, softmax, layer-norm statistics
    # and the loss stay float32; float16 adds dynamic loss scaling. "auto": the trainer picks
    # bfloat16 on a CPU that multiplies in it (AVX512_BF16 or AMX) with no GPU, float32
    # elsewhere, and records its choice (training.trainer.mixed_precision_for); anywhere else
    # "auto" computes in float32 (compute_dtype). ---
    mixed_precision: str = "auto"
    # --- Input pipeline (t2t's data_reader) ---
    batch_size: int = 4096                   # tokens per batch (longest of source and target)
    max_length: int = 256                    # training drops longer examples
    min_length_bucket: int = 8
    length_bucket_step: float = 1.1
    # "longer": t2t's, an example's length is the longer of source and target, one batch shape
    # per bucket (XLA compiles once per bucket). "each": source and target lengths bucketed
    # separately on the same boundaries: less padding, but a batch shape per pair of buckets
    # (~300): for training without XLA. "auto": the trainer picks "each" when its step runs
    # without XLA (faster on a CPU) and "longer" under XLA. Measurements: benchmarks/README.md.
    length_bucketing: str = "auto"
    # Subword regularisation: each training example's pieces drawn anew at every read by
    # SentencePiece's sampling (data/subword_sampling.py). A unigram vocabulary's alpha is the
    # exponent of P(pieces) (smaller: more varied); a BPE vocabulary's the probability of
    # skipping a merge (BPE-dropout). 0: the pieces datagen wrote.
    sentencepiece_alpha: float = 0.0

    def __post_init__(self):
        check = _Checker(self)
        check.positive("hidden_size", "filter_size", "num_heads", "num_hidden_layers",
                       "batch_size", "max_length", "min_length_bucket",
                       "learning_rate_warmup_steps", "optimizer_multistep_accumulate_steps")
        check.non_negative("num_encoder_layers", "num_decoder_layers", "clip_grad_norm",
                           "learning_rate_constant", "output_layer_chunk_rows")
        check.finite_non_negative("sentencepiece_alpha")
        check.probability("layer_prepostprocess_dropout", "attention_dropout", "relu_dropout",
                          "label_smoothing")
        if self.hidden_size % self.num_heads:
            raise HParamsError(f"hidden_size={self.hidden_size} is not divisible by "
                               f"num_heads={self.num_heads}")
        if self.length_bucket_step <= 1.0:
            raise HParamsError(f"length_bucket_step must be > 1, got {self.length_bucket_step}")
        for name in ("layer_preprocess_sequence", "layer_postprocess_sequence"):
            _check_sublayer_sequence(name, getattr(self, name))
        check.one_of("timing_signal", TIMING_SIGNALS)
        check.one_of("mixed_precision", MIXED_PRECISION)
        check.one_of("length_bucketing", LENGTH_BUCKETING)
        for factor in self.learning_rate_schedule:
            if factor not in LEARNING_RATE_FACTORS:
                raise HParamsError(f"learning_rate_schedule: unknown factor {factor!r}; "
                                   f"known factors: {', '.join(LEARNING_RATE_FACTORS)}")

    @property
    def encoder_layers(self) -> int:
        return self.num_encoder_layers or self.num_hidden_layers

    @property
    def decoder_layers(self) -> int:
        return self.num_decoder_layers or self.num_hidden_layers

    @property
    def compute_dtype(self) -> str:
        """The layers' compute dtype: mixed_precision, with "auto" (not resolved by the
        trainer) as float32."""
        return "float32" if self.mixed_precision == "auto" else self.mixed_precision

    def replace(self, **changes) -> "HParams":
        return dataclasses.replace(self, **changes)

    def override_from_string(self, overrides: str, named: str = "hparams override") -> "HParams":
        """Applies "a=1,b=x" (t2t's --hparams); tuple fields take "x*y*z". An error's message
        starts with `named` (the flag that gave the overrides, "--hparams")."""
        return self.replace(**parse_overrides(overrides, self, named))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "HParams":
        """Inverse of to_dict, also after a JSON round trip (a list is a tuple, an int a float).
        An unknown name or a value of another type ("32" for an int) is an HParamsError naming
        the key; a name `values` leaves out takes its default."""
        types = typing.get_type_hints(cls)
        for name in values:
            if name not in types:
                raise HParamsError(unknown_name_message("hparam", name, types, "Known hparams"))
        return cls(**{name: _typed_value(f"hparam {name}", value, types[name])
                      for name, value in values.items()})


class _Checker:
    def __init__(self, hparams):
        self.hparams = hparams

    def _each(self, names, ok, expectation):
        for name in names:
            value = getattr(self.hparams, name)
            if not ok(value):
                raise HParamsError(f"{name}={value!r}: expected {expectation}")

    def positive(self, *names):
        self._each(names, lambda v: v > 0, "a positive number")

    def non_negative(self, *names):
        self._each(names, lambda v: v >= 0, "a number >= 0")

    def finite_non_negative(self, *names):
        self._each(names, lambda v: 0 <= v < float("inf"), "a finite number >= 0")

    def probability(self, *names):
        self._each(names, lambda v: 0.0 <= v < 1.0, "a probability in [0, 1)")

    def one_of(self, name, choices):
        self._each([name], lambda v: v in choices, f"one of {', '.join(choices)}")


def _check_sublayer_sequence(name: str, sequence: str):
    """HParamsError naming `name` unless `sequence` (layer_preprocess_sequence or
    layer_postprocess_sequence) is "none" or letters of SUBLAYER_OPERATIONS, without "a" before
    the sublayer (t2t's layer_preprocess has no residual to add: SublayerConnection's rule)."""
    if sequence != "none" and (not sequence or set(sequence) - set(SUBLAYER_OPERATIONS)):
        raise HParamsError(f"{name}={sequence!r}: use 'none' or letters of "
                           f"{SUBLAYER_OPERATIONS!r} (n: norm, d: dropout, a: add)")
    if name == "layer_preprocess_sequence" and "a" in sequence:
        raise HParamsError(f"{name}={sequence!r}: 'a' adds the residual, which exists only "
                           f"after the sublayer: put it in layer_postprocess_sequence")


def _expected(field_type) -> str:
    if typing.get_origin(field_type) is tuple:
        return "a list of names"
    return "bool (true or false)" if field_type is bool else field_type.__name__


def _parsed_text(text: str, field_type):
    """An override's text as a value of `field_type`; the text itself when it is not one."""
    if field_type is bool:
        return {"true": True, "1": True, "yes": True, "false": False, "0": False,
                "no": False}.get(text.strip().lower(), text)
    if field_type in (int, float):
        try:
            return field_type(text)
        except ValueError:
            return text
    if typing.get_origin(field_type) is tuple:
        return tuple(part.strip() for part in text.split("*") if part.strip())
    return text.strip()


def _typed_value(named: str, value, field_type):
    """`value` as the field of `field_type` holds it, or HParamsError "{named}={value!r}:
    expected ...". The one type check of both ways in: override text after _parsed_text, and
    JSON values (HParams.from_dict), where a tuple is a list and an int is a float too; a bool
    is never a number, and no setting takes nan or an infinity."""
    if typing.get_origin(field_type) is tuple:
        if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            return tuple(value)
    elif field_type is float and type(value) in (int, float):
        if not math.isfinite(value):
            raise HParamsError(f"{named}={value!r}: expected a finite number, not nan or an "
                               f"infinity")
        return float(value)
    elif type(value) is field_type:
        return value
    raise HParamsError(f"{named}={value!r}: expected {_expected(field_type)}")


def parse_overrides(overrides: str, hparams, named: str = "hparams override",
                    kind: str = "hparam") -> dict:
    """Parses "a=1,b=x" into {field: typed value} of the dataclass instance `hparams`; names
    every bad key with what it expects, each message starting with `named` (the flag that
    gave the overrides) and calling a name a `kind`."""
    types = typing.get_type_hints(type(hparams))
    changes = {}
    for item in filter(None, (part.strip() for part in overrides.split(","))):
        if "=" not in item:
            raise HParamsError(f"{named}: {item!r}: expected name=value")
        name, text = (part.strip() for part in item.split("=", 1))
        if name not in types:
            raise HParamsError(f"{named}: " + unknown_name_message(
                kind, name, types, f"Known {kind}s"))
        changes[name] = _typed_value(f"{named}: {name}", _parsed_text(text, types[name]),
                                     types[name])
    return changes

