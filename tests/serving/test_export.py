"""The exported SavedModel translates raw text like the decoder: a small copy model is trained (in
this process) and exported (without XLA in this process; with XLA by t2t_lite-exporter), and
one fresh process (after `import tensorflow_text`) loads the exports, translates 100 held-out
sequences and a batch with sentences that cannot be translated, and runs saved_model_cli; the
decoder translates the same lines with the same beam search. Every check that needs no program
of its own runs in this process (a program costs seconds of TensorFlow import). The
SentencePiece path and the search without the cache are checked without training: a tiny
vocabulary and an untrained model go through a SavedModel and back, also in a fresh process
that registers tensorflow-text's SentencePiece op library alone, as a lean server does."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

import program_runs

HPARAMS = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,batch_size=512,"
           "max_length=22,min_length_bucket=22,learning_rate_warmup_steps=100,"
           "learning_rate_constant=1.0,layer_prepostprocess_dropout=0,attention_dropout=0,"
           "relu_dropout=0")
DECODE_HPARAMS = "beam_size=4,alpha=0.6"
# A batch in which one sentence is translated: the others fail (not symbols, blank).
MIXED = ["3 7 1", "abc 99", ""]


def run(*command, expect_failure=False):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert (result.returncode != 0) == expect_failure, output
    return result.returncode, output


program = program_runs.run_expecting


def texts(tensor):
    return [text.decode("utf-8") for text in tensor.numpy()]


@pytest.fixture(scope="module")
def trained(trained_copy_model):
    """(data_dir, output_dir) of conftest's trained copy model."""
    return trained_copy_model[:2]


@pytest.fixture(scope="module")
def exported(trained):
    """An export without XLA (the default), written in this process by export.export, which
    the exporter program runs (xla_exported runs the program)."""
    from t2t_lite.decoding.search import SearchHParams
    from t2t_lite.storage.run_description import saved_run
    from t2t_lite.serving.export import export
    from t2t_lite.decoding.trained_model import TrainedRun
    data_dir, output_dir = trained
    export_dir = os.path.join(os.path.dirname(output_dir), "export", "1")
    export(TrainedRun(output_dir, "algorithmic_copy", "transformer",
                      saved_run(output_dir)["hparams"], data_dir),
           export_dir, SearchHParams(beam_size=4, alpha=0.6))
    return export_dir


@pytest.fixture(scope="module")
def xla_exported(trained):
    """t2t_lite-exporter's export with XLA and greedy search (a quicker compile), written with
    --overwrite over a folder holding an older file."""
    data_dir, output_dir = trained
    export_dir = os.path.join(os.path.dirname(output_dir), "export", "2")
    os.makedirs(export_dir)
    with open(os.path.join(export_dir, "stale.txt"), "w") as handle:
        handle.write("an older export")
    _, out = program("exporter", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                     f"--export_dir={export_dir}", "--overwrite", "--export_jit_compile",
                     "--decode_hparams=beam_size=1")
    assert f"exported {output_dir}/model.ckpt-300 to {export_dir}" in out
    return export_dir


@pytest.fixture(scope="module")
def fresh_process(trained, exported, xla_exported, tmp_path_factory):
    """What one fresh Python process gets from the exports: ({"lines": the 100 test inputs'
    translations, "mixed" and "xla_mixed": MIXED's, each {"outputs", "scores", "dtypes"}},
    the output of `saved_model_cli show --all` of the export without XLA, run in that process
    after the rest)."""
    inputs = os.path.join(trained[0], "algorithmic_copy-test.inputs.txt")
    served = str(tmp_path_factory.mktemp("fresh") / "served.json")
    script = textwrap.dedent(f"""
        import json
        import sys
        import tensorflow as tf
        import tensorflow_text  # registers the ops the SavedModel uses

        def translate(export_dir, lines):
            result = tf.saved_model.load(export_dir).signatures["serving_default"](
                inputs=tf.constant(lines))
            return {{"outputs": [t.decode("utf-8") for t in result["outputs"].numpy()],
                     "scores": result["scores"].numpy().tolist(),
                     "dtypes": [result["outputs"].dtype.name, result["scores"].dtype.name]}}

        lines = open({inputs!r}).read().splitlines()
        json.dump({{"lines": translate({exported!r}, lines),
                    "mixed": translate({exported!r}, {MIXED!r}),
                    "xla_mixed": translate({xla_exported!r}, {MIXED!r})}}, open({served!r}, "w"))

        from tensorflow.python.tools import saved_model_cli  # the saved_model_cli program
        sys.argv = ["saved_model_cli", "show", "--dir", {exported!r}, "--all"]
        print("saved_model_cli:", flush=True)
        saved_model_cli.main()
    """)
    _, out = run(sys.executable, "-c", script)
    with open(served) as handle:
        return json.load(handle), out[out.index("saved_model_cli:"):]


def leftovers_beside(export_dir):
    """What the exporter left next to the SavedModel: its temporary folder or its lock."""
    return [name for name in os.listdir(os.path.dirname(export_dir))
            if name.endswith((".incomplete", ".lock"))]


def test_the_export_is_complete_and_records_its_hparams(trained, exported):
    assert os.path.exists(os.path.join(exported, "saved_model.pb"))
    assert leftovers_beside(exported) == []
    with open(os.path.join(exported, "hparams.json")) as handle:
        description = json.load(handle)
    with open(os.path.join(trained[1], "hparams.json")) as handle:
        assert description == json.load(handle)


def test_a_fresh_process_translates_like_the_decoder(trained, fresh_process):
    from t2t_lite import registry
    from t2t_lite.decoding import decoder
    from t2t_lite.models import restoring
    from t2t_lite.decoding.search import SearchHParams
    from t2t_lite.storage.run_description import saved_run
    data_dir, output_dir = trained
    with open(os.path.join(data_dir, "algorithmic_copy-test.inputs.txt")) as handle:
        lines = handle.read().splitlines()
    assert len(lines) == 100
    # The decoder program's translation (t2t_lite-decoder --decode_from_file), in this process.
    problem = registry.problem("algorithmic_copy")
    run_description = saved_run(output_dir)
    model = restoring.load_model(run_description["model"], run_description["hparams"],
                                 problem.vocab_size(data_dir), output_dir)
    translator = decoder.Translator(model, problem.feature_encoders(data_dir),
                                    SearchHParams(beam_size=4, alpha=0.6),
                                    problem.max_length)
    decoder_lines = translator.translate(lines, show_progress=False)

    result = fresh_process[0]["lines"]
    assert result["dtypes"] == ["string", "float32"]
    assert len(result["outputs"]) == len(result["scores"]) == 100
    assert all(score <= 0 for score in result["scores"])
    assert result["outputs"] == decoder_lines
    # The restored weights are the trained ones (an untrained model copies none).
    assert sum(out == line for out, line in zip(result["outputs"], lines)) >= 90


@pytest.mark.parametrize("export", ["mixed", "xla_mixed"])
def test_sentences_that_cannot_be_translated_leave_the_others(fresh_process, export):
    """"abc 99" is not a sequence of symbols 1..10 and "" is blank: as in the decoder, they get
    an empty translation, with the score -inf (the decoder's None), and "3 7 1" is copied."""
    result = fresh_process[0][export]
    assert result["outputs"] == ["3 7 1", "", ""]
    assert -1 < result["scores"][0] <= 0 and result["scores"][1:] == [float("-inf")] * 2


def test_saved_model_cli_lists_the_serving_signature(fresh_process):
    out = fresh_process[1]
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


def test_no_xla_by_default(exported):
    from t2t_lite.serving.export import ops_needing_xla
    assert xla_flags(exported) == {False}  # TF Serving runs XLA on CPU only when asked to
    assert ops_needing_xla(exported) == []  # (and so no warning about it)


def test_overwrite_with_xla(xla_exported):
    assert sorted(os.listdir(xla_exported)) == ["assets", "fingerprint.pb", "hparams.json",
                                                "saved_model.pb", "variables"]
    assert leftovers_beside(xla_exported) == []
    assert True in xla_flags(xla_exported)


def test_exporting_without_a_checkpoint_names_the_output_dir(trained, tmp_path):
    from t2t_lite import registry
    from t2t_lite.serving.export import export
    from t2t_lite.checkpoints import CheckpointError
    from t2t_lite.decoding.trained_model import TrainedRun
    empty = tmp_path / "untrained"
    with pytest.raises(CheckpointError) as error:
        export(TrainedRun(str(empty), "algorithmic_copy", "transformer",
                          registry.hparams("transformer_tiny"), trained[0]),
               str(tmp_path / "export"))
    assert f"no checkpoint in {empty}" in str(error.value)
    assert f"--output_dir={empty}" in str(error.value)
    assert not os.path.exists(tmp_path / "export")
    assert not os.path.exists(str(tmp_path / "export") + ".tmp")


# --- Without training: an untrained model, in this process -------------------------------------

def untrained_model(vocab_size):
    from t2t_lite import registry
    from t2t_lite.models.building import build_model
    hparams = registry.hparams("transformer_tiny").override_from_string(HPARAMS)
    return build_model("transformer", hparams, vocab_size)


def test_sentences_that_fail_are_not_searched_and_the_others_translate_as_in_the_decoder():
    """The decoder's rules, batch by batch: blank and unencodable sentences get "" and the
    score -inf (the decoder's None), a sentence longer than max_length tokens with EOS is cut
    (here max_length 6: "1 2 ... 9" is searched as 1 2 3 4 5 EOS), and the others are the
    decoder's translations (the failing rows do not change them)."""
    from t2t_lite.data.vocab import SymbolVocabulary
    from t2t_lite.decoding.decoder import Translator
    from t2t_lite.decoding.search import SearchHParams
    from t2t_lite.serving.export import FAILED_SCORE, ServingModule
    vocabulary = SymbolVocabulary(10)
    encoders = {"inputs": vocabulary, "targets": vocabulary}
    model = untrained_model(vocabulary.vocab_size)
    decode_hparams = SearchHParams(beam_size=2, extra_length=3)
    lines = ["3 7 1", "abc 99", "", "  ", "1 2 3 4 5 6 7 8 9", "3 11", "10 2"]
    module = ServingModule(model, encoders, decode_hparams, max_length=6)

    result = module.serve(tf.constant(lines))
    outputs, scores = Translator(model, encoders, decode_hparams, 6).translate_with_scores(
        lines, show_progress=False)
    assert [score is None for score in scores] == [False, True, True, True, False, True, False]
    assert texts(result["outputs"]) == outputs
    assert result["scores"].numpy().tolist() == [
        FAILED_SCORE if score is None else pytest.approx(score, abs=1e-5) for score in scores]
    cut = module.serve(tf.constant(["1 2 3 4 5"]))  # 5 tokens and EOS: the cut sentence
    assert texts(cut["outputs"]) == outputs[4:5]
    # Nothing to search: no search runs, and every row fails alone.
    nothing = module.serve(tf.constant(["", "x"]))
    assert texts(nothing["outputs"]) == ["", ""]
    assert nothing["scores"].numpy().tolist() == [FAILED_SCORE] * 2


SENTENCES = ["a dog runs in the park", "two dogs play with a red ball",
             "the man reads a book in the park", "a woman walks with two dogs",
             "children play football on the grass", "a red car is parked near the house"]


@pytest.fixture(scope="module")
def sentencepiece(tmp_path_factory):
    from t2t_lite.data.vocab import SentencePieceVocabulary
    path = str(tmp_path_factory.mktemp("vocab") / "tiny.bpe.model")
    return SentencePieceVocabulary.train(SENTENCES * 20, path, vocab_size=60)


@pytest.fixture(scope="module")
def sentencepiece_export(sentencepiece, tmp_path_factory):
    """(export_dir, model, decode_hparams): an untrained model with the SentencePiece vocabulary,
    beam 2."""
    from t2t_lite.decoding.search import SearchHParams
    from t2t_lite.serving.export import ServingModule, save_atomically
    model = untrained_model(sentencepiece.vocab_size)
    decode_hparams = SearchHParams(beam_size=2, extra_length=5)
    encoders = {"inputs": sentencepiece, "targets": sentencepiece}
    export_dir = str(tmp_path_factory.mktemp("sentencepiece") / "1")
    save_atomically(ServingModule(model, encoders, decode_hparams, max_length=256), export_dir)
    return export_dir, model, decode_hparams


def test_the_sentencepiece_graph_needs_no_xla(sentencepiece_export):
    from t2t_lite.serving.export import ops_needing_xla
    assert ops_needing_xla(sentencepiece_export[0]) == []


def test_source_ids_in_the_graph_are_the_python_ids_with_eos(sentencepiece):
    from t2t_lite.serving.export import source_ids
    encoded = [sentencepiece.encode(sentence) for sentence in SENTENCES]
    length = max(len(ids) for ids in encoded) + 1
    expected = [ids + [1] + [0] * (length - len(ids) - 1) for ids in encoded]
    assert source_ids(sentencepiece, tf.constant(SENTENCES), 256).numpy().tolist() == expected
    # Longer than max_length: cut, with EOS kept last.
    cut = source_ids(sentencepiece, tf.constant(SENTENCES[:1]), 4).numpy().tolist()
    assert cut == [encoded[0][:3] + [1]]


@pytest.fixture(scope="module")
def python_translations(sentencepiece, sentencepiece_export):
    """(outputs, scores) of SENTENCES from the search run in Python on the exported model."""
    from t2t_lite.decoding.search import search
    _, model, decode_hparams = sentencepiece_export
    ids = [sentencepiece.encode(sentence) + [1] for sentence in SENTENCES]
    padded = [row + [0] * (max(map(len, ids)) - len(row)) for row in ids]
    output_ids, scores = tf.function(search)(model, tf.constant(padded), decode_hparams)
    return ([sentencepiece.decode(row) for row in output_ids.numpy().tolist()],
            scores.numpy().tolist())


def test_a_sentencepiece_savedmodel_serves_what_python_computes(sentencepiece_export,
                                                                 python_translations):
    import tensorflow_text  # noqa: F401  (the tokenizer's ops, for loading)
    from t2t_lite.serving.export import FAILED_SCORE
    export_dir, model, _ = sentencepiece_export
    expected, scores = python_translations

    loaded = tf.saved_model.load(export_dir)
    result = loaded.signatures["serving_default"](inputs=tf.constant(SENTENCES + [" "]))
    assert texts(result["outputs"]) == expected + [""]
    assert result["scores"].numpy().tolist() == pytest.approx(scores + [FAILED_SCORE],
                                                              abs=1e-5)
    # An untrained model translates into something; its weights went into the SavedModel.
    assert len(loaded.model_variables) == len(model.weights)


def test_the_savedmodel_holds_the_weights_vocabulary_and_serve_only(sentencepiece_export):
    """A server restores every object and function of the SavedModel: no Keras layers in its
    object graph, and no function saved twice (each search once: `serve`'s, and the one
    `n_best` runs for its N)."""
    import collections
    import re
    from tensorflow.core.protobuf import saved_model_pb2
    export_dir, model, _ = sentencepiece_export
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as handle:
        saved_model.ParseFromString(handle.read())
    graph = saved_model.meta_graphs[0]
    kinds = collections.Counter(node.WhichOneof("kind")
                                for node in graph.object_graph_def.nodes)
    assert kinds["variable"] == len(model.weights)
    # The module, its two lists, the tokenizer and the signatures; a tracked Keras model
    # added one object per layer, sublayer and weight holder.
    assert kinds["user_object"] <= 5, kinds
    names = collections.Counter(re.sub(r"_\d+$", "", function.signature.name)
                                for function in graph.graph_def.library.function)
    assert names["while_body"] == 2
    # Each tf.cond has its own pair of branches: each beam search's first step has one, the
    # loop's step another.
    assert names["cond_true"] == names["cond_false"] == 4
    # Every other function of a search appears once per search, no more.
    repeated = {name: count for name, count in names.items()
                if count > 2 and name not in ("cond_true", "cond_false")}
    assert repeated == {}, repeated


def test_a_server_needs_only_the_sentencepiece_op_library(sentencepiece_export,
                                                          python_translations, tmp_path):
    """docs/serving.md's lean server: a fresh process that registers tensorflow-text's
    SentencePiece ops alone (not `import tensorflow_text`) serves the Python search's
    translations."""
    served = str(tmp_path / "served.json")
    script = textwrap.dedent(f"""
        import importlib.util, json, os, sys
        import tensorflow as tf
        text_ops = os.path.join(os.path.dirname(importlib.util.find_spec(
            "tensorflow_text").origin), "python", "ops", "_sentencepiece_tokenizer.so")
        tf.load_op_library(text_ops)
        translate = tf.saved_model.load({sentencepiece_export[0]!r}).signatures[
            "serving_default"]
        result = translate(inputs=tf.constant({SENTENCES!r}))
        json.dump({{"outputs": [t.decode("utf-8") for t in result["outputs"].numpy()],
                    "scores": result["scores"].numpy().tolist(),
                    "tensorflow_text": "tensorflow_text" in sys.modules}}, open({served!r}, "w"))
    """)
    run(sys.executable, "-c", script)
    with open(served) as handle:
        result = json.load(handle)
    expected, scores = python_translations
    assert result["tensorflow_text"] is False
    assert result["outputs"] == expected
    assert result["scores"] == pytest.approx(scores, abs=1e-5)


@pytest.mark.parametrize("export_format", ["saved_model", "ctranslate2"])
def test_an_export_dir_that_is_a_file_is_one_error_naming_the_flag(untrained_model_dir,
                                                                   tmp_path, export_format):
    data_dir, output_dir = untrained_model_dir
    in_the_way = tmp_path / "1"
    in_the_way.write_text("a file\n")
    code, out = program_runs.run("exporter", f"--format={export_format}",
                                 f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                                 f"--export_dir={in_the_way}")
    errors = program_runs.error_lines(out)
    assert code == 2 and len(errors) == 1 and "Traceback" not in out, out
    assert errors[0].startswith(f"error: --export_dir={in_the_way}"), errors
    assert in_the_way.read_text() == "a file\n"
    assert os.listdir(tmp_path) == ["1"]  # no lock, no temporary folder left beside it
