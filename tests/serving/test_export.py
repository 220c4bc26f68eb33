"""The exported SavedModel translates raw text like the decoder: a small copy model is trained,
exported with t2t_lite-exporter, loaded in a fresh process (after `import tensorflow_text`)
and asked for 100 held-out sequences through its serving signature; the decoder translates the
same lines with the same beam search. The SentencePiece path is checked without training: a
tiny vocabulary and an untrained model go through a SavedModel and back."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

HPARAMS = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=512,"
           "max_length=22,min_length_bucket=22,learning_rate_warmup_steps=100,"
           "learning_rate_constant=1.0,layer_prepostprocess_dropout=0,attention_dropout=0,"
           "relu_dropout=0")
DECODE_HPARAMS = "beam_size=4,alpha=0.6"


def run(*command, expect_failure=False):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert (result.returncode != 0) == expect_failure, output
    return result.returncode, output


def program(name, *flags, **kwargs):
    return run(sys.executable, "-m", f"t2t_lite.bin.{name}", *flags, **kwargs)


@pytest.fixture(scope="module")
def trained(copy_task_data, tmp_path_factory):
    """(data_dir, output_dir) of a copy model that copies the held-out sequences (dev token
    accuracy 1.0 after 300 steps, 10 s of training)."""
    data_dir = copy_task_data(10_000, 100, 100)
    output_dir = str(tmp_path_factory.mktemp("serving") / "train")
    program("trainer", "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
            f"--hparams={HPARAMS}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            "--train_steps=300", "--eval_every=300", "--eval_steps=1",
            "--save_checkpoints_steps=300", "--log_every_steps=100", "--eval_bleu_sentences=0")
    return data_dir, output_dir


@pytest.fixture(scope="module")
def export_run(trained):
    """(export_dir, the exporter's output)."""
    data_dir, output_dir = trained
    export_dir = os.path.join(os.path.dirname(output_dir), "export", "1")
    _, out = program("exporter", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                     f"--export_dir={export_dir}", f"--decode_hparams={DECODE_HPARAMS}")
    assert f"exported {output_dir}/model.ckpt-300 to {export_dir}" in out
    return export_dir, out


@pytest.fixture(scope="module")
def exported(export_run):
    return export_run[0]


def test_the_export_is_complete_and_records_its_hparams(trained, exported):
    assert os.path.exists(os.path.join(exported, "saved_model.pb"))
    assert not os.path.exists(exported + ".tmp")
    with open(os.path.join(exported, "hparams.json")) as handle:
        description = json.load(handle)
    with open(os.path.join(trained[1], "hparams.json")) as handle:
        assert description == json.load(handle)


def test_a_fresh_process_translates_like_the_decoder(trained, exported, tmp_path):
    data_dir, output_dir = trained
    inputs = os.path.join(data_dir, "algorithmic_copy-test.inputs.txt")
    with open(inputs) as handle:
        lines = handle.read().splitlines()
    assert len(lines) == 100

    served = tmp_path / "served.json"
    script = textwrap.dedent(f"""
        import json
        import tensorflow as tf
        import tensorflow_text  # registers the ops the SavedModel uses
        loaded = tf.saved_model.load({exported!r})
        serve = loaded.signatures["serving_default"]
        lines = open({inputs!r}).read().splitlines()
        result = serve(inputs=tf.constant(lines))
        json.dump({{"outputs": [t.decode("utf-8") for t in result["outputs"].numpy()],
                   "scores": result["scores"].numpy().tolist(),
                   "dtypes": [result["outputs"].dtype.name, result["scores"].dtype.name]}},
                  open({str(served)!r}, "w"))
    """)
    run(sys.executable, "-c", script)
    with open(served) as handle:
        result = json.load(handle)

    decoded = str(tmp_path / "decoded.txt")
    program("decoder", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--decode_from_file={inputs}", f"--decode_to_file={decoded}",
            f"--decode_hparams={DECODE_HPARAMS}")
    with open(decoded) as handle:
        decoder_lines = handle.read().splitlines()

    assert result["dtypes"] == ["string", "float32"]
    assert len(result["outputs"]) == len(result["scores"]) == 100
    assert all(score <= 0 for score in result["scores"])
    assert result["outputs"] == decoder_lines
    # The restored weights are the trained ones (an untrained model copies none).
    assert sum(out == line for out, line in zip(result["outputs"], lines)) >= 90


def saved_model_cli():
    beside_python = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    return beside_python if os.path.exists(beside_python) else shutil.which("saved_model_cli")


def test_saved_model_cli_lists_the_serving_signature(exported):
    if saved_model_cli() is None:
        pytest.skip("saved_model_cli is not installed")
    _, out = run(saved_model_cli(), "show", "--dir", exported, "--all")
    signature = out[out.index("signature_def['serving_default']"):]
    assert "inputs['inputs'] tensor_info:" in signature
    assert "outputs['outputs'] tensor_info:" in signature
    assert "outputs['scores'] tensor_info:" in signature
    assert "dtype: DT_STRING" in signature and "dtype: DT_FLOAT" in signature
    assert "Method name is: tensorflow/serving/predict" in signature


def test_an_existing_export_is_kept_without_overwrite(trained, exported):
    data_dir, output_dir = trained
    code, out = program("exporter", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                        f"--export_dir={exported}", expect_failure=True)
    assert code == 2
    assert f"error: --export_dir={exported} is not empty" in out and "--overwrite" in out
    assert os.path.exists(os.path.join(exported, "saved_model.pb"))


def xla_flags(export_dir):
    """_XlaMustCompile of every function in the SavedModel's graph."""
    from tensorflow.core.protobuf import saved_model_pb2
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as handle:
        saved_model.ParseFromString(handle.read())
    functions = saved_model.meta_graphs[0].graph_def.library.function
    return {function.attr["_XlaMustCompile"].b for function in functions
            if "_XlaMustCompile" in function.attr}


def test_no_xla_by_default(export_run):
    from t2t_lite.serving.export import ops_needing_xla
    exported, out = export_run
    assert xla_flags(exported) == {False}  # TF Serving runs XLA on CPU only when asked to
    assert ops_needing_xla(exported) == [] and "xla_cpu_compilation_enabled" not in out


def test_without_the_cache_the_graph_needs_no_xla(trained, tmp_path):
    from t2t_lite.serving.export import ops_needing_xla
    data_dir, output_dir = trained
    export_dir = str(tmp_path / "1")
    _, out = program("exporter", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                     f"--export_dir={export_dir}", "--decode_hparams=use_cache=false")
    assert ops_needing_xla(export_dir) == [] and "xla_cpu_compilation_enabled" not in out
    lines = ["3 7 1", "10 9 8 7 6 5 4 3 2 1", ""]
    result = tf.saved_model.load(export_dir).signatures["serving_default"](
        inputs=tf.constant(lines))
    assert [t.decode("utf-8") for t in result["outputs"].numpy()] == lines


def test_overwrite_with_xla(trained, tmp_path):
    data_dir, output_dir = trained
    export_dir = tmp_path / "2"
    export_dir.mkdir()
    (export_dir / "stale.txt").write_text("an older export")
    program("exporter", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--export_dir={export_dir}", "--overwrite", "--export_jit_compile")
    assert sorted(os.listdir(export_dir)) == ["assets", "fingerprint.pb", "hparams.json",
                                              "saved_model.pb", "variables"]
    assert not os.path.exists(str(export_dir) + ".tmp")
    assert True in xla_flags(export_dir)


def test_exporting_without_a_checkpoint_names_the_output_dir(trained, tmp_path):
    data_dir, _ = trained
    empty = tmp_path / "untrained"
    code, out = program("exporter", f"--data_dir={data_dir}", f"--output_dir={empty}",
                        f"--export_dir={tmp_path / 'export'}", "--problem=algorithmic_copy",
                        "--hparams_set=transformer_tiny", expect_failure=True)
    assert code == 2
    assert f"error: no checkpoint in {empty}" in out and f"--output_dir={empty}" in out
    assert not os.path.exists(tmp_path / "export")
    assert not os.path.exists(str(tmp_path / "export") + ".tmp")


# --- SentencePiece: the vocabulary inside the SavedModel, no training needed ------------------

SENTENCES = ["a dog runs in the park", "two dogs play with a red ball",
             "the man reads a book in the park", "a woman walks with two dogs",
             "children play football on the grass", "a red car is parked near the house"]


@pytest.fixture(scope="module")
def sentencepiece(tmp_path_factory):
    from t2t_lite.data.vocab import SentencePieceVocabulary
    path = str(tmp_path_factory.mktemp("vocab") / "tiny.bpe.model")
    return SentencePieceVocabulary.train(SENTENCES * 20, path, vocab_size=60)


def test_source_ids_in_the_graph_are_the_python_ids_with_eos(sentencepiece):
    from t2t_lite.serving.export import source_ids
    encoded = [sentencepiece.encode(sentence) for sentence in SENTENCES]
    length = max(len(ids) for ids in encoded) + 1
    expected = [ids + [1] + [0] * (length - len(ids) - 1) for ids in encoded]
    assert source_ids(sentencepiece, tf.constant(SENTENCES), 256).numpy().tolist() == expected
    # Longer than max_length: cut, with EOS kept last.
    cut = source_ids(sentencepiece, tf.constant(SENTENCES[:1]), 4).numpy().tolist()
    assert cut == [encoded[0][:3] + [1]]


def test_a_sentencepiece_savedmodel_serves_what_python_computes(sentencepiece, tmp_path):
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, for loading)
    from t2t_lite import registry
    from t2t_lite.decoding.decoder import DecodeHParams
    from t2t_lite.decoding.search import search
    from t2t_lite.serving.export import ServingModule, save_atomically
    from t2t_lite.training.trainer import build_model

    hparams = registry.hparams("transformer_tiny").override_from_string(HPARAMS)
    model = build_model("transformer", hparams, sentencepiece.vocab_size)
    decode_hparams = DecodeHParams(beam_size=2, extra_length=5)
    encoders = {"inputs": sentencepiece, "targets": sentencepiece}
    export_dir = str(tmp_path / "1")
    save_atomically(ServingModule(model, encoders, decode_hparams, max_length=256), export_dir)

    ids = [sentencepiece.encode(sentence) + [1] for sentence in SENTENCES]
    padded = [row + [0] * (max(map(len, ids)) - len(row)) for row in ids]
    output_ids, scores = tf.function(search)(model, tf.constant(padded), decode_hparams)
    expected = [sentencepiece.decode(row) for row in output_ids.numpy().tolist()]

    loaded = tf.saved_model.load(export_dir)
    result = loaded.signatures["serving_default"](inputs=tf.constant(SENTENCES))
    assert [text.decode("utf-8") for text in result["outputs"].numpy()] == expected
    assert result["scores"].numpy().tolist() == pytest.approx(scores.numpy().tolist(), abs=1e-5)
    # An untrained model translates into something; its weights went into the SavedModel.
    assert len(loaded.model_variables) == len(model.weights)
