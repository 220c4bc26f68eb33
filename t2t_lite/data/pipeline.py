"""The input pipeline: TFRecords -> length-bucketed batches of about `batch_size` tokens,
padded to their bucket's boundary (tensor2tensor's data_reader; hparams.length_bucketing:
docs/architecture.md, "Data")."""
import bisect

import tensorflow as tf

FEATURES = ("inputs", "targets")
READ_PARALLELISM = 4
SHUFFLE_BUFFER = 2048


def bucket_boundaries(max_length: int, min_length: int = 8, length_bucket_step: float = 1.1):
    """t2t's `_bucket_boundaries`: x = min_length; while x < max_length: keep x and grow it to
    max(x + 1, int(x * step)). For max_length 256 that is 8, 9, ..., 236 (41 boundaries)."""
    boundaries = []
    x = min_length
    while x < max_length:
        boundaries.append(x)
        x = max(x + 1, int(x * length_bucket_step))
    return boundaries


def bucket_batch_sizes(boundaries: list, batch_size: int, max_length: int) -> list:
    """Examples per batch for each bucket, the last bucket reaching max_length: t2t's
    max(1, batch_size // length)."""
    return [max(1, batch_size // length) for length in boundaries + [max_length]]


def bucket_of(length: int, boundaries: list) -> int:
    """The boundary an example of `length` is padded to: the first of `boundaries` (which end
    at max_length) that is >= it, as both bucketings below place it."""
    return boundaries[bisect.bisect_left(boundaries, length)]


def batch_tokens_of_pass(example_lengths: dict, hparams) -> int:
    """The tokens that one pass over examples of these lengths ({length: count}) brings to
    batches, counted as batch_size counts them: each example of at most max_length (the longer
    ones are dropped) at its bucket's boundary, the length its longer side is padded to."""
    boundaries = bucket_boundaries(hparams.max_length, hparams.min_length_bucket,
                                   hparams.length_bucket_step) + [hparams.max_length]
    return sum(count * bucket_of(length, boundaries)
               for length, count in example_lengths.items() if length <= hparams.max_length)


def parse_example(serialized):
    features = tf.io.parse_single_example(
        serialized, {name: tf.io.VarLenFeature(tf.int64) for name in FEATURES})
    return {name: tf.cast(tf.sparse.to_dense(features[name]), tf.int32) for name in FEATURES}


def example_length(example):
    return tf.maximum(tf.shape(example["inputs"])[0], tf.shape(example["targets"])[0])


def shard_files(filepattern: str, shuffle_files: bool, seed: int = None) -> tf.data.Dataset:
    """The shards matching `filepattern` now, in an order shuffled again at every pass (as
    tf.data.Dataset.list_files, which matched the pattern again at every pass of a repeated
    dataset, so that a pass after the folder was emptied or generated again read other files);
    a shard removed since is a NotFoundError naming it. No match: list_files's error."""
    matching = tf.io.matching_files(filepattern)
    if int(tf.size(matching)) == 0:
        return tf.data.Dataset.list_files(filepattern, shuffle=shuffle_files, seed=seed)
    files = tf.data.Dataset.from_tensor_slices(matching)
    if shuffle_files:
        files = files.shuffle(int(tf.size(matching)), seed=seed)
    return files


def read_examples(filepattern: str, shuffle_files: bool, seed: int = None) -> tf.data.Dataset:
    """Parallel reads of every shard matching `filepattern` when it is called (shard_files),
    parsed into int32 id vectors; with a seed the order is the same in every run."""
    files = shard_files(filepattern, shuffle_files, seed)
    dataset = files.interleave(tf.data.TFRecordDataset, cycle_length=READ_PARALLELISM,
                               num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=seed is not None or not shuffle_files)
    return dataset.map(parse_example, num_parallel_calls=tf.data.AUTOTUNE)


def bucket_by_length(dataset: tf.data.Dataset, hparams, max_length: int,
                     drop_remainder: bool, num_replicas: int = 1) -> tf.data.Dataset:
    """Groups examples of length <= max_length into token batches padded to their boundary.

    tf.data's bucket i holds lengths in [b_(i-1), b_i) padded to b_i - 1, so the t2t boundaries
    are shifted by one: the bucket of boundary B holds lengths in (previous B, B], padded to B.
    As in t2t, batch_size is per replica: a global batch holds num_replicas equal shares.
    """
    boundaries = bucket_boundaries(max_length, hparams.min_length_bucket,
                                   hparams.length_bucket_step)
    batch_sizes = [size * num_replicas for size in
                   bucket_batch_sizes(boundaries, hparams.batch_size, max_length)]
    return dataset.bucket_by_sequence_length(
        element_length_func=example_length,
        bucket_boundaries=[b + 1 for b in boundaries] + [max_length + 1],
        bucket_batch_sizes=batch_sizes + [1],  # the last bucket (> max_length) stays empty
        padded_shapes={name: [None] for name in FEATURES},
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder)


def bucket_each_length(dataset: tf.data.Dataset, hparams, max_length: int,
                       drop_remainder: bool, num_replicas: int = 1) -> tf.data.Dataset:
    """Like `bucket_by_length`, with a bucket for every (source bucket, target bucket) pair: each
    feature is padded to its own bucket's boundary, and a batch holds as many examples as the
    bucket of its longer side would (batch_size // that boundary, per replica)."""
    boundaries = bucket_boundaries(max_length, hparams.min_length_bucket,
                                   hparams.length_bucket_step) + [max_length]
    batch_sizes = tf.constant([size * num_replicas for size in bucket_batch_sizes(
        boundaries[:-1], hparams.batch_size, max_length)], tf.int64)
    boundary_tensor = tf.constant(boundaries, tf.int64)
    buckets = len(boundaries)

    def bucket_of(ids):  # the first boundary >= the length
        length = tf.shape(ids, out_type=tf.int64)[0]
        return tf.searchsorted(boundary_tensor, tf.reshape(length, [1]), side="left",
                               out_type=tf.int64)[0]

    def key(example):
        return bucket_of(example["inputs"]) * buckets + bucket_of(example["targets"])

    def window_size(bucket_pair):
        return tf.gather(batch_sizes, tf.maximum(bucket_pair // buckets, bucket_pair % buckets))

    def batch(bucket_pair, examples):
        shapes = {"inputs": tf.gather(boundary_tensor, bucket_pair // buckets)[None],
                  "targets": tf.gather(boundary_tensor, bucket_pair % buckets)[None]}
        return examples.padded_batch(window_size(bucket_pair), padded_shapes=shapes,
                                     drop_remainder=drop_remainder)

    return dataset.group_by_window(key, batch, window_size_func=window_size)


def corpus_examples(filepattern: str, max_length: int, training: bool, shuffle_files: bool,
                    repeat: bool, seed: int = None, sampling=None) -> tf.data.Dataset:
    """The examples of one corpus's shards, of at most max_length: shuffled in training (seeded
    when `seed` is given), repeated if asked; `sampling` (a function of the dataset, as
    subword_sampling.sampled) segments them anew at every read, before their lengths are
    filtered."""
    dataset = read_examples(filepattern, shuffle_files=shuffle_files, seed=seed)
    if sampling is None:
        dataset = dataset.filter(lambda example: example_length(example) <= max_length)
    if training:
        dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=seed)
    if repeat:
        dataset = dataset.repeat()
    if sampling is not None:
        dataset = sampling(dataset).filter(
            lambda example: example_length(example) <= max_length)
    return dataset


def weighted_examples(filepatterns: list, weights: list, max_length: int, training: bool,
                      shuffle_files: bool, repeat: bool, seed: int = None,
                      samplers: dict = None) -> tf.data.Dataset:
    """Examples drawn from several corpora, each read as `corpus_examples`, the next one from
    corpus i with probability weights[i] / sum(weights) (tf.data's sample_from_datasets, as
    OpenNMT-tf samples its weighted training files), seeded by `seed`: the same seed gives the
    same order. Finite corpora (repeat=False) are drawn from until the first one ends: past
    it the draws no longer follow the weights, and each example left in a corpus of weight w
    would take about 1/w draws (for ever at w=1e-6)."""
    # A seed of its own for each corpus: corpora of one size would be shuffled alike.
    corpora = [corpus_examples(pattern, max_length, training, shuffle_files, repeat,
                               None if seed is None else seed + index,
                               _sampling(samplers, seed, index))
               for index, pattern in enumerate(filepatterns)]
    total = float(sum(weights))
    return tf.data.Dataset.sample_from_datasets(
        corpora, weights=[weight / total for weight in weights], seed=seed,
        stop_on_empty_dataset=not repeat)


def _sampling(samplers: dict, seed: int, corpus: int):
    """The `sampling` of corpus_examples for corpus number `corpus`, or None."""
    if not samplers:
        return None
    from t2t_lite.data import subword_sampling
    return lambda dataset: subword_sampling.sampled(dataset, samplers,
                                                    subword_sampling.run_key(samplers, seed,
                                                                             corpus))


def batched_dataset(filepattern, hparams, training: bool, shuffle_files: bool = True,
                    repeat: bool = None, num_replicas: int = 1, seed: int = None,
                    weights: list = None, samplers: dict = None) -> tf.data.Dataset:
    """Training: shuffled and repeated. Evaluation: in file order, repeated only if asked (then
    every evaluation sees the same first batches). Repeated datasets give full batches only, so
    there is one batch shape per bucket. Examples over max_length are dropped in both (the
    buckets end at max_length; t2t kept long dev examples).

    `filepattern`: the shards of one corpus, or a list of several corpora's patterns whose
    examples are drawn by `weights` (one each) before they are bucketed (`weighted_examples`),
    so that every batch holds them in those proportions. `samplers` ({feature:
    subword_sampling.SubwordSampler}) segment those features anew at every read."""
    max_length = hparams.max_length
    repeat = training if repeat is None else repeat
    if isinstance(filepattern, str):
        dataset = corpus_examples(filepattern, max_length, training, shuffle_files, repeat, seed,
                                  _sampling(samplers, seed, 0))
    else:
        dataset = weighted_examples(filepattern, weights, max_length, training, shuffle_files,
                                    repeat, seed, samplers)
    bucket = bucket_each_length if hparams.length_bucketing == "each" else bucket_by_length
    dataset = bucket(dataset, hparams, max_length, drop_remainder=repeat,
                     num_replicas=num_replicas)
    return dataset.prefetch(tf.data.AUTOTUNE)


def padding_fraction(dataset: tf.data.Dataset, num_batches: int) -> float:
    """Share of padding among the tokens of the first `num_batches` batches (both features)."""
    real = total = 0
    for batch in dataset.take(num_batches):
        for name in FEATURES:
            ids = batch[name]
            real += int(tf.math.count_nonzero(ids))
            total += int(tf.size(ids))
    return 1.0 - real / max(total, 1)
