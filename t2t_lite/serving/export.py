"""A trained model as a SavedModel that translates text: strings in, strings and scores out.

tensor2tensor's `t2t-exporter` saved the Estimator's predict graph behind
`Problem.serving_input_fn`, whose input was serialized tf.Examples of token ids: a client had
to run the vocabulary in Python before and after every request. Here the graph holds all of it:

    inputs: string [batch]
      -> which rows are searched: not blank, and accepted by vocabulary.encodable_in_graph
      -> vocabulary.encode_in_graph of those rows (tensorflow-text's SentencePiece op, or the
         symbol split)
      -> truncate to problem.max_length tokens, EOS last, pad with 0
      -> decoding.search.search (the decoder's beam or greedy search, same SearchHParams)
      -> vocabulary.decode_in_graph (cut at EOS, drop PAD, detokenize)
      -> every row back in its place
    outputs: {"outputs": string [batch], "scores": float32 [batch]}

The "score" signature scores given translations (OpenNMT-tf's `onmt-main score`, fairseq's
--score-reference) with decoding.scoring.target_log_likelihoods, nothing searched:

    inputs: string [batch], targets: string [batch]
      -> which pairs are scored: neither side blank, each accepted by its vocabulary
      -> both sides tokenized as `serve` tokenizes its inputs (source_ids; the targets with the
         targets vocabulary), cut to problem.max_length tokens, EOS last
      -> the teacher-forced log-likelihood over the target's pieces and EOS
    outputs: {"log_likelihood": float32 [batch], "pieces": int32 [batch]}

A pair that is not scored gets log_likelihood FAILED_SCORE and pieces 0, and the others are
scored.

The "n_best" signature (t2t's return_beams, the decoder's n-best lists) returns the N best of
each input, best first, N the exporter's num_hypotheses (default: beam_size):

    inputs: string [batch]
    outputs: {"outputs": string [batch, N], "scores": float32 [batch, N] (the search's),
              "log_probs": float32 [batch, N] (raw: what "score" gives the same pair)}

No sentence fails the others, as in the decoder (decoding.decoder.Translator): a blank sentence
and one the vocabulary cannot encode (a symbol out of range, a word in a symbol problem) are not
searched; their output is "" and their score FAILED_SCORE = -inf (the decoder's None; TensorFlow
Serving's REST API writes it as -Infinity, which Python's json module reads). A sentence
longer than max_length tokens (EOS included) is cut to that length, as the decoder cuts it.

A request is translated as one batch (t2t's serving input also batched whatever the client
sent); the decoder's TranslatorHParams (batch_size, jit_compile) do not apply.

XLA: by default the search is not XLA-compiled in the SavedModel, because TensorFlow Serving
runs XLA on CPU only when started with --xla_cpu_compilation_enabled=true, and without XLA the
search is faster on a CPU (benchmarks/decode_speed.py --compare). The exporter's `jit_compile`
stands for the decoder's TranslatorHParams.jit_compile (its XLA switch): `jit_compile=True`
compiles the search, with fixed shapes (not the string ops, which XLA cannot compile), for
servers that have XLA. Single ops of the tf2xla family ("Xla*", e.g. the XlaDynamicUpdateSlice
that Keras' `ops.slice_update` becomes) also need XLA to run; the search avoids them (its
caches grow by concatenation, or with XLA are written with masks), and `ops_needing_xla` lists
any that appear, with a warning at export.

Loading a SavedModel of a SentencePiece problem needs tensorflow-text's ops registered:
`import tensorflow_text` in Python; TensorFlow Serving's model server links a (pinned) version
of them. The symbol vocabulary of the algorithmic problems uses core string ops only.
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
