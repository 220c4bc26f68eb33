"""Pictures people look at: the attention of each head of each layer (paper §3.2 and the appendix's
Figures 3-5; a row per layer, a column per head, each cell a softmax weight of Equation 1), and
the PNG writing the learning-rate picture shares."""
import dataclasses
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from t2t_lite.storage.atomic_files import atomic_write  # noqa: E402
from t2t_lite.data.vocab import EOS_ID, PAD_ID, SentencePieceVocabulary  # noqa: E402

START_TOKEN = "<s>"
EOS_TOKEN = "</s>"
PAD_TOKEN = "<pad>"
KINDS = ("encoder_self_attention", "decoder_self_attention", "encoder_decoder_attention")
TITLES = {"encoder_self_attention": "Encoder self-attention",
          "decoder_self_attention": "Decoder self-attention",
          "encoder_decoder_attention": "Encoder-decoder attention"}
COLORMAP = "viridis"
# A panel grows with the sentence so that tick labels stay readable, within these bounds; the
# whole figure is capped so that a 256-token sentence in a 16-head model stays a sane PNG.
INCHES_PER_TOKEN = 0.22
MIN_PANEL_INCHES = 2.5
MAX_PANEL_INCHES = 8.0
MAX_FIGURE_INCHES = 60.0
DPI = 100


@dataclasses.dataclass
class AttentionMap:
    """The weights of one kind of attention for one sentence, with the tokens of both axes.

    weights: [layers, heads, queries, keys] float32, each row a softmax distribution.
    """
    kind: str
    weights: np.ndarray
    query_tokens: list
    key_tokens: list


def token_strings(encoder, ids) -> list:
    """One label per id: SentencePiece pieces as the model sees them (with "▁" marking a word
    start), a symbol vocabulary's symbols, "</s>" for EOS and "<pad>" for padding."""
    labels = []
    for token_id in ids:
        token_id = int(token_id)
        if token_id == EOS_ID:
            labels.append(EOS_TOKEN)
        elif token_id == PAD_ID:
            labels.append(PAD_TOKEN)
        elif isinstance(encoder, SentencePieceVocabulary):
            labels.append(encoder.processor.id_to_piece(token_id))
        else:
            labels.append(encoder.decode([token_id]))
    return labels


def output_ids(encoders: dict, output) -> list:
    """Decoder targets for a translation given as text or as ids: the ids up to the first EOS,
    without padding, followed by EOS (the targets the model was trained to produce)."""
    if isinstance(output, str):
        ids = encoders["targets"].encode(output)
    else:
        ids = [int(i) for i in output]
        if EOS_ID in ids:
            ids = ids[:ids.index(EOS_ID)]
        ids = [i for i in ids if i != PAD_ID]
    return ids + [EOS_ID]


def sentence_attention(model, encoders: dict, source: str, output) -> dict:
    """{kind: AttentionMap} for one sentence: `source` text and its translation `output` (text or
    ids), run through `model.attention_weights` as a batch of one, without padding."""
    source_ids = encoders["inputs"].encode(source) + [EOS_ID]
    target_ids = output_ids(encoders, output)
    scores = model.attention_weights({"inputs": tf.constant([source_ids], tf.int32),
                                      "targets": tf.constant([target_ids], tf.int32)})

    def stacked(layers, name):
        return np.stack([np.asarray(layer[name], np.float32)[0] for layer in layers])

    source_tokens = token_strings(encoders["inputs"], source_ids)
    # Decoder position i reads the start symbol and targets[:i] (the targets shifted right).
    decoder_tokens = [START_TOKEN] + token_strings(encoders["targets"], target_ids[:-1])
    return {
        "encoder_self_attention": AttentionMap(
            "encoder_self_attention", stacked(scores["encoder"], "self_attention"),
            source_tokens, source_tokens),
        "decoder_self_attention": AttentionMap(
            "decoder_self_attention", stacked(scores["decoder"], "self_attention"),
            decoder_tokens, decoder_tokens),
        "encoder_decoder_attention": AttentionMap(
            "encoder_decoder_attention", stacked(scores["decoder"], "encoder_decoder"),
            decoder_tokens, source_tokens),
    }


def panel_inches(attention: AttentionMap) -> float:
    longest = max(len(attention.query_tokens), len(attention.key_tokens))
    return float(np.clip(INCHES_PER_TOKEN * longest + 1.0, MIN_PANEL_INCHES, MAX_PANEL_INCHES))


def attention_figure(attention: AttentionMap):
    """A figure of `attention`: one row per layer, one column per head, each panel titled
    "layer L, head H" (from 1) with key tokens along x and query tokens along y.

    Returns (figure, axes) with axes a [layers, heads] array; the caller saves and closes it.
    """
    layers, heads, queries, keys = attention.weights.shape
    panel = panel_inches(attention)
    size = (min(heads * panel, MAX_FIGURE_INCHES), min(layers * panel, MAX_FIGURE_INCHES))
    font_size = float(np.clip(200 / max(queries, keys), 4, 9))
    figure, axes = plt.subplots(layers, heads, figsize=size, squeeze=False, dpi=DPI,
                                layout="constrained")
    figure.suptitle(TITLES[attention.kind])
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            # vmin/vmax fixed to the range of a softmax, so that colours compare across panels.
            ax.imshow(attention.weights[layer, head], cmap=COLORMAP, vmin=0.0, vmax=1.0,
                      aspect="auto", interpolation="nearest")
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=font_size + 1)
            ax.set_xticks(range(keys), attention.key_tokens, rotation=90, fontsize=font_size)
            ax.set_yticks(range(queries), attention.query_tokens, fontsize=font_size)
    return figure, axes


def save_figure(figure, path: str):
    """Writes `figure` as a PNG atomically (a complete file or none) and closes it. Matplotlib
    writes local files only, so the PNG is drawn in memory and written through tf.io.gfile
    (gs:// and ram:// too)."""
    try:
        picture = io.BytesIO()
        figure.savefig(picture, format="png")
    finally:
        plt.close(figure)
    with atomic_write(path, "wb") as handle:
        handle.write(picture.getvalue())


def write_attention_pictures(model, encoders: dict, sentences: list, directory: str) -> list:
    """For each (source text, output ids or text) pair k in `sentences`, writes
    sentence_{k}_encoder_self_attention.png, sentence_{k}_decoder_self_attention.png and
    sentence_{k}_encoder_decoder_attention.png into `directory` (created if missing).

    Returns the paths written, in that order.
    """
    tf.io.gfile.makedirs(directory)
    paths = []
    for k, (source, output) in enumerate(sentences):
        maps = sentence_attention(model, encoders, source, output)
        for kind in KINDS:
            path = tf.io.gfile.join(directory, f"sentence_{k}_{kind}.png")
            figure, _ = attention_figure(maps[kind])
            save_figure(figure, path)
            paths.append(path)
    return paths

