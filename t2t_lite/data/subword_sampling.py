"""Subword regularisation while training: each example's pieces drawn anew from its records' ids
at every read, as SentencePiece's `encode(text, enable_sampling=True, nbest_size=-1, alpha=a)`
draws them. A unigram model's segmentation has probability proportional to P(pieces)^a (Kudo,
ACL 2018, §2.2; forward-filtering and backward-sampling over the lattice); a BPE model's merges
are each skipped with probability a (BPE-dropout, Provilkov et al., ACL 2020). Every draw is a
function of the example's key (keyed_random), so the same seed gives the same batches.
docs/training.md, "Subword sampling", says how."""
import numpy as np
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from t2t_lite.errors import UserError
from t2t_lite.keyed_random import absorbed, key_state, uniform_of

WORD_START = ord("\u2581")  # SentencePiece's "▁": a space, and the start of the text
UNKNOWN_PENALTY = 10.0  # SentencePiece's kUnkPenalty: an unknown character's node scores
# the lowest piece score minus this
SAMPLING_BATCH = 256  # examples segmented in one run of the sampler's graph
WORD_GROUPS = (3, 6, 10, 16)  # the longest word (in characters) of each group segmented at once
_NORMAL = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
_UNIGRAM = sentencepiece_model_pb2.TrainerSpec.UNIGRAM
_BPE = sentencepiece_model_pb2.TrainerSpec.BPE


class SubwordSampler:
    """Draws segmentations of a SentencePiece model's id sequences: the text of the ids (every
    piece spelled; the others, such as UNK, bytes and EOS, kept as they are), cut into words at
    each "▁" (no piece spans one), each word segmented again. Call it on int32 ids
    RaggedTensor [n, (length)] and int32 keys [n, k], one row per sequence."""

    def __init__(self, model_proto: bytes, alpha: float, name: str = "the vocabulary"):
        model = sentencepiece_model_pb2.ModelProto.FromString(model_proto)
        spec = model.trainer_spec
        kind = {_UNIGRAM: "unigram", _BPE: "bpe"}.get(spec.model_type)
        if kind is None or spec.treat_whitespace_as_suffix or not spec.split_by_whitespace or \
                spec.allow_whitespace_only_pieces:
            raise UserError(f"sentencepiece_alpha={alpha}: {name} is not a unigram or BPE "
                            f"SentencePiece model split at spaces (as t2t_lite-datagen trains "
                            f"them): sampling its pieces is not done")
        if alpha <= 0:
            raise UserError(f"sentencepiece_alpha={alpha}: sampling needs an alpha above 0")
        if kind == "bpe" and alpha > 1:
            raise UserError(f"sentencepiece_alpha={alpha}: {name} is a BPE model, whose alpha "
                            f"is the probability of skipping a merge: 0 < alpha <= 1")
        self.kind, self.alpha = kind, float(alpha)
        pieces = model.pieces
        self.vocab_size = len(pieces)
        normal = [i for i, piece in enumerate(pieces) if piece.type == _NORMAL]
        spelled = {pieces[i].piece: i for i in normal}
        scores = np.array([piece.score for piece in pieces], np.float32)
        # Each id's characters (codepoints); a piece that is not NORMAL stands for itself, as
        # the one character -(id + 1) that no piece holds.
        characters = [[ord(c) for c in pieces[i].piece] if pieces[i].type == _NORMAL
                      else [-(i + 1)] for i in range(self.vocab_size)]
        self.characters = tf.ragged.constant(characters, tf.int32)
        self.max_piece = max(len(pieces[i].piece) for i in normal)
        self.scores = tf.constant(scores)
        self.unknown_id = next((i for i, piece in enumerate(pieces)
                                if piece.type == piece.UNKNOWN), 0)
        self.unknown_score = float(scores[normal].min()) - UNKNOWN_PENALTY
        self.pieces = _lookup_table(_string_keys([characters[i] for i in normal]), normal)
        if kind == "bpe":  # (left id, right id) -> the piece of both, if one is in the model
            pairs = [(spelled[text[:cut]], spelled[text[cut:]], i)
                     for text, i in spelled.items() for cut in range(1, len(text))
                     if text[:cut] in spelled and text[cut:] in spelled]
            left, right, merged = (np.array(column, np.int64) for column in zip(*pairs)) \
                if pairs else (np.zeros(0, np.int64),) * 3
            self.merges = _lookup_table(left * self.vocab_size + right, merged)

    def __call__(self, ids, keys):
        """The ids of each row segmented again: int32 RaggedTensor [n, (length')]."""
        characters = tf.gather(self.characters, ids.flat_values)  # [pieces, (characters)]
        flat = characters.flat_values
        row = tf.repeat(ids.value_rowids(), characters.row_lengths())
        first_of_row = tf.concat([[True], row[1:] != row[:-1]], 0)
        word_of = tf.cumsum(tf.cast((flat == WORD_START) | first_of_row, tf.int64)) - 1
        words = tf.RaggedTensor.from_value_rowids(flat, word_of)  # [W, (characters)]
        word_row = tf.math.segment_min(row, word_of)
        row_starts = tf.gather(tf.math.segment_min(tf.range(tf.size(word_row, tf.int64)),
                                                   word_row), word_row)
        word_keys = tf.concat([tf.gather(keys, word_row),
                               tf.cast(tf.range(tf.size(word_row, tf.int64)) - row_starts,
                                       tf.int32)[:, tf.newaxis]], 1)
        pieces = self._segmented(words, word_keys)
        counts = tf.math.unsorted_segment_sum(pieces.row_lengths(), word_row,
                                              tf.shape(ids.row_splits)[0] - 1)
        return tf.RaggedTensor.from_row_lengths(pieces.flat_values, counts)

    def _segmented(self, words, keys):
        """Each word of `words` [W, (characters)] segmented, in groups of similar length (the
        work of a group grows with the square of its longest word)."""
        lengths = tf.cast(words.row_lengths(), tf.int32)
        places, groups = [], []
        for shortest, longest in zip((0,) + WORD_GROUPS, WORD_GROUPS + (2 ** 31 - 1,)):
            place = tf.where((lengths > shortest) & (lengths <= longest))[:, 0]
            group = tf.gather(words, place)
            places.append(place)
            group = (group.to_tensor(), tf.gather(lengths, place), tf.gather(keys, place))
            groups.append(self._unigram(*group, min(longest, self.max_piece))
                          if self.kind == "unigram" else self._bpe(*group))
        order = tf.math.invert_permutation(tf.concat(places, 0))
        return tf.gather(tf.concat(groups, 0), order)

    def _node_ids(self, words, lengths, longest):
        """int32 [W, L, longest]: the id of the piece of characters (j - l, j] of each word
        (l = 1 + the last index), or -1: a character -(id + 1) is that id alone."""
        length = tf.shape(words)[1]
        inside = tf.range(length)[tf.newaxis, :] < lengths[:, tf.newaxis]
        state = tf.zeros(tf.shape(words), tf.uint64)
        stands_for = tf.zeros(tf.shape(words), tf.int32)  # characters -(id + 1) in the window
        ids = []
        for size in range(1, longest + 1):
            if size > 1:  # the window one character longer to the left
                state = tf.pad(state[:, :-1], [[0, 0], [1, 0]])
                stands_for = tf.pad(stands_for[:, :-1], [[0, 0], [1, 0]])
            state = absorbed(state, words)
            stands_for += tf.cast(words < 0, tf.int32)
            found = self.pieces.lookup(tf.bitcast(state, tf.int64))
            valid = inside & (tf.range(length) >= size - 1)[tf.newaxis, :] & (stands_for == 0)
            found = tf.where(valid, found, -1)
            if size == 1:
                found = tf.where(inside & (words < 0), -words - 1, found)
            ids.append(found)
        return tf.stack(ids, axis=2)

    def _unigram(self, words, lengths, keys, longest):
        """Forward-filtering and backward-sampling: `forward[b, w]` the log of the summed
        P(pieces)^alpha of every segmentation of word w's first b characters; then from the
        end, each last piece drawn by its share of that sum (a Gumbel-max draw). No word is
        longer than `longest` characters."""
        node_ids = self._node_ids(words, lengths, longest)
        scores = tf.where(node_ids >= 0, self.alpha * tf.gather(self.scores,
                                                                tf.maximum(node_ids, 0)),
                          -np.inf)
        unknown = (node_ids[:, :, 0] < 0) & (words >= 0)  # no piece of that one character
        node_ids = tf.concat([tf.where(unknown, self.unknown_id, node_ids[:, :, 0])[..., None],
                              node_ids[:, :, 1:]], 2)
        scores = tf.concat([tf.where(unknown, self.alpha * self.unknown_score,
                                     scores[:, :, 0])[..., None], scores[:, :, 1:]], 2)
        sizes = tf.range(1, longest + 1)
        length, count = tf.shape(words)[1], tf.shape(words)[0]

        def forward_step(end, forward):
            starts = end - sizes
            before = tf.where((starts >= 0)[:, tf.newaxis], forward.gather(tf.maximum(starts, 0)),
                              -np.inf)
            return end + 1, forward.write(end, tf.reduce_logsumexp(
                before + tf.transpose(scores[:, end - 1, :]), axis=0))
        forward = tf.TensorArray(tf.float32, size=length + 1, clear_after_read=False,
                                 element_shape=[None]).write(0, tf.zeros([count]))
        _, forward = tf.while_loop(lambda end, _: end <= length, forward_step, (1, forward))
        forward = forward.stack()  # [L + 1, W]

        def backward_step(step, end, drawn):
            going = end > 0
            last = tf.maximum(end - 1, 0)
            starts = end[:, tf.newaxis] - sizes[tf.newaxis, :]  # [W, longest]
            before = tf.gather_nd(forward, tf.stack([
                tf.maximum(starts, 0), tf.broadcast_to(tf.range(count)[:, tf.newaxis],
                                                       tf.shape(starts))], 2))
            logits = tf.where(starts >= 0, before + tf.gather(scores, last, batch_dims=1),
                              -np.inf)
            uniform = uniform_of(absorbed(word_state, tf.fill([count], step)), longest)
            size = tf.argmax(logits - tf.math.log(-tf.math.log(uniform)), axis=1,
                             output_type=tf.int32)
            piece = tf.gather(tf.gather(node_ids, last, batch_dims=1), size, batch_dims=1)
            return (step + 1, tf.where(going, end - size - 1, end),
                    drawn.write(step, tf.where(going, piece, -1)))
        word_state = key_state(keys)
        drawn = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None])
        _, _, drawn = tf.while_loop(  # one step at least: an empty group stacks one of -1s
            lambda step, end, _: (step == 0) | tf.reduce_any(end > 0), backward_step,
            (0, lengths, drawn))
        drawn = tf.transpose(drawn.stack())  # [W, steps], last first
        counts = tf.reduce_sum(tf.cast(drawn >= 0, tf.int32), 1)
        in_order = tf.reverse_sequence(drawn, counts, seq_axis=1, batch_axis=0)
        return tf.RaggedTensor.from_tensor(in_order, lengths=counts)

    def _bpe(self, words, lengths, keys):
        """SentencePiece's BPE with dropout: from the characters, the adjacent pair whose merged
        piece scores highest (the leftmost of equals) is merged, or with probability alpha
        dropped, until no pair merges; a dropped pair comes back only when either side of it
        is merged with another."""
        node_ids = self._node_ids(words, lengths, 1)[:, :, 0]
        symbols = tf.where(node_ids >= 0, node_ids, self.unknown_id)
        symbols = tf.where(tf.range(tf.shape(words)[1])[tf.newaxis, :] < lengths[:, None],
                           symbols, -1)
        count, width = tf.shape(words)[0], tf.shape(words)[1]
        slots = tf.range(width)[tf.newaxis, :]
        word_state = key_state(keys)

        def step(turn, symbols, dropped, _):
            left, right = symbols[:, :-1], symbols[:, 1:]
            merged = self.merges.lookup(tf.cast(left, tf.int64) * self.vocab_size +
                                        tf.cast(right, tf.int64))
            merged = tf.where((left >= 0) & (right >= 0) & ~dropped[:, :-1], merged, -1)
            score = tf.where(merged >= 0, tf.gather(self.scores, tf.maximum(merged, 0)),
                             -np.inf)
            best = tf.reduce_max(score, axis=1, keepdims=True)
            moving = tf.reduce_any(merged >= 0, axis=1)
            at = tf.argmax(tf.cast((merged >= 0) & (score == best), tf.int32), axis=1,
                           output_type=tf.int32)
            uniform = uniform_of(absorbed(word_state, tf.fill([count], turn)), 1)[:, 0]
            drop, merge = moving & (uniform < self.alpha), moving & (uniform >= self.alpha)
            at_column = at[:, tf.newaxis]
            here, merge_slots = slots == at_column, merge[:, tf.newaxis]
            new_symbol = tf.reduce_max(tf.where(here[:, :-1], merged, -1), axis=1)
            symbols = tf.where(merge_slots & here, new_symbol[:, tf.newaxis], symbols)
            # the merged pair's right symbol leaves: each slot after it takes the next one's
            shifted = merge_slots & (slots > at_column)
            symbols = tf.where(shifted, tf.pad(symbols[:, 1:], [[0, 0], [0, 1]],
                                               constant_values=-1), symbols)
            dropped = dropped | (drop[:, tf.newaxis] & here)
            dropped = tf.where(shifted, tf.pad(dropped[:, 1:], [[0, 0], [0, 1]]), dropped)
            renewed = merge_slots & (here | (slots == at_column - 1))
            return turn + 1, symbols, dropped & ~renewed, tf.reduce_any(moving)

        def going_on(turn, symbols, dropped, moving):
            return moving
        _, symbols, _, _ = tf.while_loop(
            going_on, step, (0, symbols, tf.zeros([count, width], tf.bool), width > 1))
        return tf.RaggedTensor.from_tensor(symbols, lengths=tf.reduce_sum(
            tf.cast(symbols >= 0, tf.int32), 1))


def sampled(dataset: tf.data.Dataset, samplers: dict, key: list) -> tf.data.Dataset:
    """`dataset`'s examples ({feature: int32 ids}) with each feature of `samplers` segmented
    anew: its draws keyed by `key` (ints: the seed, the corpus), the example's place in
    `dataset` and the feature, so that each pass of a repeated dataset draws its own."""
    numbers = {feature: number for number, feature in enumerate(sorted(samplers))}
    sharing = {}  # the features of each sampler (a joint vocabulary's: both), in one call
    for feature in numbers:
        sharing.setdefault(id(samplers[feature]), []).append(feature)

    @tf.autograph.experimental.do_not_convert  # no Python control flow to convert
    def sample(places, examples):
        examples, count = dict(examples), tf.size(places)
        place = tf.stack([tf.cast(places // 2 ** 31, tf.int32),
                          tf.cast(places % 2 ** 31, tf.int32)], 1)
        for features in sharing.values():
            keys = tf.concat([tf.concat([tf.broadcast_to(
                tf.constant(key + [numbers[feature]], tf.int32), [count, len(key) + 1]), place],
                1) for feature in features], 0)
            drawn = samplers[features[0]](
                tf.concat([examples[feature] for feature in features], 0), keys)
            for number, feature in enumerate(features):
                examples[feature] = drawn[number * count:(number + 1) * count]
        return examples
    return (dataset.enumerate().ragged_batch(SAMPLING_BATCH)
            .map(sample, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
            .map(lambda example: example))  # unbatch's ragged rows of rank 0 become Tensors


def run_key(samplers: dict, seed: int, corpus: int) -> list:
    """`sampled`'s key of a run's corpus: [seed, corpus], int32 values; a UserError names a
    --seed beyond them."""
    if not 0 <= (seed or 0) < 2 ** 31:
        alpha = next(iter(samplers.values())).alpha
        raise UserError(f"--seed={seed}: subword sampling (sentencepiece_alpha={alpha}) takes "
                        f"seeds from 0 to 2^31 - 1")
    return [seed or 0, corpus]


def _string_keys(sequences) -> np.ndarray:
    """int64 [len(sequences)]: the key `absorbed` gives each sequence of codepoints, as
    SubwordSampler._node_ids computes it for a window of a word."""
    lengths = np.array([len(sequence) for sequence in sequences])
    width = lengths.max()
    codes = np.zeros([len(sequences), width], np.int32)
    for row, sequence in enumerate(sequences):
        codes[row, width - len(sequence):] = sequence  # right-aligned: the first absorbed first
    state = tf.zeros([len(sequences)], tf.uint64)
    for column in range(width):
        state = tf.where(column >= width - lengths, absorbed(state, codes[:, column]), state)
    return tf.bitcast(state, tf.int64).numpy()


def _lookup_table(keys, values):
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(keys, tf.int64), tf.constant(values, tf.int32)), default_value=-1)
