"""Text <-> ids, tensor2tensor's TextEncoder contract: `encode(str) -> ids`, `decode(ids) -> str`.

Ids 0 and 1 are reserved for PAD and EOS in every vocabulary, as in tensor2tensor.
"""
import io
import random

import sentencepiece

from t2t_lite.errors import DataError

PAD_ID = 0
EOS_ID = 1
NUM_RESERVED_IDS = 2
# The reserved ids' tokens where a vocabulary is a list of strings (SentencePiece's names).
PAD_TOKEN = "<pad>"
EOS_TOKEN = "</s>"
# Which training sentences are sampled when there are more than max_sentences: fixed, so that
# the same corpus gives a byte-identical model in every datagen run.
SAMPLE_SEED = 1
# With byte fallback a character never seen in training is spelled as UTF-8 bytes instead of
# becoming "⁇"; the 256 byte pieces are only affordable in vocabularies of this size and above.
BYTE_FALLBACK_MIN_VOCAB = 1024


class SymbolVocabulary:
    """Space-separated integer symbols 1..num_symbols, as in t2t's algorithmic problems.

    Symbol k has id k - 1 + NUM_RESERVED_IDS, so "3 7 1" encodes to [4, 8, 2]. Decoding stops at
    the first EOS and drops padding.
    """

    def __init__(self, num_symbols: int):
        self.num_symbols = num_symbols

    @property
    def vocab_size(self) -> int:
        return self.num_symbols + NUM_RESERVED_IDS

    @property
    def tokens(self) -> list:
        """The token of every id, in id order, as text splits on spaces: PAD_TOKEN, EOS_TOKEN,
        then the symbols "1".."num_symbols" (for a model outside t2t_lite, e.g. CTranslate2)."""
        return [PAD_TOKEN, EOS_TOKEN] + [str(k) for k in range(1, self.num_symbols + 1)]

    @property
    def unknown_token(self) -> str:
        """The token an unknown word becomes: none here (encode refuses it); PAD's token stands
        in where one must be named."""
        return PAD_TOKEN

    def encode(self, text: str) -> list:
        ids = []
        for token in text.split():
            if not token.isdigit() or not 1 <= int(token) <= self.num_symbols:
                raise ValueError(f"{token!r} is not a symbol: expected integers 1 to "
                                 f"{self.num_symbols} separated by spaces")
            ids.append(int(token) - 1 + NUM_RESERVED_IDS)
        return ids

    def decode(self, ids) -> str:
        symbols = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id == EOS_ID:
                break
            if token_id != PAD_ID:
                symbols.append(str(token_id - NUM_RESERVED_IDS + 1))
        return " ".join(symbols)

    def encode_in_graph(self, texts):
        """A string tensor [batch] -> int32 RaggedTensor of ids [batch, (length)]; a token that
        is not a symbol fails the graph with the message `encode` raises."""
        import tensorflow as tf
        tokens, ids, valid = self._symbols_in_graph(texts)
        check = tf.debugging.Assert(
            tf.reduce_all(valid.flat_values),
            [f"not a symbol: expected integers 1 to {self.num_symbols} separated by spaces, "
             "got", tf.boolean_mask(tokens.flat_values, ~valid.flat_values)[:1]])
        with tf.control_dependencies([check]):
            return ids.with_flat_values(tf.identity(ids.flat_values))

    def encodable_in_graph(self, texts):
        """bool [batch]: the strings encode_in_graph accepts (those encode does not raise
        ValueError for)."""
        import tensorflow as tf
        return tf.reduce_all(self._symbols_in_graph(texts)[2], axis=1)

    def _symbols_in_graph(self, texts):
        """The split tokens, their ids and whether each is a symbol, RaggedTensors [batch, (n)]."""
        import tensorflow as tf
        tokens = tf.strings.split(texts)
        is_number = tf.strings.regex_full_match(tokens.flat_values, "0*[0-9]{1,9}")
        # Non-numbers become 0 (invalid) rather than failing to_number with its own message.
        numbers = tf.strings.to_number(tf.where(is_number, tokens.flat_values, "0"), tf.int32)
        valid = is_number & (numbers >= 1) & (numbers <= self.num_symbols)
        return (tokens, tokens.with_flat_values(numbers - 1 + NUM_RESERVED_IDS),
                tokens.with_flat_values(valid))

    def decode_in_graph(self, ids):
        """Ids [batch, length] (dense, cut at EOS and padded with 0, or ragged) -> strings."""
        import tensorflow as tf
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        before_eos = tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1) == 0
        ids = tf.ragged.boolean_mask(ids, before_eos & tf.not_equal(ids, PAD_ID))
        symbols = tf.strings.as_string(ids - NUM_RESERVED_IDS + 1)
        return tf.strings.reduce_join(symbols, axis=1, separator=" ")


class SentencePieceVocabulary:
    """A SentencePiece model (BPE or unigram), joint over source and target, as the vocabulary of
    a translation problem; t2t's SubwordTextEncoder had the same role.

    The model reserves PAD = 0 and EOS = 1 (and UNK = 2), and is trained with the "identity"
    normalization and without collapsing whitespace, so that decode(encode(s)) == s for every
    line (the default nmt_nfkc rule collapses repeated spaces). Outside the graph it encodes with
    the `sentencepiece` package; inside the graph with tensorflow_text's SentencepieceTokenizer,
    the same model and the same ids.
    """

    def __init__(self, model_path: str):
        import tensorflow as tf
        self.model_path = model_path
        with tf.io.gfile.GFile(model_path, "rb") as handle:
            self.model_proto = handle.read()
        self.processor = _load_processor(model_path, self.model_proto)
        self._tokenizer = None

    @classmethod
    def train(cls, sentences, model_path: str, vocab_size: int, model_type: str = "bpe",
              max_sentences: int = 1_000_000):
        """Trains on an iterable of strings (at most `max_sentences` of them, sampled with a fixed
        seed) and writes `model_path` atomically; the same sentences give the same bytes."""
        # SentencePiece's own sampling (shuffle_input_sentence) draws another sample in every
        # process, even after sentencepiece.set_random_generator_seed (0.2.3), so the sample is
        # drawn here; an error of the sentences' reader is then raised here too, as itself.
        sample = _reservoir_sample(sentences, max_sentences, random.Random(SAMPLE_SEED))
        model_writer = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sample), model_writer=model_writer,
            vocab_size=vocab_size, model_type=model_type, character_coverage=1.0,
            pad_id=PAD_ID, eos_id=EOS_ID, unk_id=NUM_RESERVED_IDS, bos_id=-1,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            input_sentence_size=0, shuffle_input_sentence=False,
            hard_vocab_limit=False, byte_fallback=vocab_size >= BYTE_FALLBACK_MIN_VOCAB,
            minloglevel=2)
        from t2t_lite.storage import atomic_files
        with atomic_files.atomic_write(model_path, "wb") as handle:
            handle.write(model_writer.getvalue())
        return cls(model_path)

    @property
    def vocab_size(self) -> int:
        return self.processor.get_piece_size()

    @property
    def tokens(self) -> list:
        """The piece of every id, in id order ("<pad>", "</s>", "<unk>", then the model's), as
        `sentencepiece`'s encode(..., out_type=str) gives them."""
        return [self.processor.id_to_piece(i) for i in range(self.vocab_size)]

    @property
    def unknown_token(self) -> str:
        """The piece of an unknown character without byte fallback ("<unk>")."""
        return self.processor.id_to_piece(self.processor.unk_id())

    @staticmethod
    def min_pieces(text: str) -> int:
        """The fewest pieces that any vocabulary trained by `train` encodes `text` into, known
        before one is trained: one per space, plus one. SentencePiece writes each space (and
        one before the text) as "▁" and splits training text at each "▁" (split_by_whitespace),
        so no piece holds a "▁" but at its start."""
        return text.count(" ") + 1 if text else 0

    def encode(self, text: str) -> list:
        return self.processor.encode(text)

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        if EOS_ID in ids:
            ids = ids[:ids.index(EOS_ID)]
        return self.processor.decode([i for i in ids if i != PAD_ID])

    @property
    def tokenizer(self):
        """tensorflow_text.SentencepieceTokenizer over the same model (for use in graphs)."""
        if self._tokenizer is None:
            import tensorflow_text
            self._tokenizer = tensorflow_text.SentencepieceTokenizer(model=self.model_proto)
        return self._tokenizer

    def encode_in_graph(self, texts):
        """A string tensor [batch] -> int32 RaggedTensor of ids [batch, (length)]."""
        return self.tokenizer.tokenize(texts)

    def encodable_in_graph(self, texts):
        """bool [batch]: all True (an unknown character becomes UNK or bytes, as in encode)."""
        import tensorflow as tf
        return tf.ones_like(texts, tf.bool)

    def decode_in_graph(self, ids):
        """Ids [batch, length] (dense, cut at EOS and padded with 0, or ragged) -> strings."""
        import tensorflow as tf
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
            before_eos = tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1) == 0
            ids = tf.ragged.boolean_mask(ids, before_eos & tf.not_equal(ids, PAD_ID))
        return self.tokenizer.detokenize(ids)


def _load_processor(model_path: str, model_proto: bytes):
    """A SentencePieceProcessor of the model, or a DataError naming the file if it is not a
    vocabulary datagen writes (empty, cut short, not a SentencePiece model, or without PAD = 0
    and EOS = 1 and a piece after them)."""
    try:
        # An empty proto is never loaded, and asking an unloaded processor anything prints
        # SentencePiece's own "Model is not initialized" lines before the one error.
        processor = (sentencepiece.SentencePieceProcessor(model_proto=model_proto)
                     if model_proto else None)
    except RuntimeError:  # the protobuf does not parse
        processor = None
    if (processor is None or processor.get_piece_size() <= NUM_RESERVED_IDS
            or processor.pad_id() != PAD_ID or processor.eos_id() != EOS_ID):
        size = f"{len(model_proto):,} bytes" if model_proto else "empty"
        raise DataError(f"{model_path} is not a SentencePiece vocabulary of t2t_lite ({size}): "
                        f"delete it and rerun t2t_lite-datagen to train it again")
    return processor


def _reservoir_sample(sentences, size: int, rng: random.Random) -> list:
    """`size` items drawn uniformly from an iterable of any length in one pass (Vitter's
    Algorithm R), or all of them if there are fewer."""
    sample = []
    for count, sentence in enumerate(sentences):
        if count < size:
            sample.append(sentence)
        else:
            slot = rng.randrange(count + 1)
            if slot < size:
                sample[slot] = sentence
    return sample
