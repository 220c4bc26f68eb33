"""How much of a training batch is padding, with and without length bucketing.

  python benchmarks/padding_fraction.py --data_dir=D [--tmp_dir=T] [--batch_size=4096]
      [--max_length=256] [--num_batches=200] [--output_json=padding.json]

Generates translate_multi30k_deen into --data_dir first if its training shards are not there
(from the raw Multi30k files in --tmp_dir, by default <repo>/../shared/data/multi30k).

What is compared, on the same training examples (every train record of length <= max_length,
an example's length being the longer of its source and target, as in t2t):

- bucketed: the real training pipeline, `problem.dataset("train", ..., training=True)`: shuffled,
  grouped into t2t's length buckets (8, 9, ..., 236 for max_length 256), each batch holding
  batch_size // boundary examples padded to its bucket boundary (length_bucketing=longer).
- bucketed each: the same with length_bucketing=each, source and target lengths bucketed apart
  (a bucket per pair of boundaries; each feature padded to its own boundary).
- unbucketed: the same examples shuffled over the whole training set, `padded_batch` of a fixed
  number N of examples each padded to the longest example of its batch (inputs and targets each
  padded to their own longest). N is chosen so that a batch carries, on average, as many real
  (non-padding) tokens as a bucketed batch: N = round(mean real tokens per bucketed batch /
  mean real tokens per training example).

Tokens count both features (inputs + targets). Padding fraction = 1 - real tokens / tokens in
the batch tensors, over the first --num_batches batches of each pipeline: the share of the
computation spent on padding. The program fails (exit status 1) if bucketing leaves more than
--max_bucketed_padding.
"""
import os
import sys

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)

import tensorflow as tf  # noqa: E402  (after common: its quiet start)
from absl import logging  # noqa: E402

from t2t_lite.data import pipeline, records  # noqa: E402
from t2t_lite.data.problem import TRAIN  # noqa: E402
from t2t_lite.hparams_lib import HParams  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TMP_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))

flags.DEFINE_string("problem", "translate_multi30k_deen", "Registered problem name.")
flags.DEFINE_string("data_dir", None, "Folder of the generated TFRecords (generated if absent).")
flags.DEFINE_string("tmp_dir", DEFAULT_TMP_DIR, "Folder of the raw Multi30k files.")
flags.DEFINE_integer("batch_size", 4096, "Tokens per bucketed batch (t2t's batch_size).")
flags.DEFINE_integer("max_length", 256, "Longest example kept (t2t's max_length).")
flags.DEFINE_integer("num_batches", 200, "Batches measured in each pipeline.")
flags.DEFINE_integer("seed", 0, "TensorFlow's global seed (the shuffles).")
flags.DEFINE_float("max_bucketed_padding", 0.10, "Fail if bucketed batches have more padding.")
flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")
flags.mark_flags_as_required(["data_dir"])


def ensure_data(problem, data_dir, tmp_dir):
    train = next(split for split in problem.dataset_splits() if split.name == TRAIN)
    if records.all_exist(problem.filepaths(data_dir, train)):
        return False
    logging.info("no complete %s training data in %s: generating it from %s", problem.name,
                 data_dir, tmp_dir)
    problem.generate_data(data_dir, tmp_dir)
    return True


def training_examples(problem, data_dir, max_length):
    """Every training example that the pipeline keeps (length <= max_length), file order."""
    dataset = pipeline.read_examples(problem.filepattern(data_dir, TRAIN), shuffle_files=False)
    return dataset.filter(lambda example: pipeline.example_length(example) <= max_length)


def count_examples_and_tokens(dataset):
    """(examples, real tokens of both features), reduced in the graph."""
    def add(total, example):
        tokens = tf.size(example["inputs"]) + tf.size(example["targets"])
        return total + tf.stack([1, tokens])
    examples, tokens = dataset.reduce(tf.zeros([2], tf.int32), add).numpy().tolist()
    return examples, tokens


def measure(dataset, num_batches):
    """Counts over the first num_batches batches: examples, real and padded-tensor tokens."""
    batches = examples = real = total = 0
    lengths = set()
    for batch in dataset.take(num_batches):
        batches += 1
        examples += int(tf.shape(batch["inputs"])[0])
        for name in pipeline.FEATURES:
            real += int(tf.math.count_nonzero(batch[name]))
            total += int(tf.size(batch[name]))
            lengths.add((name, int(tf.shape(batch[name])[1])))
    return {
        "batches": batches,
        "examples": examples,
        "real_tokens": real,
        "batch_tokens": total,
        "examples_per_batch": examples / batches,
        "real_tokens_per_batch": real / batches,
        "batch_tokens_per_batch": total / batches,
        "padding_fraction": 1.0 - real / total,
        "distinct_padded_lengths": len(lengths),
    }


def main(argv):
    del argv
    tf.random.set_seed(FLAGS.seed)
    problem = registry.problem(FLAGS.problem)
    generated = ensure_data(problem, FLAGS.data_dir, FLAGS.tmp_dir)
    hparams = HParams(batch_size=FLAGS.batch_size, max_length=FLAGS.max_length)

    bucketed = measure(problem.dataset(TRAIN, FLAGS.data_dir, hparams, training=True),
                       FLAGS.num_batches)
    bucketed_each = measure(problem.dataset(TRAIN, FLAGS.data_dir,
                                            hparams.replace(length_bucketing="each"),
                                            training=True), FLAGS.num_batches)

    examples = training_examples(problem, FLAGS.data_dir, FLAGS.max_length)
    num_examples, num_tokens = count_examples_and_tokens(examples)
    tokens_per_example = num_tokens / num_examples
    per_batch = max(1, round(bucketed["real_tokens_per_batch"] / tokens_per_example))
    unbucketed_dataset = (examples.shuffle(num_examples, seed=FLAGS.seed,
                                           reshuffle_each_iteration=True)
                          .repeat()
                          .padded_batch(per_batch,
                                        padded_shapes={n: [None] for n in pipeline.FEATURES},
                                        drop_remainder=True))
    unbucketed = measure(unbucketed_dataset, FLAGS.num_batches)

    print(f"\nPadding in training batches of {FLAGS.problem} (data_dir {FLAGS.data_dir}; "
          f"{num_examples} training examples of length <= {FLAGS.max_length}, "
          f"{tokens_per_example:.2f} real tokens each, inputs + targets)")
    print(f"first {FLAGS.num_batches} batches of each; tokens = inputs + targets; padding = "
          f"1 - real tokens / batch tensor tokens; lengths = distinct padded lengths seen "
          f"(of inputs and of targets)")
    header = (f"{'pipeline':<56} {'examples/batch':>14} {'real tok/batch':>14} "
              f"{'tensor tok/batch':>16} {'lengths':>7} {'padding':>8}")
    print(header)
    print("-" * len(header))
    rows = (
        (f"bucketed (batch_size={FLAGS.batch_size}, pad to boundary)", bucketed),
        ("bucketed each (source and target buckets apart)", bucketed_each),
        (f"unbucketed (shuffled, {per_batch} per batch, pad to longest)", unbucketed),
    )
    for label, stats in rows:
        print(f"{label:<56} {stats['examples_per_batch']:>14.1f} "
              f"{stats['real_tokens_per_batch']:>14.1f} {stats['batch_tokens_per_batch']:>16.1f} "
              f"{stats['distinct_padded_lengths']:>7d} {100 * stats['padding_fraction']:>7.1f}%")
    saved = 1 - bucketed["batch_tokens"] / bucketed["real_tokens"] * \
        unbucketed["real_tokens"] / unbucketed["batch_tokens"]
    print(f"bucketing computes {100 * saved:.1f}% fewer tensor tokens per real token")
    print(f"length_bucketing=each (for training without XLA; more batch shapes) pads "
          f"{100 * bucketed_each['padding_fraction']:.1f}% instead of "
          f"{100 * bucketed['padding_fraction']:.1f}%")

    result = {
        "problem": FLAGS.problem,
        "data_dir": FLAGS.data_dir,
        "generated_now": generated,
        "batch_size": FLAGS.batch_size,
        "max_length": FLAGS.max_length,
        "min_length_bucket": hparams.min_length_bucket,
        "length_bucket_step": hparams.length_bucket_step,
        "num_batches": FLAGS.num_batches,
        "seed": FLAGS.seed,
        "training_examples": num_examples,
        "real_tokens_per_example": tokens_per_example,
        "unbucketed_examples_per_batch": per_batch,
        "definition": "tokens count inputs + targets; padding_fraction = 1 - real (non-zero) "
                      "tokens / tokens of the padded batch tensors, over the first num_batches "
                      "batches; unbucketed batches hold a fixed number of shuffled examples "
                      "chosen to carry as many real tokens per batch on average as bucketed "
                      "ones, padded to the longest example of the batch",
        "bucketed": bucketed,
        "bucketed_each": bucketed_each,
        "unbucketed": unbucketed,
    }
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, result)

    if bucketed["padding_fraction"] > FLAGS.max_bucketed_padding:
        print(f"error: bucketed batches are {100 * bucketed['padding_fraction']:.1f}% padding, "
              f"more than --max_bucketed_padding={FLAGS.max_bucketed_padding}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    common.run_main(main)
