"""Where beam search's time goes, per TensorFlow operation, on a trained translate_multi30k_deen
model.

  python benchmarks/profile_decode.py --data_dir=D --output_dir=O [--checkpoint=C]
      [--num_sentences=128] [--batch_size=32 --beam_size=4 --alpha=0.6]
      [--stop_after_finished=0] [--jit_compile]
      [--output_json=F]

The model in O (its averaged/ checkpoint when there, as multi30k_recipe.py decodes, else its
latest; --checkpoint chooses) translates the first --num_sentences lines of the test set
through the decoder's Translator, as t2t_lite-decoder does (sorted by length into batches of
--batch_size). Three passes over the same sentences:

1. warm-up, untimed (tf.function traces the search; XLA compiles it per padded shape);
2. timed: sentences per second;
3. profiled under `tf.profiler`, whose trace the profiler's own `framework_op_stats` tool turns
   into self time and executions ("occurrences") per operation, as profile_step.py does for
   training steps.

Printed: the total self time (and per sentence); its share inside the search loop (the
decoder's steps, with the loop's self time per search step) and outside it (the encoder, the
beams' set-up, the choice of the result); self time per operation type (top 25); the same in
groups (matrix multiplies, top-k, softmax, copies of caches and beams, layer norm, elementwise,
other); and the top 20 operations by name, with the loop's "while/body/_N/while/" prefixes cut
off.

Search steps: the executions of the log-softmax over the vocabulary, which the search computes
once a step (greedy and beam search alike); summed over the batches.

Caveats:
- Self time adds up the threads of all cores, so it can exceed the profiled pass's wall time;
  the profiler slows the pass down (its wall time is printed next to the timed pass's).
- The groups go by operation type, and the layer-norm group also by name scope (Keras's
  LayerNormalization layers are named norm_N): a gather, concat or select counts as a copy
  whether it reorders the self-attention caches, the beams' sequences or the sentences left.
- Executions are the trace's counts, which need not be one a step: the vocabulary projection's
  matmul and the feed-forward layers' first matmuls count up to twice a step with oneDNN. Steps
  are therefore counted on the log-softmax.
- With --jit_compile the search is XLA-compiled and the profiler sees each compiled search (one
  per padded batch shape, "__inference__search_batch_N") as a single operation, not the
  operations inside it: only the type table is printed, and the split by operation is for the
  default search (no XLA).

Prints the tables and writes the JSON (--output_json); the numbers compare only within one run
on one machine.
"""
import collections
import os
import re
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)

import tensorflow as tf  # noqa: E402  (after common: its quiet start)

from t2t_lite.decoding import decoder  # noqa: E402
from t2t_lite.decoding.search import SearchHParams  # noqa: E402
from t2t_lite.run_description import saved_run  # noqa: E402

PROBLEM = "translate_multi30k_deen"
SEARCH_DEFAULTS, TRANSLATOR_DEFAULTS = SearchHParams(), decoder.TranslatorHParams()
# (group, operation type pattern, name pattern or None), first match wins; a group may have
# several entries. TensorFlow's type names and oneDNN's (_MklMatMul, _MklBatchMatMulV2,
# _MklFusedBatchMatMulV2, _MklSoftmax, _MklLayerNorm, ...).
GROUPS = [
    ("matmuls", r"MatMul|BatchMatMul|Einsum", None),
    ("top-k", r"TopK", None),
    ("softmax / log-softmax", r"Softmax", None),
    ("layer norm", r"LayerNorm", None),
    ("layer norm", r".", r"(^|/)norm_\d+(_\d+)?/"),  # the ops of a LayerNormalization layer
    ("cache copies: gather / concat / select", r"Gather|Concat|Select|Scatter|Tile", None),
    ("elementwise", r"^_?(Mkl)?(Add|AddV2|AddN|BiasAdd|Sub|Mul|RealDiv|Div|FloorDiv|FloorMod|"
                    r"Maximum|Minimum|SquaredDifference|Square|Sqrt|Rsqrt|Exp|Log|Pow|Neg|"
                    r"Relu|Sin|Cos|Cast|Equal|NotEqual|Less|LessEqual|Greater|GreaterEqual|"
                    r"Logical\w+|Fused\w*Add\w*)$", None),
    ("other", r".", None),
]
# The search computes one log-softmax over the vocabulary a step.
STEP_OPERATION_TYPE = r"^_?(Mkl)?LogSoftmax$"
# The search loop's operations: "while/body/_1/while/..." (and "while/cond/_0/while/..."); the
# part after a function's "body/_N/", "then/_N/", ... repeats the scopes before it.
LOOP_NAME = re.compile(r"^while(_\d+)?/(body|cond)/_\d+/")
FUNCTION_SCOPE = re.compile(r"^.*/(body|cond|then|else)/_\d+/")
LOOP_SCOPE = re.compile(r"^while(_\d+)?/")
# A name that Grappler's rewrites put before the operation's own: ".../ArithmeticOptimizer/
# FoldTransposeIntoMatMul_MatMul".
GRAPPLER_REWRITE = re.compile(r"ArithmeticOptimizer/[A-Za-z]+_")
TOP_TYPES, TOP_NAMES = 25, 20
NAME_WIDTH = 68  # characters of an operation's name in the table

flags.DEFINE_string("data_dir", None, "Folder of the generated translate_multi30k_deen data.")
flags.DEFINE_string("output_dir", None, "A trained model's folder (t2t_lite-trainer's).")
flags.DEFINE_string("checkpoint", None, "The checkpoint to decode (default: <output_dir>/"
                    "averaged/model.ckpt if there, else the latest in --output_dir).")
flags.DEFINE_integer("num_sentences", 128, "First test sentences decoded in each pass.",
                     lower_bound=1)
flags.DEFINE_integer("batch_size", TRANSLATOR_DEFAULTS.batch_size, "Sentences per batch.",
                     lower_bound=1)
flags.DEFINE_integer("beam_size", SEARCH_DEFAULTS.beam_size, "Beam size (1: greedy search).",
                     lower_bound=1)
flags.DEFINE_float("alpha", SEARCH_DEFAULTS.alpha, "Length penalty exponent.")
flags.DEFINE_integer("stop_after_finished", SEARCH_DEFAULTS.stop_after_finished, "Beam search "
                     "also stops a sentence once this many hypotheses have ended among its K "
                     "best candidates (decode_hparams stop_after_finished; 0: t2t's exact "
                     "bound only).", lower_bound=0)
flags.DEFINE_boolean("jit_compile", TRANSLATOR_DEFAULTS.jit_compile, "XLA-compile the search (the "
                     "profile then shows XLA clusters, not operations).")
flags.DEFINE_integer("parallel_batches", 1, "Batches searched at once (decode_hparams "
                     "parallel_batches; 1 keeps the steps of one batch apart in the profile; "
                     "0: the decoder's default, one per core).", lower_bound=0)
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")
flags.mark_flags_as_required(["data_dir", "output_dir"])
common.define_thread_flags()


def checkpoint_path() -> str:
    """--checkpoint, else the averaged checkpoint multi30k_recipe.py decodes, else None (the
    latest, load_model's default)."""
    if FLAGS.checkpoint:
        return FLAGS.checkpoint
    averaged = os.path.join(FLAGS.output_dir, "averaged", "model.ckpt")
    return averaged if os.path.isdir(averaged) or os.path.exists(averaged + ".index") else None


def translator_hparams():
    return decoder.TranslatorHParams(batch_size=FLAGS.batch_size, jit_compile=FLAGS.jit_compile,
                                     parallel_batches=FLAGS.parallel_batches)


def translator_and_sentences(problem):
    """The Translator of the model in --output_dir, as t2t_lite-decoder builds it, and the
    first --num_sentences test sentences."""
    run = saved_run(FLAGS.output_dir)
    if not run:
        raise ValueError(f"--output_dir={FLAGS.output_dir} has no hparams.json: train first")
    model = decoder.load_model(run["model"], run["hparams"], problem.vocab_size(FLAGS.data_dir),
                               FLAGS.output_dir, checkpoint_path())
    translator = decoder.Translator(
        model, problem.feature_encoders(FLAGS.data_dir),
        SearchHParams(beam_size=FLAGS.beam_size, alpha=FLAGS.alpha,
                      stop_after_finished=FLAGS.stop_after_finished), problem.max_length,
        translator_hparams=translator_hparams())
    path = problem.text_paths(FLAGS.data_dir, "test")["inputs"]
    return translator, decoder.read_sentences(path)[:FLAGS.num_sentences]


def timed_translation(translator, sentences) -> float:
    """Seconds to translate `sentences` (their text read back, as a user gets it)."""
    start = time.perf_counter()
    translator.translate(sentences, show_progress=False)
    return time.perf_counter() - start


def profiled_operations(translator, sentences):
    """One translation of `sentences` under tf.profiler: (its wall seconds, a list of
    {"name", "type", "self_seconds", "occurrences"}, one per operation)."""
    return reporting.profiled_operations(lambda: timed_translation(translator, sentences))


def group_of(op_type: str, op_name: str) -> str:
    return next(group for group, type_pattern, name_pattern in GROUPS
                if re.search(type_pattern, op_type)
                and (name_pattern is None or re.search(name_pattern, op_name)))


def in_search_loop(op_name: str) -> bool:
    return bool(LOOP_NAME.match(op_name))


def readable_name(op_name: str) -> str:
    """The operation's own name: "while/body/_1/while/cond/then/_446/while/cond/GatherV2_2"
    -> "cond/GatherV2_2" (the part after the last function scope, without the loop's scope and
    Grappler's rewrite names)."""
    return GRAPPLER_REWRITE.sub("", LOOP_SCOPE.sub("", FUNCTION_SCOPE.sub("", op_name)))


def summary(operations, sentences: int) -> dict:
    """Self seconds by type and group, the top operations by name, search steps, executions."""
    by_type, executions = collections.Counter(), collections.Counter()
    groups = collections.Counter({group: 0.0 for group, _, _ in GROUPS})
    for operation in operations:
        by_type[operation["type"]] += operation["self_seconds"]
        executions[operation["type"]] += operation["occurrences"]
        groups[group_of(operation["type"], operation["name"])] += operation["self_seconds"]
    total = sum(by_type.values())
    loop = sum(op["self_seconds"] for op in operations if in_search_loop(op["name"]))
    steps = sum(count for op_type, count in executions.items()
                if re.search(STEP_OPERATION_TYPE, op_type))
    top = sorted(operations, key=lambda operation: -operation["self_seconds"])[:TOP_NAMES]
    return {
        "self_seconds": total, "self_ms_per_sentence": 1e3 * total / sentences,
        "search_loop_self_seconds": loop, "search_steps": steps or None,
        "search_loop_self_ms_per_step": 1e3 * loop / steps if steps else None,
        "operations_executed": sum(executions.values()),
        "types": {op_type: {"self_seconds": seconds, "occurrences": executions[op_type]}
                  for op_type, seconds in by_type.most_common()},
        "groups": dict(groups.most_common()),
        "top_names": [{**operation, "name": readable_name(operation["name"]),
                       "full_name": operation["name"],
                       "in_search_loop": in_search_loop(operation["name"])}
                      for operation in top]}


def print_tables(result):
    m, p = result["machine"], result["profile"]
    total = p["self_seconds"]
    print(f"\n{PROBLEM} test, first {result['sentences']} sentences, batches of "
          f"{FLAGS.batch_size} ({decoder.parallel_batches_for(translator_hparams())} at once), "
          f"beam {FLAGS.beam_size}, alpha {FLAGS.alpha}, "
          f"stop_after_finished {FLAGS.stop_after_finished}, "
          f"{'XLA' if FLAGS.jit_compile else 'no XLA'}; {m['cpu']}, {m['cores']} cores, "
          f"TF {m['tensorflow']}, oneDNN {'on' if m['onednn'] else 'off'}")
    print(f"timed pass: {result['sentences_per_s']:.2f} sentences/s; profiled pass: "
          f"{result['profiled_seconds']:.2f} s wall")
    print(f"total self time {total:.3f} s ({p['self_ms_per_sentence']:.1f} ms a sentence; "
          f"adds up all cores' threads); {p['operations_executed']} operations executed")
    if FLAGS.jit_compile:
        print("XLA-compiled search (--jit_compile): the profiler sees each compiled search as "
              "one operation, not the operations inside it; the split by operation is for "
              "the default search, without XLA")
    else:
        print(f"search loop: {100 * p['search_loop_self_seconds'] / total:.1f}% of the self "
              f"time; " + (f"{p['search_steps']} search steps, "
                           f"{p['search_loop_self_ms_per_step']:.2f} ms of loop self time a step"
                           if p["search_steps"] else "search steps: no log-softmax in the trace"))
    print_table(["operation type", "self s", "share", "executed"], [
        (op_type, values["self_seconds"], values["self_seconds"] / total, values["occurrences"])
        for op_type, values in list(p["types"].items())[:TOP_TYPES]])
    if FLAGS.jit_compile:
        return
    print_table(["group of operations", "self s", "share"], [
        (group, seconds, seconds / total) for group, seconds in p["groups"].items()])
    print_table(["operation", "in loop", "type", "self s", "share", "executed"], [
        (shortened(op["name"], NAME_WIDTH), "yes" if op["in_search_loop"] else "", op["type"],
         op["self_seconds"], op["self_seconds"] / total, op["occurrences"])
        for op in p["top_names"]])


def shortened(text: str, width: int) -> str:
    """`text`, its start cut to "..." if it is longer than `width`."""
    return text if len(text) <= width else "..." + text[len(text) - width + 3:]


def print_table(header: list, rows: list):
    """Rows of text columns (left-aligned, as wide as their longest entry) and then numbers:
    floats under "share" as percentages, other floats with 3 decimals, integers as they are."""
    def cell(column, value):
        if isinstance(value, str):
            return value
        if column == "share":
            return f"{100 * value:.1f}%"
        return f"{value:.3f}" if isinstance(value, float) else str(value)
    cells = [[cell(column, value) for column, value in zip(header, row)] for row in rows]
    widths = [max([len(column)] + [len(row[i]) for row in cells]) + 2
              for i, column in enumerate(header)]
    text_columns = {i for i, value in enumerate(rows[0]) if isinstance(value, str)} if rows else {0}

    def line(values):
        return "".join(value.ljust(width) if i in text_columns else value.rjust(width)
                       for i, (value, width) in enumerate(zip(values, widths))).rstrip()
    print("\n" + line(header) + "\n" + "-" * sum(widths))
    for row in cells:
        print(line(row))


def main(unused_argv):
    decoder.size_thread_pools(translator_hparams(), FLAGS.num_sentences,  # as t2t_lite-decoder
                              FLAGS.intra_op_parallelism_threads,
                              FLAGS.inter_op_parallelism_threads)
    problem = registry.problem(PROBLEM)
    translator, sentences = translator_and_sentences(problem)
    timed_translation(translator, sentences)  # warm-up: tracing (and XLA's compilations)
    seconds = timed_translation(translator, sentences)
    profiled_seconds, operations = profiled_operations(translator, sentences)
    profile = summary(operations, len(sentences))
    result = {"problem": PROBLEM, "machine": reporting.machine(),
              "flags": {name: FLAGS[name].value for name in (
                  "data_dir", "output_dir", "checkpoint", "num_sentences", "batch_size",
                  "beam_size", "alpha", "jit_compile", "parallel_batches",
                  "intra_op_parallelism_threads", "inter_op_parallelism_threads")},
              "checkpoint": checkpoint_path() or tf.train.latest_checkpoint(FLAGS.output_dir),
              "sentences": len(sentences), "seconds": seconds,
              "sentences_per_s": len(sentences) / seconds, "profiled_seconds": profiled_seconds,
              "profile": profile}
    print_tables(result)
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, result)


if __name__ == "__main__":
    common.run_main(main)
