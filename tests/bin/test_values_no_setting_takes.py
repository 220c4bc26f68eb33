"""nan and the infinities, which no float setting takes, and a negative extra_length: one
`error:` line naming the flag or setting and what it takes, exit status 2, in every program and
as a UserError in the Python API (docs/checks.md). The flags and settings are checked where
they are parsed, here in-process; one program run shows the status end to end."""
import contextlib
import dataclasses
import typing

import pytest
from absl import flags

import t2t_lite
from program_runs import error_lines, run_program
from t2t_lite import registry
from t2t_lite.bin import common
from t2t_lite.bin import decoder as decoder_program
from t2t_lite.bin import trainer as trainer_program
from t2t_lite.decoding.decoder import DECODE_HPARAMS_KINDS, parse_decode_hparams
from t2t_lite.errors import UserError
from t2t_lite.hparams_lib import HParams

NON_FINITE = ("nan", "inf", "-inf")
TRAINER_REQUIRED = ["--problem=algorithmic_copy", "--data_dir=D", "--hparams_set=transformer_tiny",
                    "--output_dir=O"]


@contextlib.contextmanager
def program_flags(program):
    """The names of `program`'s flags, defined in absl's FLAGS for the block only (the flags
    other modules of this test process defined, e.g. the benchmarks', set aside meanwhile)."""
    FLAGS = common.FLAGS
    absl_own = {flag.name for module, module_flags in FLAGS.flags_by_module_dict().items()
                if module.startswith("absl") for flag in module_flags}
    others = {name: FLAGS[name] for name in FLAGS if name not in absl_own}
    for name in others:
        delattr(FLAGS, name)
    before = set(FLAGS)
    program.define_flags()
    try:
        yield sorted(set(FLAGS) - before)
    finally:
        FLAGS.unparse_flags()
        for name in set(FLAGS) - before:
            delattr(FLAGS, name)
        for name, flag in others.items():
            FLAGS[name] = flag


def float_fields(kind) -> list:
    types = typing.get_type_hints(kind)
    return [field.name for field in dataclasses.fields(kind) if types[field.name] is float]


@pytest.mark.parametrize("program, required", [(trainer_program, TRAINER_REQUIRED),
                                               (decoder_program, ["--data_dir=D"])])
def test_every_float_flag_refuses_nan_and_the_infinities(program, required, capsys):
    with program_flags(program) as names:
        floats = [name for name in names
                  if isinstance(common.FLAGS[name].parser, flags.FloatParser)]
        assert floats or program is decoder_program  # the trainer has some
        for name in floats:
            for value in NON_FINITE:
                with pytest.raises(SystemExit) as exit:
                    common.parse_flags(["program", f"--{name}={value}", *required])
                errors = error_lines(capsys.readouterr().err)
                assert exit.value.code == 2
                assert len(errors) == 1, errors
                assert errors[0].startswith(f"error: flag --{name}={value}: ") and \
                    "(nan and the infinities are not taken)" in errors[0], errors


@pytest.mark.parametrize("value", NON_FINITE)
def test_every_float_hparam_and_decode_setting_refuses_nan_and_the_infinities(value):
    hparams = registry.hparams("transformer_tiny")
    for name in float_fields(HParams):
        with pytest.raises(UserError, match=rf"^--hparams: {name}={value}: expected a finite "):
            common.overridden(hparams, f"{name}={value}")
    names = [name for kind in DECODE_HPARAMS_KINDS for name in float_fields(kind)]
    assert "alpha" in names and "sampling_temperature" in names
    for name in names:
        with pytest.raises(UserError, match=rf"^--decode_hparams: {name}={value}: expected a "
                                            r"finite number"):
            parse_decode_hparams(f"{name}={value}")


def test_the_python_api_refuses_them_and_a_sampling_topk_above_the_vocabulary(
        untrained_model_dir, tmp_path):
    data_dir, output_dir = untrained_model_dir
    model = t2t_lite.load(output_dir)
    vocab_size = registry.problem("algorithmic_copy").vocab_size(data_dir)
    for settings, message in (({"alpha": float("nan")}, "alpha=nan: expected a finite"),
                              ({"sampling_topk": vocab_size + 1},
                               f"sampling_topk={vocab_size + 1}: the model's vocabulary has "
                               f"{vocab_size} pieces: at most {vocab_size}"),
                              ({"sampling_temperature": float("inf")},
                               "sampling_temperature=inf: expected a finite"),
                              ({"extra_length": -1}, "extra_length=-1: must be at least 0")):
        with pytest.raises(UserError, match=f"^--decode_hparams: {message}"):
            model.translate(["3 4 5"], **settings)
    for settings, message in (({"train_minutes": float("nan")}, "train_minutes=nan"),
                              ({"early_stopping_min_delta": float("inf")},
                               "early_stopping_min_delta=inf"),
                              ({"hparams": {"learning_rate_constant": float("inf")}},
                               "hparams: learning_rate_constant=inf: expected a finite")):
        with pytest.raises(UserError, match=f"^{message}"):
            t2t_lite.train("algorithmic_copy", data_dir, str(tmp_path / "run"),
                           hparams_set="transformer_tiny", eval_bleu_sentences=0, **settings)
    assert not (tmp_path / "run").exists()


def test_a_program_ends_with_one_error_line_and_status_2(untrained_model_dir, tmp_path):
    data_dir, output_dir = untrained_model_dir
    result = run_program("decoder", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                         f"--decode_to_file={tmp_path / 'out.txt'}",
                         "--decode_hparams=alpha=nan")
    assert result.returncode == 2, result.stderr
    assert error_lines(result.stderr) == [
        "error: --decode_hparams: alpha=nan: expected a finite number, not nan or an infinity"]
    assert "Traceback" not in result.stderr and not (tmp_path / "out.txt").exists()
