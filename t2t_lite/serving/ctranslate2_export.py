"""A trained model as a CTranslate2 model folder (`t2t_lite-exporter --format=ctranslate2`),
written, as OpenNMT-tf's and eole's converters write theirs, through CTranslate2's own
specification classes (`ctranslate2.specs.TransformerSpec`), which validate the weights' names
and shapes, quantize them and write `model.bin`, `config.json` and the vocabulary. How the
model maps onto the spec: docs/serving.md (its last section). Only the sublayer sequences can
ask for a layout CTranslate2 lacks (`unrepresentable`, refused before anything is written).
An input (EOS included) and an output may each be up to POSITIONS tokens.
"""
import json
import os

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_lite.storage import atomic_files
from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding.ctranslate2_translator import (
    EXPORT_RECORD, SENTENCEPIECE_MODEL, import_ctranslate2)
from t2t_lite.errors import UserError
from t2t_lite.layers.timing_signal import timing_signal
from t2t_lite.storage.run_description import save_run_description
from t2t_lite.serving.export import check_export_dir
from t2t_lite.storage.storage_errors import reported_full_storage

# CTranslate2's names (ctranslate2.specs' optimize), the first its CPU users' choice: int8
# weights and products, the rest in float32 (int8 and int8_float32 are the same on a CPU).
QUANTIZATIONS = ("int8", "int8_float32", "int16", "bfloat16", "float32")
# Rows of the position table: the longest input (EOS included) and output the folder serves.
POSITIONS = 1024
# (layer_preprocess_sequence, layer_postprocess_sequence) without dropout -> pre_norm.
NORM_LAYOUTS = {("n", "a"): True, ("", "an"): False}
# The attention translate_batch(return_attention=True) returns, which the alignments are read
# from: the last decoder layer's encoder-decoder attention, averaged over all its heads (0).
ALIGNMENT_LAYER = -1
ALIGNMENT_HEADS = 0


class CTranslate2ExportError(UserError, ValueError):
    """The model has a setting CTranslate2 cannot represent, or the quantization is unknown."""


def _norm_layout(hparams) -> tuple:
    """(layer_preprocess_sequence, layer_postprocess_sequence) without their dropout ("d"), a
    no-op at inference: a key of NORM_LAYOUTS when CTranslate2 has the layout."""
    def without_dropout(sequence):
        return "" if sequence == "none" else sequence.replace("d", "")

    return (without_dropout(hparams.layer_preprocess_sequence),
            without_dropout(hparams.layer_postprocess_sequence))


def unrepresentable(hparams) -> list:
    """The hparams settings CTranslate2's TransformerSpec has no layout for, each as
    "name=value (why)"; [] when the model converts."""
    if _norm_layout(hparams) in NORM_LAYOUTS:
        return []
    return [f"layer_preprocess_sequence={hparams.layer_preprocess_sequence!r} with "
            f"layer_postprocess_sequence={hparams.layer_postprocess_sequence!r} (CTranslate2 "
            f"has pre-norm \"n\"/\"da\" and post-norm \"none\"/\"dan\" only)"]


def _transposed(variable):
    return np.ascontiguousarray(np.transpose(np.asarray(variable, np.float32)))


def _set_norm(spec, process):
    """spec (a LayerNormSpec) <- the one layer norm of a t2t process sequence."""
    norm, = process.norms
    spec.gamma = np.asarray(norm.gamma, np.float32)
    spec.beta = np.asarray(norm.beta, np.float32)


def _set_dense(spec, dense):
    spec.weight = _transposed(dense.kernel)
    if dense.bias is not None:
        spec.bias = np.asarray(dense.bias, np.float32)


def _set_attention(spec, attention, connection, pre_norm, self_attention):
    _set_norm(spec.layer_norm, connection.pre if pre_norm else connection.post)
    query, key, value = (_transposed(dense.kernel) for dense in (
        attention.query_dense, attention.key_dense, attention.value_dense))
    if self_attention:
        spec.linear[0].weight = np.concatenate([query, key, value])
    else:
        spec.linear[0].weight = query
        spec.linear[1].weight = np.concatenate([key, value])
    _set_dense(spec.linear[-1], attention.output_dense)


def _set_feed_forward(spec, layer, pre_norm):
    connection = layer.feed_forward_connection
    _set_norm(spec.layer_norm, connection.pre if pre_norm else connection.post)
    _set_dense(spec.linear_0, layer.feed_forward.filter_dense)
    _set_dense(spec.linear_1, layer.feed_forward.output_dense)


def _set_stack(spec, embedding, final, pre_norm, timing_signal_table):
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = np.asarray(embedding.embeddings, np.float32)
    spec.scale_embeddings = True
    spec.position_encodings.encodings = timing_signal_table
    if pre_norm:
        _set_norm(spec.layer_norm, final)


def model_spec(model, tokens: dict, unknown_token: str):
    """The TransformerSpec of a t2t_lite Transformer (float32 weights), its vocabularies
    `tokens` {"inputs": [...], "targets": [...]} (vocabulary.tokens) registered, with
    `unknown_token` (vocabulary.unknown_token) as what CTranslate2 maps unknown tokens to."""
    import_ctranslate2()
    from ctranslate2.specs import transformer_spec
    hp = model.hparams
    pre_norm = NORM_LAYOUTS[_norm_layout(hp)]
    spec = transformer_spec.TransformerSpec.from_config(
        (hp.encoder_layers, hp.decoder_layers), hp.num_heads, pre_norm=pre_norm,
        alignment_layer=ALIGNMENT_LAYER, alignment_heads=ALIGNMENT_HEADS)
    table = np.asarray(timing_signal(POSITIONS, hp.hidden_size, hp.timing_signal), np.float32)
    _set_stack(spec.encoder, model.source_embedding, model.encoder_final, pre_norm, table)
    _set_stack(spec.decoder, model.target_embedding, model.decoder_final, pre_norm, table)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_stack):
        _set_attention(layer_spec.self_attention, layer.self_attention,
                       layer.self_attention_connection, pre_norm, self_attention=True)
        _set_feed_forward(layer_spec.ffn, layer, pre_norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_stack):
        _set_attention(layer_spec.self_attention, layer.self_attention,
                       layer.self_attention_connection, pre_norm, self_attention=True)
        _set_attention(layer_spec.attention, layer.encoder_decoder_attention,
                       layer.encoder_decoder_connection, pre_norm, self_attention=False)
        _set_feed_forward(layer_spec.ffn, layer, pre_norm)
    # t2t's shift_right starts the decoder from PAD, whose embedding TokenEmbedding zeroes.
    spec.decoder.start_from_zero_embedding = True
    spec.decoder.projection.weight = np.asarray(model.softmax_embedding.embeddings, np.float32)
    target_tokens = tokens["targets"]
    spec.register_source_vocabulary(tokens["inputs"])
    spec.register_target_vocabulary(target_tokens)
    spec.config.add_source_eos = True
    spec.config.eos_token = target_tokens[EOS_ID]
    spec.config.decoder_start_token = target_tokens[PAD_ID]
    spec.config.bos_token = target_tokens[PAD_ID]  # t2t has none; the start symbol stands in
    spec.config.unk_token = unknown_token
    spec.config.layer_norm_epsilon = hp.norm_epsilon
    return spec


def export_ctranslate2(run, export_dir: str, quantization: str = "int8",
                       checkpoint_path: str = None, overwrite: bool = False) -> str:
    """Exports the checkpoint (run.checkpoint's; `run` a decoding.trained_model.TrainedRun) as
    a CTranslate2 model folder quantized as `quantization` (write_folder), with hparams.json
    and the vocabulary's record. Returns the checkpoint path."""
    if quantization not in QUANTIZATIONS:
        raise CTranslate2ExportError(f"--quantization={quantization}: expected one of "
                                     f"{', '.join(QUANTIZATIONS)} (CTranslate2's names)")
    refused = unrepresentable(run.hparams)
    if refused:
        raise CTranslate2ExportError("CTranslate2 cannot represent this model's "
                                     + "; ".join(refused))
    import_ctranslate2()  # one error naming the extra, before any work
    check_export_dir(export_dir, overwrite)
    vocabulary_record = run.check_vocabulary()
    encoders = run.problem.feature_encoders(run.data_dir)
    checkpoint_path = run.checkpoint(checkpoint_path)
    # The spec takes float32 values and quantizes them itself, whatever the model trained in.
    model = run.load_model(checkpoint_path, run.hparams.replace(mixed_precision="float32"))
    write_folder(model, encoders, export_dir, quantization,
                 export_record={"checkpoint": checkpoint_path},
                 write_extras=lambda folder: save_run_description(
                     folder, run.problem_name, run.model_name, run.hparams, vocabulary_record))
    logging.info("exported %s to %s as a CTranslate2 model (%s)", checkpoint_path, export_dir,
                 quantization)
    return checkpoint_path


def write_folder(model, encoders: dict, export_dir: str, quantization: str,
                 export_record: dict = None, write_extras=None):
    """Writes the CTranslate2 folder of `model` (float32 weights) and `encoders` to export_dir,
    renamed when complete: model.bin, config.json, the vocabulary, SENTENCEPIECE_MODEL for a
    SentencePiece vocabulary, EXPORT_RECORD (`export_record`, max_positions) and what
    `write_extras(folder)` adds."""
    spec = model_spec(model, {name: vocabulary.tokens for name, vocabulary in encoders.items()},
                      encoders["inputs"].unknown_token)
    spec.validate()
    if quantization == "bfloat16":
        _cast_to_bfloat16(spec)
    spec.optimize(quantization=quantization)
    with reported_full_storage(export_dir, "export_dir"), \
            atomic_files.atomic_folder(export_dir) as temporary:
        os.makedirs(temporary, exist_ok=True)  # CTranslate2 writes into a folder that exists
        spec.save(temporary)
        model_paths = {getattr(vocabulary, "model_path", None) for vocabulary in encoders.values()}
        model_paths.discard(None)
        if model_paths:
            model_path, = model_paths  # t2t_lite's SentencePiece problems share one model
            tf.io.gfile.copy(model_path, os.path.join(temporary, SENTENCEPIECE_MODEL))
        if write_extras:
            write_extras(temporary)
        with open(os.path.join(temporary, EXPORT_RECORD), "w", encoding="utf-8") as handle:
            json.dump({**(export_record or {}), "quantization": quantization,
                       "max_positions": POSITIONS}, handle, indent=2)


def _cast_to_bfloat16(spec):
    """Casts every non-scalar float32 weight of the validated `spec` to bfloat16 with NumPy's
    bfloat16 type (ml_dtypes), so that optimize(quantization="bfloat16") finds them cast: its
    own cast needs torch."""
    from ctranslate2.specs import model_spec as specs
    bfloat16 = tf.bfloat16.as_numpy_dtype

    def cast(layer, name, value):
        if isinstance(value, specs.NumpyVariable) and value.dtype == "float32" \
                and not value.is_scalar():
            setattr(layer, name.split("/")[-1], specs.NumpyVariable(
                value.numpy().astype(bfloat16)))

    specs.visit_spec(spec, cast)
