"""A SavedModel exported with hparams.mixed_precision=bfloat16 from a model trained in float32:
its weights are stored in bfloat16 (cast once, at load), its search multiplies in bfloat16, and
it serves the strings and scores the decoder gives in bfloat16."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf


@pytest.fixture(scope="module")
def trained(trained_copy_model):
    """(data_dir, output_dir, the bfloat16 hparams) of conftest's copy model trained in float32."""
    data_dir, output_dir, hparams = trained_copy_model
    return data_dir, output_dir, hparams.override_from_string("mixed_precision=bfloat16")


@pytest.fixture(scope="module")
def exported(trained):
    from t2t_lite.decoding.search import SearchHParams
    from t2t_lite.serving.export import export
    from t2t_lite.decoding.trained_model import TrainedRun
    data_dir, output_dir, hparams = trained
    export_dir = os.path.join(os.path.dirname(output_dir), "export_bfloat16", "1")
    export(TrainedRun(output_dir, "algorithmic_copy", "transformer", hparams, data_dir),
           export_dir, SearchHParams(beam_size=4, alpha=0.6))
    return export_dir


def test_the_export_records_bfloat16_and_stores_its_weights_so(exported):
    """hparams.json says bfloat16, and the SavedModel holds the weights cast to it (half the
    float32 size), but the embedding matrix and the layer norms' scales and offsets, float32
    as in the decoder (test_bfloat16_decoding.py)."""
    with open(os.path.join(exported, "hparams.json")) as handle:
        assert json.load(handle)["hparams"]["mixed_precision"] == "bfloat16"
    stored = tf.train.load_checkpoint(os.path.join(exported, "variables", "variables"))
    dtypes = {name: dtype.name for name, dtype in stored.get_variable_to_dtype_map().items()
              if name.startswith("model_variables/")}
    kernels = {name: dtype for name, dtype in dtypes.items() if "kernel" in name}
    assert kernels and set(kernels.values()) == {"bfloat16"}
    assert {dtype for name, dtype in dtypes.items()
            if any(part in name for part in ("embeddings", "gamma", "beta"))} == {"float32"}


def test_the_served_search_multiplies_in_bfloat16(exported):
    from tensorflow.core.protobuf import saved_model_pb2
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(exported, "saved_model.pb"), "rb") as handle:
        saved_model.ParseFromString(handle.read())
    graph = saved_model.meta_graphs[0].graph_def
    matmul_dtypes = {tf.as_dtype(node.attr["T"].type).name
                     for function in graph.library.function for node in function.node_def
                     if node.op == "MatMul"}
    assert matmul_dtypes == {"bfloat16", "float32"}  # the layers; the pre-softmax projection


def test_the_export_serves_the_decoders_bfloat16_translations(trained, exported):
    """The 100 held-out sentences as one request, and through the decoder as one batch (the
    same padding, so the same products): the same strings and scores. (The symbol vocabulary
    needs no tensorflow-text, so the SavedModel loads in this process.)"""
    from t2t_lite import registry
    from t2t_lite.decoding import decoder
    from t2t_lite.models import restoring
    from t2t_lite.decoding.search import SearchHParams
    data_dir, output_dir, hparams = trained
    with open(os.path.join(data_dir, "algorithmic_copy-test.inputs.txt")) as handle:
        lines = handle.read().splitlines()
    problem = registry.problem("algorithmic_copy")
    model = restoring.load_model("transformer", hparams, problem.vocab_size(data_dir), output_dir)
    translator = decoder.Translator(model, problem.feature_encoders(data_dir),
                                    SearchHParams(beam_size=4, alpha=0.6), problem.max_length,
                                    translator_hparams=decoder.TranslatorHParams(batch_size=100))
    want, want_scores = translator.translate_with_scores(lines, show_progress=False)

    served = tf.saved_model.load(exported).signatures["serving_default"](
        inputs=tf.constant(lines))
    assert [text.decode("utf-8") for text in served["outputs"].numpy()] == want
    np.testing.assert_allclose(served["scores"].numpy(), want_scores, rtol=1e-6)
    assert sum(out == line for out, line in zip(want, lines)) >= 90  # the trained weights
