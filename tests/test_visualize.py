"""Attention pictures (paper §3.2, appendix Figures 3-5): one panel per layer and head, tokens on
the axes, softmax rows that sum to 1, PNGs written atomically; and the decoder's
--attention_dir flag."""
import os

import matplotlib.image
import numpy as np
import pytest

from t2t_lite import checkpoints, visualize
from t2t_lite.data.vocab import SentencePieceVocabulary, SymbolVocabulary
from t2t_lite.models.building import build_model

from program_runs import TINY_MODEL, hparams_of, run

TINY = TINY_MODEL.replace("num_hidden_layers=1", "num_hidden_layers=2")
LAYERS, HEADS = 2, 2
SYMBOLS = SymbolVocabulary(10)
ENCODERS = {"inputs": SYMBOLS, "targets": SYMBOLS}


@pytest.fixture(scope="module")
def model():
    hparams = hparams_of(TINY)
    return build_model("transformer", hparams, SYMBOLS.vocab_size)


@pytest.fixture(scope="module")
def maps(model):
    # Source "3 7 1" is ids [4, 8, 2] + EOS; the translation "9 2" is ids [10, 3] + EOS.
    return visualize.sentence_attention(model, ENCODERS, "3 7 1", "9 2")


def test_tokens_label_both_sides_of_each_attention(maps):
    source = ["3", "7", "1", "</s>"]
    decoder = ["<s>", "9", "2"]  # what decoder positions 0, 1, 2 read (targets shifted right)
    assert (maps["encoder_self_attention"].query_tokens,
            maps["encoder_self_attention"].key_tokens) == (source, source)
    assert (maps["decoder_self_attention"].query_tokens,
            maps["decoder_self_attention"].key_tokens) == (decoder, decoder)
    assert (maps["encoder_decoder_attention"].query_tokens,
            maps["encoder_decoder_attention"].key_tokens) == (decoder, source)
    assert maps["encoder_self_attention"].weights.shape == (LAYERS, HEADS, 4, 4)
    assert maps["decoder_self_attention"].weights.shape == (LAYERS, HEADS, 3, 3)
    assert maps["encoder_decoder_attention"].weights.shape == (LAYERS, HEADS, 3, 4)


def test_decoder_self_attention_sees_no_future_position(maps):
    weights = maps["decoder_self_attention"].weights
    above_diagonal = np.triu(np.ones(weights.shape[-2:], bool), k=1)
    assert np.all(weights[..., above_diagonal] < 1e-6)


@pytest.mark.parametrize("kind", visualize.KINDS)
def test_figure_has_one_panel_per_layer_and_head_with_token_ticks(maps, kind):
    attention = maps[kind]
    figure, axes = visualize.attention_figure(attention)
    try:
        assert axes.shape == (LAYERS, HEADS) and len(figure.axes) == LAYERS * HEADS
        for layer in range(LAYERS):
            for head in range(HEADS):
                ax = axes[layer, head]
                assert ax.get_title() == f"layer {layer + 1}, head {head + 1}"
                assert [t.get_text() for t in ax.get_xticklabels()] == attention.key_tokens
                assert [t.get_text() for t in ax.get_yticklabels()] == attention.query_tokens
                shown = np.asarray(ax.images[0].get_array())
                np.testing.assert_allclose(shown, attention.weights[layer, head])
                np.testing.assert_allclose(shown.sum(axis=-1), 1.0, atol=1e-5)
    finally:
        visualize.plt.close(figure)


def test_three_valid_pngs_per_sentence(model, tmp_path):
    # A translation may be given as text or as the search's ids (cut at EOS, padding dropped).
    sentences = [("3 7 1", "3 7 1"), ("5 2", [6, 3, 1, 0, 0])]
    directory = str(tmp_path / "pictures")
    paths = visualize.write_attention_pictures(model, ENCODERS, sentences, directory)
    assert paths == [os.path.join(directory, f"sentence_{k}_{kind}.png")
                     for k in range(2) for kind in visualize.KINDS]
    assert sorted(os.listdir(directory)) == sorted(os.path.basename(p) for p in paths)
    for path in paths:
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        assert image[..., :3].std() > 0.05  # not a blank page
    assert len(visualize.plt.get_fignums()) == 0  # every figure closed


def test_text_and_ids_give_the_same_targets():
    assert visualize.output_ids(ENCODERS, "5 2") == [6, 3, 1]
    assert visualize.output_ids(ENCODERS, [6, 3, 1, 0, 0]) == [6, 3, 1]
    assert visualize.output_ids(ENCODERS, [6, 3]) == [6, 3, 1]
    assert visualize.output_ids(ENCODERS, "") == [1]


def test_sentencepiece_labels_are_pieces(tmp_path):
    sentences = ["a small house", "the small dog", "a house and a dog"] * 20
    vocab = SentencePieceVocabulary.train(sentences, str(tmp_path / "sp.model"), vocab_size=40)
    ids = vocab.encode("a small house") + [1, 0]
    labels = visualize.token_strings(vocab, ids)
    assert labels[-2:] == ["</s>", "<pad>"]
    assert "".join(labels[:-2]).replace("\u2581", " ").strip() == "a small house"
    assert labels[0].startswith("\u2581")


def test_large_figures_stay_bounded():
    long = visualize.AttentionMap("encoder_self_attention", np.full((6, 16, 256, 256), 1 / 256),
                                  ["x"] * 256, ["x"] * 256)
    assert visualize.panel_inches(long) == visualize.MAX_PANEL_INCHES
    short = visualize.AttentionMap("encoder_self_attention", np.ones((1, 1, 2, 2)) / 2,
                                   ["x"] * 2, ["x"] * 2)
    assert visualize.panel_inches(short) == visualize.MIN_PANEL_INCHES


def run_decoder(*flags):
    return run("decoder", *flags)


def test_decoder_writes_pictures_of_the_first_sentences(model, tmp_path):
    output_dir = str(tmp_path / "train")
    checkpoints.make_manager(output_dir, model).save(checkpoint_number=1)
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("3 7 1\n5 2\n4\n")
    decoded, pictures = str(tmp_path / "decoded.txt"), str(tmp_path / "attention")
    common = ["--problem=algorithmic_copy", "--hparams_set=transformer_tiny", f"--hparams={TINY}",
              f"--data_dir={tmp_path}", f"--output_dir={output_dir}",
              f"--decode_from_file={inputs}", f"--attention_dir={pictures}"]

    status, out = run_decoder(*common)
    assert status == 2 and "error: --attention_dir needs --decode_from_file and " \
                           "--decode_to_file" in out

    status, out = run_decoder(*common, f"--decode_to_file={decoded}", "--attention_sentences=2",
                              "--decode_hparams=extra_length=3")
    assert status == 0, out
    assert f"attention pictures of 2 sentences (6 files) in {pictures}" in out
    assert sorted(os.listdir(pictures)) == sorted(f"sentence_{k}_{kind}.png"
                                                  for k in range(2) for kind in visualize.KINDS)
