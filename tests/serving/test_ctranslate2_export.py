"""A t2t_lite model in CTranslate2 computes what the model computes: the log probability of every
target token equals the TensorFlow model's (untrained models with random weights, in both norm
layouts and both timing-signal layouts), and on the trained copy model the exported float32
folder's greedy translations, through t2t_lite-exporter and t2t_lite-decoder
--ctranslate2_model, equal the TensorFlow decoder's in float32 (--hparams=mixed_precision=float32
for a model recorded as trained in bfloat16). A SentencePiece folder translates with
`ctranslate2` and `sentencepiece` alone, in a process that never imports TensorFlow (the snippet
of docs/serving.md). What cannot be converted, and a missing ctranslate2, are one error each."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data.vocab import EOS_ID, SymbolVocabulary
from t2t_lite.decoding.ctranslate2_translator import (EXPORT_RECORD, SENTENCEPIECE_MODEL,
                                                      CTranslate2Engine)
from t2t_lite.decoding.search import SearchHParams
from t2t_lite.decoding.trained_model import TrainedRun
from t2t_lite.models.building import build_model
from t2t_lite.serving import ctranslate2_export

from program_runs import SMALL_MODEL, error_lines, hparams_of, run_expecting

ctranslate2 = pytest.importorskip("ctranslate2")

TINY = SMALL_MODEL.replace("num_heads=2,num_hidden_layers=1", "num_heads=4,num_hidden_layers=2")
LAYOUTS = {
    "pre-norm, t2t's sin|cos, shared embeddings": TINY,
    "post-norm, the paper's interleaved signal, separate matrices": (
        TINY + ",layer_preprocess_sequence=none,layer_postprocess_sequence=dan,"
        "timing_signal=interleaved,shared_embedding_and_softmax_weights=false,"
        "num_decoder_layers=3"),
}


def run(*command, expect_failure=False, env=None):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    output = result.stdout + result.stderr
    assert (result.returncode != 0) == expect_failure, output
    return result.returncode, output


program = run_expecting


def random_model(overrides: str, vocab_size: int, seed: int = 0):
    """An untrained model whose every weight (layer norms and biases too) is random, so that
    a weight mapped to the wrong place or left out changes the outputs."""
    model = build_model("transformer", hparams_of(overrides), vocab_size, for_inference=True)
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        shape = tuple(variable.shape)
        variable.assign(rng.normal(0.0, 0.3, shape).astype(np.float32) + (
            1.0 if "gamma" in variable.path else 0.0))
    return model


@pytest.mark.parametrize("overrides", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_token_log_probabilities_equal_the_models(overrides, tmp_path):
    vocabulary = SymbolVocabulary(20)
    model = random_model(overrides, vocabulary.vocab_size)
    rng = np.random.default_rng(1)
    sources = [list(rng.integers(2, 22, size=n)) for n in (3, 11, 7)]
    targets = [list(rng.integers(2, 22, size=n)) for n in (5, 2, 9)]
    folder = str(tmp_path / "ct2")
    encoders = {"inputs": vocabulary, "targets": vocabulary}
    ctranslate2_export.write_folder(model, encoders, folder, "float32")
    tokens = vocabulary.tokens
    scored = ctranslate2.Translator(folder).score_batch(
        [[tokens[i] for i in source] for source in sources],
        [[tokens[i] for i in target] for target in targets])
    for source, target, result in zip(sources, targets, scored):
        ids = {"inputs": tf.constant([source + [EOS_ID]]),
               "targets": tf.constant([target + [EOS_ID]])}
        log_probs = tf.nn.log_softmax(model(ids), axis=-1)[0].numpy()
        expected = [log_probs[position, token] for position, token in
                    enumerate(target + [EOS_ID])]  # CTranslate2 scores the EOS too
        np.testing.assert_allclose(result.log_probs, expected, atol=1e-4)


def test_a_bfloat16_folder_is_written_without_torch_and_scores_as_the_float32_one(tmp_path):
    """CTranslate2's converter casts to bfloat16 through torch, which the extra does not
    install; the exporter casts with NumPy's bfloat16 type instead. The weights are stored
    in half the bytes, and the folder's token log probabilities are the float32 folder's up
    to bfloat16's rounding."""
    vocabulary = SymbolVocabulary(20)
    model = random_model(TINY, vocabulary.vocab_size)
    encoders = {"inputs": vocabulary, "targets": vocabulary}
    folders = {quantization: str(tmp_path / quantization)
               for quantization in ("float32", "bfloat16")}
    for quantization, folder in folders.items():
        ctranslate2_export.write_folder(model, encoders, folder, quantization)
    sizes = {quantization: os.path.getsize(os.path.join(folder, "model.bin"))
             for quantization, folder in folders.items()}
    assert sizes["bfloat16"] < 0.6 * sizes["float32"], sizes
    tokens = vocabulary.tokens
    source, target = [[tokens[i] for i in (3, 9, 4, 7)]], [[tokens[i] for i in (5, 2, 8)]]
    scored = {quantization: ctranslate2.Translator(folder).score_batch(source, target)[0]
              for quantization, folder in folders.items()}
    np.testing.assert_allclose(scored["bfloat16"].log_probs, scored["float32"].log_probs,
                               atol=0.1)
    assert scored["bfloat16"].log_probs != scored["float32"].log_probs  # rounded weights


def test_settings_ctranslate2_has_no_layout_for_are_refused_before_writing(tmp_path):
    hparams = registry.hparams("transformer_tiny").override_from_string(
        "layer_preprocess_sequence=n,layer_postprocess_sequence=dan")
    assert ctranslate2_export.unrepresentable(hparams) == [
        "layer_preprocess_sequence='n' with layer_postprocess_sequence='dan' (CTranslate2 has "
        "pre-norm \"n\"/\"da\" and post-norm \"none\"/\"dan\" only)"]
    for layout in LAYOUTS.values():
        assert ctranslate2_export.unrepresentable(
            registry.hparams("transformer_tiny").override_from_string(layout)) == []
    export_dir = str(tmp_path / "ct2")
    with pytest.raises(ctranslate2_export.CTranslate2ExportError,
                       match="layer_postprocess_sequence='dan'"):
        ctranslate2_export.export_ctranslate2(TrainedRun(
            str(tmp_path), "algorithmic_copy", "transformer", hparams, str(tmp_path)), export_dir)
    assert not os.path.exists(export_dir)


def test_the_folder_holds_the_model_its_vocabulary_and_records(exported_copy_model):
    data_dir, output_dir, folder = exported_copy_model
    names = set(os.listdir(folder))
    assert {"model.bin", "config.json", "shared_vocabulary.json", "hparams.json",
            EXPORT_RECORD} <= names
    assert SENTENCEPIECE_MODEL not in names  # the copy problem's symbols need no model
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    assert config["add_source_eos"] and config["eos_token"] == "</s>"
    with open(os.path.join(folder, EXPORT_RECORD), encoding="utf-8") as handle:
        record = json.load(handle)
    assert record["quantization"] == "float32"
    assert record["checkpoint"].startswith(output_dir)


def recorded_in_bfloat16(output_dir, folder):
    """A copy of the run in output_dir whose hparams.json says it trained in bfloat16 (the
    trainer's choice on a CPU with AVX512_BF16: its checkpoints hold float32 weights all the
    same), so that the decoder decodes it in bfloat16 unless told otherwise."""
    shutil.copytree(output_dir, folder)
    path = os.path.join(folder, "hparams.json")
    with open(path, encoding="utf-8") as handle:
        description = json.load(handle)
    description["hparams"]["mixed_precision"] = "bfloat16"
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(description, handle)
    return str(folder)


def test_greedy_translations_equal_the_tensorflow_decoders_in_float32(exported_copy_model,
                                                                      tmp_path):
    """The folder holds float32 weights whatever the model trained in: its output is the
    decoder's in float32, which a bfloat16-trained model gets through
    --hparams=mixed_precision=float32 (the decoder's default there computes in bfloat16)."""
    data_dir, output_dir, folder = exported_copy_model
    bfloat16_run = recorded_in_bfloat16(output_dir, tmp_path / "bfloat16_run")
    source = os.path.join(data_dir, "algorithmic_copy-test.inputs.txt")
    greedy = "--decode_hparams=beam_size=1"
    tensorflow_out, ctranslate2_out = str(tmp_path / "tf.txt"), str(tmp_path / "ct2.txt")
    program("decoder", f"--data_dir={data_dir}", f"--output_dir={bfloat16_run}",
            "--hparams=mixed_precision=float32", f"--decode_from_file={source}",
            f"--decode_to_file={tensorflow_out}", greedy)
    program("decoder", f"--data_dir={data_dir}", f"--ctranslate2_model={folder}",
            f"--decode_from_file={source}", f"--decode_to_file={ctranslate2_out}", greedy)
    with open(tensorflow_out) as expected, open(ctranslate2_out) as translated:
        expected, translated = expected.read().splitlines(), translated.read().splitlines()
    assert len(translated) == 100 and translated == expected


def test_beam_search_lines_that_fail_keep_their_place(exported_copy_model):
    """Through the decoder's Translator: a blank line and one the vocabulary cannot encode get
    empty translations, the others are searched (beam 4) and come back in input order."""
    from t2t_lite.decoding.decoder import Translator
    data_dir, _, folder = exported_copy_model
    vocabulary = registry.problem("algorithmic_copy").feature_encoders(data_dir)["targets"]
    search = CTranslate2Engine(folder, vocabulary.tokens, SearchHParams(beam_size=4))
    translator = Translator(None, {"inputs": vocabulary, "targets": vocabulary},
                            engine=search)
    outputs, scores = translator.translate_with_scores(
        ["3 7 1", "", "abc", "2 2 9 4"], show_progress=False)
    assert outputs == ["3 7 1", "", "", "2 2 9 4"]
    assert scores[1] is None and scores[2] is None and scores[0] < 0


def test_an_existing_folder_is_kept_without_overwrite(exported_copy_model):
    data_dir, output_dir, folder = exported_copy_model
    before = os.path.getmtime(os.path.join(folder, "model.bin"))
    _, output = program("exporter", "--format=ctranslate2", f"--data_dir={data_dir}",
                        f"--output_dir={output_dir}", f"--export_dir={folder}",
                        expect_failure=True)
    assert f"error: --export_dir={folder} is not empty" in output
    assert os.path.getmtime(os.path.join(folder, "model.bin")) == before


def test_flags_that_do_not_apply_to_an_exported_model_are_refused(exported_copy_model):
    data_dir, output_dir, folder = exported_copy_model
    _, output = program("decoder", f"--data_dir={data_dir}", f"--ctranslate2_model={folder}",
                        f"--output_dir={output_dir}", expect_failure=True)
    assert "error: --output_dir does not go with --ctranslate2_model" in output
    _, output = program("decoder", f"--data_dir={data_dir}",
                        f"--ctranslate2_model={output_dir}", expect_failure=True)
    assert f"--ctranslate2_model={output_dir} is not a CTranslate2 model" in output
    _, output = program("decoder", f"--data_dir={data_dir}", f"--ctranslate2_model={folder}",
                        "--decode_hparams=beam_size=2,jit_compile=true", expect_failure=True)
    assert "error: --decode_hparams: jit_compile does not apply with --ctranslate2_model" \
        in output
    _, output = program("exporter", "--format=ctranslate2", "--decode_hparams=beam_size=2",
                        f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                        f"--export_dir={folder}_2", expect_failure=True)
    assert "error: --decode_hparams and --export_jit_compile apply to the SavedModel" in output


def test_without_ctranslate2_the_export_is_one_error_naming_the_extra(trained_copy_model,
                                                                       tmp_path):
    data_dir, output_dir, _ = trained_copy_model
    export_dir = str(tmp_path / "ct2")
    blocked = textwrap.dedent(f"""
        import sys
        sys.modules["ctranslate2"] = None  # what an environment without the extra has
        sys.argv = ["t2t_lite-exporter", "--format=ctranslate2", "--data_dir={data_dir}",
                    "--output_dir={output_dir}", "--export_dir={export_dir}"]
        from t2t_lite.bin import exporter
        exporter.run()
    """)
    status, output = run(sys.executable, "-c", blocked, expect_failure=True)
    errors = error_lines(output)
    assert status == 2 and len(errors) == 1, output
    assert "pip install 't2t_lite[ctranslate2]'" in errors[0]
    assert not os.path.exists(export_dir)


SENTENCES = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball.",
             "Eine Frau liest ein Buch im Park."]
SNIPPET = """
import sys
import ctranslate2
import sentencepiece

folder = sys.argv[1]
sp = sentencepiece.SentencePieceProcessor(model_file=f"{folder}/sentencepiece.model")
translator = ctranslate2.Translator(folder, device="cpu")
sentences = sys.argv[2:]
results = translator.translate_batch([sp.encode(s, out_type=str) for s in sentences],
                                     beam_size=4, length_penalty=0.6, max_decoding_length=20)
for result in results:
    print(sp.decode(result.hypotheses[0]))
assert "tensorflow" not in sys.modules
"""


def test_a_sentencepiece_folder_translates_without_tensorflow(tmp_path):
    from t2t_lite.data.vocab import SentencePieceVocabulary
    from t2t_lite.decoding.decoder import Translator
    vocabulary = SentencePieceVocabulary.train(SENTENCES * 20, str(tmp_path / "sp.model"),
                                               vocab_size=60)
    model = random_model(TINY, vocabulary.vocab_size)
    folder = str(tmp_path / "ct2")
    encoders = {"inputs": vocabulary, "targets": vocabulary}
    ctranslate2_export.write_folder(model, encoders, folder, "int8")
    assert os.path.isfile(os.path.join(folder, SENTENCEPIECE_MODEL))
    search = CTranslate2Engine(folder, vocabulary.tokens,
                               SearchHParams(beam_size=4, alpha=0.6, extra_length=20))
    search.max_positions = 20  # the snippet's max_decoding_length
    expected = Translator(None, encoders, engine=search).translate(SENTENCES,
                                                                   show_progress=False)
    script = tmp_path / "snippet.py"
    script.write_text(SNIPPET)
    _, output = run(sys.executable, str(script), folder, *SENTENCES)
    assert output.splitlines() == expected
