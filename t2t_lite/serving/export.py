"""A trained model as a SavedModel that translates text: strings in, strings and scores out
(docs/serving.md). Unlike t2t-exporter's graph, whose input was serialized tf.Examples of
ids, the graph holds the vocabulary too:

    inputs: string [batch]
      -> which rows are searched: not blank, and accepted by vocabulary.encodable_in_graph
      -> vocabulary.encode_in_graph of those rows (tensorflow-text's SentencePiece op, or the
         symbol split)
      -> truncate to problem.max_length tokens, EOS last, pad with 0
      -> decoding.search.search (the decoder's search, same SearchHParams)
      -> vocabulary.decode_in_graph (cut at EOS, drop PAD, detokenize)
      -> every row back in its place
    outputs: {"outputs": string [batch], "scores": float32 [batch]}

"score" scores given translations (decoding.scoring), nothing searched: inputs and targets
string [batch] -> {"log_likelihood": float32 [batch], "pieces": int32 [batch]}, FAILED_SCORE
and 0 for a pair with a side blank or not encodable. "n_best" (t2t's return_beams) returns the
N best of each input, best first (N: num_hypotheses, by default the strategy's whole list):
{"outputs": string [batch, N], "scores": float32 [batch, N] (the search's), "log_probs":
float32 [batch, N] (raw: what "score" gives the same pair)}.

As in the decoder, a blank sentence or one the vocabulary cannot encode is not searched ("" and
FAILED_SCORE = -inf), and one longer than max_length tokens is cut. A request is one batch.
`jit_compile` compiles the search with XLA for servers that have it (not the string ops);
without it no op of the tf2xla family may run (`ops_needing_xla` warns of any).
"""
import dataclasses
import json

import tensorflow as tf
from absl import logging

from t2t_lite import checkpoints, registry
from t2t_lite.storage import atomic_files
from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding import strategies
from t2t_lite.decoding.scoring import target_log_likelihoods
from t2t_lite.decoding.search import Hypotheses, SearchHParams, search, search_hypotheses
from t2t_lite.errors import UserError
from t2t_lite.models import restoring
from t2t_lite.storage.run_description import checked_vocabulary, save_run_description
from t2t_lite.storage.storage_errors import reported_full_storage

SIGNATURE_NAME = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY  # "serving_default"
SCORE_SIGNATURE_NAME = "score"  # given translations' log-likelihoods
N_BEST_SIGNATURE_NAME = "n_best"  # the N best translations of each input and their scores
FAILED_SCORE = float("-inf")  # the score of a sentence that is not translated


class ExportError(UserError, ValueError):
    """The export folder exists and is not empty (and overwriting was not asked for)."""


def source_ids(vocabulary, texts, max_length: int):
    """t2t's text2text inputs in the graph: strings [batch] -> int32 ids [batch, S], each row the
    tokens, cut to `max_length` - 1 so that EOS is always last, then EOS and 0-padding
    (t2t's serving input truncated to max_input_seq_length and could drop the EOS)."""
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
    """The "score" signature's tf.function: strings "inputs" [batch] and "targets" [batch] ->
    {"log_likelihood": float32 [batch], "pieces": int32 [batch]} (scoring's
    target_log_likelihoods of the tokenized pair; FAILED_SCORE and 0 for a pair with a blank
    or unencodable side, which does not fail the others)."""
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs"),
                                  tf.TensorSpec([None], tf.string, name="targets")])
    def score(inputs, targets):
        scored = tf.logical_and(usable(encoders["inputs"], inputs),
                                usable(encoders["targets"], targets))
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
    """The "n_best" signature's tf.function: strings "inputs" [batch] -> {"outputs": string
    [batch, N], "scores": float32 [batch, N], "log_probs": float32 [batch, N]}, the N =
    search_hparams.num_hypotheses best of each input, best first (search_hypotheses: the
    search's scores, and the raw log probabilities that the score signature gives the same
    pairs); "" and FAILED_SCORE for a sentence not searched (as `serve`)."""
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
    """What the SavedModel holds, and nothing else: the model's weights, the vocabularies'
    resources and the signatures' functions (`serve`, `score`; signature_functions).

    Keras 3 keeps the encoder and decoder stacks in Python lists that TensorFlow's object graph
    does not follow (t2t_lite/checkpoints.py), so every weight is tracked here by its Keras
    path; otherwise the saved graph would capture weights the SavedModel cannot restore.

    The model and the encoders live in the functions' closures, not in attributes: an attribute
    would put the model's Keras objects into the SavedModel's object graph (about 1,800 for
    transformer_small, restored by every server and never used), and a tf.function attribute
    for the search would be saved a second time beside `serve`. Held this way, a server
    process is about 40 MB smaller once loaded (docs/serving.md).
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
    """Saves under atomic_files' hidden temporary name beside export_dir and renames it to
    export_dir when complete, so a folder named export_dir is always a whole SavedModel
    (TensorFlow Serving may be watching the parent folder for new versions, and it loads only
    numbered folders). `write_extras(folder)` adds files before the rename. A write that fails
    removes the temporary folder; one that finds the disk full is a StorageError naming
    --export_dir, not TensorFlow's ResourceExhaustedError about a file in the temporary
    folder."""
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


def export(problem_name: str, model_name: str, hparams, data_dir: str, output_dir: str,
           export_dir: str, search_hparams: SearchHParams = SearchHParams(),
           checkpoint_path: str = None, jit_compile: bool = False,
           overwrite: bool = False) -> str:
    """Exports the checkpoint (default: the latest in output_dir) as a SavedModel with the
    "serving_default" and "score" signatures, and hparams.json beside it (with the
    vocabulary's record); returns the checkpoint path. A data_dir whose vocabulary is not the
    one output_dir's hparams.json records is a VocabularyError before anything is written."""
    check_export_dir(export_dir, overwrite)
    problem = registry.problem(problem_name)
    vocabulary = checked_vocabulary(output_dir, problem, data_dir)
    encoders = problem.feature_encoders(data_dir)
    # Resolved here, so that the log and the return value name the prefix restored (also for a
    # folder given); load_model finds that prefix as it is.
    checkpoint_path = checkpoints.resolve(output_dir, checkpoint_path)
    model = restoring.load_model(model_name, hparams, problem.vocab_size(data_dir), output_dir,
                                 checkpoint_path)
    module = ServingModule(model, encoders, search_hparams, problem.max_length, jit_compile)

    def write_description(folder):
        save_run_description(folder, problem_name, model_name, hparams, vocabulary)

    save_atomically(module, export_dir, write_description)
    logging.info("exported %s to %s (%s, XLA %s)", checkpoint_path, export_dir,
                 json.dumps(dataclasses.asdict(search_hparams)), "on" if jit_compile else "off")
    xla_ops = ops_needing_xla(export_dir)
    if xla_ops and not jit_compile:
        logging.warning("the SavedModel uses %s, which TensorFlow runs by compiling it with XLA: "
                        "start TensorFlow Serving with --xla_cpu_compilation_enabled=true",
                        ", ".join(xla_ops))
    return checkpoint_path
