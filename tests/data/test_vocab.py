"""SentencePieceVocabulary on real data: a joint 8k vocabulary trained on Multi30k train (de+en)
round-trips every dev sentence, in Python and in the graph, with the same ids both ways. Small
vocabularies show that training is reproducible and that a broken model file is a DataError."""
import io
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from t2t_lite.data.text_files import read_lines
from t2t_lite.data.vocab import EOS_ID, NUM_RESERVED_IDS, PAD_ID, SentencePieceVocabulary

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MULTI30K = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))
LANGUAGES = ("de", "en")
VOCAB_SIZE = 8192


def _raw(split, language):
    path = os.path.join(MULTI30K, f"{split}.{language}.gz")
    if not os.path.exists(path):
        pytest.skip(f"Multi30k raw file {path} is absent (expected the shared data folder "
                    f"<repo>/../shared/data/multi30k)")
    return list(read_lines(path))


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """Trained once for the module, as Text2TextProblem does: train.de and train.en together."""
    sentences = [s for language in LANGUAGES for s in _raw("train", language) if s.strip()]
    path = str(tmp_path_factory.mktemp("vocab") / "multi30k.8192.bpe.model")
    vocabulary = SentencePieceVocabulary.train(sentences, path, VOCAB_SIZE, "bpe")
    assert os.path.exists(path) and not os.path.exists(path + ".incomplete")
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # no temporary left
    return vocabulary


@pytest.fixture(scope="module")
def dev_sentences():
    """Every line of val.de and val.en (1,014 each)."""
    sentences = {language: _raw("val", language) for language in LANGUAGES}
    assert all(len(lines) == 1014 for lines in sentences.values())
    return [s for language in LANGUAGES for s in sentences[language]]


def test_vocabulary_size_and_reserved_ids(vocab):
    assert vocab.vocab_size == VOCAB_SIZE
    processor = vocab.processor
    assert (PAD_ID, EOS_ID, NUM_RESERVED_IDS) == (0, 1, 2)
    assert processor.id_to_piece(PAD_ID) == "<pad>" and processor.is_control(PAD_ID)
    assert processor.id_to_piece(EOS_ID) == "</s>" and processor.is_control(EOS_ID)
    assert processor.pad_id() == PAD_ID and processor.eos_id() == EOS_ID
    assert processor.bos_id() == -1  # no BOS piece: t2t appends EOS only
    # Every ordinary piece has an id past the reserved ones.
    for piece_id in range(vocab.vocab_size):
        if piece_id not in (PAD_ID, EOS_ID):
            assert not processor.is_control(piece_id), piece_id
            assert processor.piece_to_id(processor.id_to_piece(piece_id)) == piece_id


def test_python_round_trip_of_every_dev_sentence(vocab, dev_sentences):
    failures = []
    for sentence in dev_sentences:
        ids = vocab.encode(sentence)
        assert ids, sentence
        assert min(ids) >= NUM_RESERVED_IDS, (sentence, ids)  # never PAD or EOS
        if vocab.decode(ids) != sentence:
            failures.append((sentence, vocab.decode(ids)))
    assert not failures, f"{len(failures)} of {len(dev_sentences)} differ, e.g. {failures[:3]}"


def test_in_graph_ids_equal_python_ids_and_round_trip(vocab, dev_sentences):
    ids = vocab.encode_in_graph(tf.constant(dev_sentences))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.shape[0] == len(dev_sentences)
    python_ids = [vocab.encode(sentence) for sentence in dev_sentences]
    mismatches = [i for i, row in enumerate(ids.to_list()) if row != python_ids[i]]
    assert not mismatches, f"{len(mismatches)} sentences get other ids in the graph, " \
                           f"e.g. {dev_sentences[mismatches[0]]!r}"
    assert int(tf.reduce_min(ids.flat_values)) >= NUM_RESERVED_IDS

    decoded = [text.decode("utf-8") for text in vocab.decode_in_graph(ids).numpy()]
    failures = [(s, d) for s, d in zip(dev_sentences, decoded) if s != d]
    assert not failures, f"{len(failures)} of {len(dev_sentences)} differ, e.g. {failures[:3]}"


def test_in_graph_inside_a_tf_function(vocab, dev_sentences):
    """The ops run in a traced graph (as in a dataset map or an exported model), not only
    eagerly."""
    sentences = dev_sentences[:64]

    @tf.function
    def round_trip(texts):
        return vocab.decode_in_graph(vocab.encode_in_graph(texts))

    decoded = [text.decode("utf-8") for text in round_trip(tf.constant(sentences)).numpy()]
    assert decoded == sentences


def test_decode_stops_at_eos_and_drops_padding(vocab, dev_sentences):
    sentences = dev_sentences[:3] + dev_sentences[-3:]
    encoded = [vocab.encode(s) for s in sentences]
    junk = vocab.encode(dev_sentences[10])  # real pieces after EOS must not be decoded
    length = max(len(ids) for ids in encoded) + 1 + len(junk) + 4
    dense = [ids + [EOS_ID] + junk + [PAD_ID] * (length - len(ids) - 1 - len(junk))
             for ids in encoded]

    for sentence, row, ids in zip(sentences, dense, encoded):
        assert vocab.decode(row) == sentence
        assert vocab.decode(ids + [PAD_ID] * 5) == sentence          # padding, no EOS
        assert vocab.decode([PAD_ID] + ids + [EOS_ID]) == sentence   # padding anywhere
        assert vocab.decode([EOS_ID] + ids) == ""                    # nothing before EOS

    decoded = vocab.decode_in_graph(tf.constant(dense, dtype=tf.int32)).numpy()
    assert [text.decode("utf-8") for text in decoded] == sentences
    # Dense ids padded with 0 but without EOS (the output ran to its maximum length).
    padded = [ids + [PAD_ID] * (length - len(ids)) for ids in encoded]
    decoded = vocab.decode_in_graph(tf.constant(padded, dtype=tf.int32)).numpy()
    assert [text.decode("utf-8") for text in decoded] == sentences
    # An EOS at the very start decodes to the empty string.
    decoded = vocab.decode_in_graph(tf.constant([[EOS_ID] + encoded[0]], dtype=tf.int32))
    assert decoded.numpy().tolist() == [b""]


def test_reloading_the_model_file_gives_the_same_ids(vocab, dev_sentences):
    reloaded = SentencePieceVocabulary(vocab.model_path)
    for sentence in dev_sentences[::50]:
        assert reloaded.encode(sentence) == vocab.encode(sentence)


def test_characters_unseen_in_training_round_trip_through_bytes(vocab):
    text = "Ein naïver Hund läuft nach 東京 🐕"
    ids = vocab.encode(text)
    assert vocab.decode(ids) == text
    assert vocab.encode_in_graph(tf.constant([text])).to_list()[0] == ids
    assert vocab.decode_in_graph(tf.ragged.constant([ids])).numpy()[0].decode("utf-8") == text


def test_an_error_while_reading_training_sentences_keeps_its_message(tmp_path):
    from t2t_lite.errors import DataError

    def sentences():
        yield from ["ein Hund", "a dog"] * 50
        raise DataError("train.de.gz, line 101: invalid UTF-8")

    with pytest.raises(DataError, match="line 101: invalid UTF-8"):
        SentencePieceVocabulary.train(sentences(), str(tmp_path / "v.model"), 64)
    assert not (tmp_path / "v.model").exists()


def _toy_sentences(count):
    words = "a dog runs in the park two dogs play with the red ball near house".split()
    return [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(3 + i % 9))
            for i in range(count)]


def test_the_same_sentences_give_the_same_model_file(tmp_path):
    """More sentences than max_sentences: every run samples (and so trains) the same, also in
    another process (SentencePiece's own shuffle drew another sample in every process; one
    process alone repeated itself). Each process imports the sentencepiece package only."""
    sentences = tmp_path / "sentences.json"
    sentences.write_text(json.dumps(_toy_sentences(2000)))
    script = ("import json, sys\n"
              "from t2t_lite.data.vocab import SentencePieceVocabulary\n"
              "SentencePieceVocabulary.train(json.load(open(sys.argv[1])), sys.argv[2], 60, "
              "'unigram', max_sentences=300)\n")
    models = []
    for run in range(2):
        path = tmp_path / f"run{run}.model"
        subprocess.run([sys.executable, "-c", script, str(sentences), str(path)], check=True,
                       timeout=120)
        models.append(path.read_bytes())
    assert models[0] == models[1]


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_no_vocabulary_encodes_a_text_in_fewer_pieces_than_min_pieces(tmp_path, model_type):
    """The bound that lets datagen leave surely over-long pairs out of the vocabulary's
    training: one piece per space, plus one, whatever the text (repeated, leading and trailing
    spaces, tabs, characters the vocabulary never saw)."""
    vocabulary = SentencePieceVocabulary.train(_toy_sentences(300), str(tmp_path / "v.model"),
                                               60, model_type)
    texts = ["a", "a dog", "a  dog", " a dog ", "   ", "a\tdog runs", "ЖЖЖ ЖЖ Ж", "Ж  Ж",
             "the red ball near house two dogs play", "thedogrunsinthepark"]
    for text in texts:
        assert len(vocabulary.encode(text)) >= SentencePieceVocabulary.min_pieces(text), text


def _broken_model(kind: str, tmp_path) -> bytes:
    import random
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2
    if kind == "empty":  # parses as a model of 0 pieces
        return b""
    if kind == "random bytes":
        return bytes(random.Random(0).randrange(256) for _ in range(500))
    if kind == "another tool's ids":  # SentencePiece's defaults: unk 0, bos 1, eos 2, no PAD
        writer = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(_toy_sentences(200)),
                                       model_writer=writer, vocab_size=30, minloglevel=2)
        return writer.getvalue()
    good = SentencePieceVocabulary.train(_toy_sentences(200), str(tmp_path / "good.model"), 30)
    if kind == "cut short":  # (cut between two pieces, it would be a smaller, valid model)
        return good.model_proto[:-1]
    model = sentencepiece_model_pb2.ModelProto()  # "only the reserved pieces"
    model.ParseFromString(good.model_proto)
    del model.pieces[NUM_RESERVED_IDS:]
    return model.SerializeToString()


@pytest.mark.parametrize("kind", ["empty", "random bytes", "cut short", "only the reserved pieces",
                                  "another tool's ids"])
def test_a_broken_model_file_is_a_data_error_naming_it(tmp_path, kind):
    """Not a Keras error about ids out of range later, or SentencePiece's parse error."""
    from t2t_lite.errors import DataError
    path = tmp_path / "vocab.multi30k.8192.bpe.model"
    path.write_bytes(_broken_model(kind, tmp_path))
    with pytest.raises(DataError) as error:
        SentencePieceVocabulary(str(path))
    assert str(path) in str(error.value)
    assert "delete it and rerun t2t_lite-datagen" in str(error.value)


def test_symbol_vocabulary_in_the_graph_equals_python():
    """SymbolVocabulary (the algorithmic problems) has the same in-graph contract: strings ->
    ragged int32 ids, and dense ids cut at EOS without PAD -> strings, equal to encode/decode."""
    from t2t_lite.data.vocab import SymbolVocabulary
    vocab = SymbolVocabulary(10)
    texts = ["3 7 1", "10", "", " 2  5\t9 ", "1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 10"]
    ids = vocab.encode_in_graph(tf.constant(texts))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.to_list() == [vocab.encode(text) for text in texts]
    assert ids.to_list()[0] == [4, 8, 2]

    encoded = [vocab.encode(text) for text in texts]
    length = max(map(len, encoded)) + 4
    dense = [row + [EOS_ID] + [5, 6][:length - len(row) - 1] for row in encoded]
    dense = [row + [PAD_ID] * (length - len(row)) for row in dense]
    dense[1] = [PAD_ID] + dense[1][:-1]  # padding before the first symbol is dropped too
    expected = [vocab.decode(row) for row in dense]
    assert expected == [" ".join(text.split()) for text in texts]
    decoded = vocab.decode_in_graph(tf.constant(dense, dtype=tf.int32)).numpy()
    assert [text.decode("utf-8") for text in decoded] == expected
    assert vocab.decode_in_graph(tf.ragged.constant(encoded)).numpy().tolist() == \
        [text.encode("utf-8") for text in expected]

    @tf.function
    def round_trip(texts):
        return vocab.decode_in_graph(vocab.encode_in_graph(texts).to_tensor())

    assert [t.decode("utf-8") for t in round_trip(tf.constant(texts)).numpy()] == expected
    for bad in ("3 11", "3 x", "0", "-2"):
        with pytest.raises(ValueError):
            vocab.encode(bad)
        with pytest.raises(tf.errors.InvalidArgumentError, match="not a symbol"):
            vocab.encode_in_graph(tf.constant([bad]))
