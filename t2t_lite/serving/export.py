"""A trained model as a SavedModel that translates text, the vocabulary and the search inside
the graph: "serving_default" (strings -> translations and scores), "n_best" (the
num_hypotheses best of each) and "score" (given translations' log-likelihoods); a row that
fails gets "" and FAILED_SCORE and fails no other (docs/serving.md).
"""
import dataclasses
import json

import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints
from t2t_lite.storage import atomic_files
from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding import strategies
from t2t_lite.decoding.scoring import target_log_likelihoods
from t2t_lite.decoding.search import Hypotheses, SearchHParams, search, search_hypotheses
from t2t_lite.errors import UserError
from t2t_lite.storage.run_description import save_run_description
from t2t_lite.storage.storage_errors import reported_full_storage

SIGNATURE_NAME = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY  # "serving_default"
SCORE_SIGNATURE_NAME = "score"  # given translations' log-likelihoods
N_BEST_SIGNATURE_NAME = "n_best"  # the N best translations of each input and their scores
FAILED_SCORE = float("-inf")  # the score of a sentence that is not translated


class ExportError(UserError, ValueError):
    """The export folder exists and is not empty (and overwriting was not asked for)."""


def source_ids(vocabulary, texts, max_length: int):
    """t2t's text2text inputs in the graph: strings [batch] -> int32 ids [batch, S], each row
    its tokens cut to `max_length` - 1, then EOS (always last) and 0-padding."""
    tokens = vocabulary.encode_in_graph(texts)[:, :max_length - 1]
    padded = tf.pad(tokens.to_tensor(default_value=PAD_ID), [[0, 0], [0, 1]])
    # EOS written after each row's tokens (a ragged concat would add assertion branches to the
    # graph for every call).
    eos = tf.one_hot(tokens.row_lengths(), tf.shape(padded)[1], on_value=EOS_ID, off_value=0,
                     dtype=padded.dtype)
    return tf.cast(padded + eos, tf.int32)


def usable(vocabulary, texts):
    """bool [batch]: the strings a signature tokenizes: not blank, and accepted by
    vocabulary.encodable_in_graph (the decoder's rules for a line it translates)."""
    return tf.logical_and(tf.strings.length(tf.strings.strip(texts)) > 0,
                          vocabulary.encodable_in_graph(texts))


def score_function(model, encoders: dict, max_length: int):
    """The "score" signature's tf.function: strings "inputs" and "targets" [batch] ->
    {"log_likelihood": float32, "pieces": int32} [batch]; FAILED_SCORE and 0 for a pair with
    a blank source or an unencodable side, which fails no other. A blank target is scored as
    the decoder scores it: its EOS alone (1 piece)."""
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs"),
                                  tf.TensorSpec([None], tf.string, name="targets")])
    def score(inputs, targets):
        targets = tf.where(tf.strings.length(tf.strings.strip(targets)) > 0, targets, "")
        scored = tf.logical_and(usable(encoders["inputs"], inputs),
                                encoders["targets"].encodable_in_graph(targets))
        rows = tf.where(scored)  # int64 [n, 1]
        log_likelihood, pieces = target_log_likelihoods(
            model, source_ids(encoders["inputs"], tf.boolean_mask(inputs, scored), max_length),
            source_ids(encoders["targets"], tf.boolean_mask(targets, scored), max_length))
        batch = tf.shape(inputs)
        return {"log_likelihood": tf.tensor_scatter_nd_update(tf.fill(batch, FAILED_SCORE),
                                                              rows, log_likelihood),
                "pieces": tf.tensor_scatter_nd_update(tf.zeros(batch, tf.int32), rows, pieces)}

    return score


def n_best_hparams(search_hparams: SearchHParams) -> SearchHParams:
    """The n_best signature's search: num_hypotheses when the exporter's --decode_hparams ask
    for more than 1, else the strategy's whole list (t2t's return_beams: the beam)."""
    hp = search_hparams
    whole = strategies.chosen(hp).n_best(dataclasses.asdict(hp))
    return dataclasses.replace(hp, num_hypotheses=hp.num_hypotheses if hp.num_hypotheses > 1
                               else whole)


def n_best_function(model, encoders: dict, search_hparams: SearchHParams, max_length: int,
                    jit_compile: bool = False):
    """The "n_best" signature's tf.function: strings "inputs" [batch] -> {"outputs", "scores",
    "log_probs"} [batch, N], the N = num_hypotheses best of each input, best first, with the
    search's scores and raw log probabilities; "" and FAILED_SCORE for one not searched."""
    count = search_hparams.num_hypotheses
    hypotheses_of = tf.function(
        lambda ids: search_hypotheses(model, ids, search_hparams, fixed_shapes=jit_compile),
        jit_compile=jit_compile)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def n_best(inputs):
        vocabulary = encoders["inputs"]
        searched = usable(vocabulary, inputs)
        rows = tf.where(searched)  # int64 [n, 1]
        ids = source_ids(vocabulary, tf.boolean_mask(inputs, searched), max_length)
        found = tf.cond(tf.size(rows) > 0, lambda: hypotheses_of(ids),
                        lambda: Hypotheses(tf.zeros([0, count, 1], tf.int32),
                                           tf.zeros([0, count]), tf.zeros([0, count])))
        shape = tf.shape(found.ids)
        texts = encoders["targets"].decode_in_graph(
            tf.reshape(found.ids, [shape[0] * count, shape[2]]))
        batch = tf.stack([tf.shape(inputs)[0], count])
        return {"outputs": tf.tensor_scatter_nd_update(
                    tf.fill(batch, ""), rows, tf.reshape(texts, [shape[0], count])),
                "scores": tf.tensor_scatter_nd_update(tf.fill(batch, FAILED_SCORE), rows,
                                                      found.scores),
                "log_probs": tf.tensor_scatter_nd_update(tf.fill(batch, FAILED_SCORE), rows,
                                                         found.log_probs)}

    return n_best


class ServingModule(tf.Module):
    """What the SavedModel holds, and nothing else: the model's weights by Keras path (Keras 3
    keeps the stacks in lists TensorFlow's object graph does not follow), the vocabularies'
    resources and the signatures' functions. The model and encoders live in the functions'
    closures: as attributes, the model's Keras objects would be saved too (about 1,800 for
    transformer_small, a server about 40 MB bigger) and the search a second time.
    """

    def __init__(self, model, encoders: dict, search_hparams: SearchHParams, max_length: int,
                 jit_compile: bool = False):
        super().__init__(name="serving")
        self.model_variables = checkpoints.model_variables(model)
        # tensorflow-text tokenizers own a resource (the SentencePiece model) to save with it.
        self.vocabulary_resources = [vocabulary.tokenizer for vocabulary in encoders.values()
                                     if hasattr(vocabulary, "tokenizer")]
        # Under XLA the search keeps fixed shapes, as the decoder's does.
        search_ids = tf.function(
            lambda ids: search(model, ids, search_hparams, fixed_shapes=jit_compile),
            jit_compile=jit_compile)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def serve(inputs):
            """Raw sentences [batch] -> {"outputs": translations [batch], "scores": float32
            [batch]} (beam scores: log probability over the length penalty; greedy: log
            probability; FAILED_SCORE and "" for a blank sentence or one the vocabulary
            cannot encode)."""
            vocabulary = encoders["inputs"]
            searched = usable(vocabulary, inputs)
            rows = tf.where(searched)  # int64 [n, 1]
            ids = source_ids(vocabulary, tf.boolean_mask(inputs, searched), max_length)
            # Nothing to search (every sentence failed): no search, and no XLA compile for 0
            # rows.
            output_ids, scores = tf.cond(
                tf.size(rows) > 0, lambda: search_ids(ids),
                lambda: (tf.zeros([0, 1], tf.int32), tf.zeros([0], tf.float32)))
            outputs = encoders["targets"].decode_in_graph(output_ids)
            batch = tf.shape(inputs)
            return {"outputs": tf.tensor_scatter_nd_update(tf.fill(batch, ""), rows, outputs),
                    "scores": tf.tensor_scatter_nd_update(tf.fill(batch, FAILED_SCORE), rows,
                                                          scores)}

        self.serve = serve
        self.score = score_function(model, encoders, max_length)
        self.n_best = n_best_function(model, encoders, n_best_hparams(search_hparams),
                                      max_length, jit_compile)

    def signature_functions(self) -> dict:
        """The SavedModel's signatures by key: "serving_default" (`serve`), "n_best" and
        "score"."""
        return {SIGNATURE_NAME: self.serve, N_BEST_SIGNATURE_NAME: self.n_best,
                SCORE_SIGNATURE_NAME: self.score}


def check_export_dir(export_dir: str, overwrite: bool = False):
    """Raises ExportError if export_dir holds something and overwrite is off."""
    if tf.io.gfile.exists(export_dir) and tf.io.gfile.listdir(export_dir) and not overwrite:
        raise ExportError(f"--export_dir={export_dir} is not empty: choose another folder (for "
                          f"TensorFlow Serving, a new version number) or pass --overwrite")


def save_atomically(module, export_dir: str, write_extras=None):
    """Saves under a hidden temporary name renamed to export_dir when complete (with the files
    `write_extras(folder)` adds), so that a server watching the parent folder sees whole
    SavedModels only; a full disk is a StorageError naming --export_dir."""
    with reported_full_storage(export_dir, "export_dir"), \
            atomic_files.atomic_folder(export_dir) as temporary:
        tf.saved_model.save(module, temporary, signatures=module.signature_functions())
        if write_extras:
            write_extras(temporary)


def ops_needing_xla(export_dir: str) -> list:
    """The op types of a SavedModel that TensorFlow runs only by compiling them with XLA (the
    tf2xla "Xla*" ops), sorted; empty for a graph any TensorFlow Serving build can run."""
    from tensorflow.core.protobuf import saved_model_pb2
    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(tf.io.gfile.join(export_dir, "saved_model.pb"), "rb") as handle:
        saved_model.ParseFromString(handle.read())
    graph = saved_model.meta_graphs[0].graph_def
    nodes = list(graph.node) + [node for function in graph.library.function
                                for node in function.node_def]
    return sorted({node.op for node in nodes if node.op.startswith("Xla")})


def export(run, export_dir: str, search_hparams: SearchHParams = SearchHParams(),
           checkpoint_path: str = None, jit_compile: bool = False,
           overwrite: bool = False) -> str:
    """Exports the checkpoint (run.checkpoint's; `run` a decoding.trained_model.TrainedRun) as
    a SavedModel with its signatures, and hparams.json beside it (with the vocabulary's
    record); returns the checkpoint path. Another vocabulary in run.data_dir than the
    recorded one is a VocabularyError before anything is written."""
    check_export_dir(export_dir, overwrite)
    vocabulary, problem = run.check_vocabulary(), run.problem
    encoders = problem.feature_encoders(run.data_dir)
    checkpoint_path = run.checkpoint(checkpoint_path)  # named in the log and returned
    module = ServingModule(run.load_model(checkpoint_path), encoders, search_hparams,
                           problem.max_length, jit_compile)

    def write_description(folder):
        save_run_description(folder, run.problem_name, run.model_name, run.hparams, vocabulary)

    save_atomically(module, export_dir, write_description)
    logging.info("exported %s to %s (%s, XLA %s)", checkpoint_path, export_dir,
                 json.dumps(dataclasses.asdict(search_hparams)), "on" if jit_compile else "off")
    xla_ops = ops_needing_xla(export_dir)
    if xla_ops and not jit_compile:
        logging.warning("the SavedModel uses %s, which TensorFlow runs by compiling it with XLA: "
                        "start TensorFlow Serving with --xla_cpu_compilation_enabled=true",
                        ", ".join(xla_ops))
    return checkpoint_path
