"""Search for the most probable output sequence, one step per new token (paper §6.1).

The encoder runs once per batch. With `use_cache` (the default), each step runs the decoder on
the newest token only: the encoder-decoder attention keys and values are computed once, and
each decoder self-attention keeps the keys and values of the earlier positions in a cache
(t2t's fast decoding). Without it, each step runs the decoder over the whole fixed size buffer
of tokens chosen so far and reads the current position (causal masking makes the two equal).
The searches run inside `tf.function`; the decoder, BLEU during training and the exported
model call these same functions.

Two ways to run, with the same outputs (tests/decoding/test_search.py):
- Without XLA (the default: faster on a CPU, no compile per shape, and what any TensorFlow
  Serving runs): the self-attention caches grow by one position per step, and a sentence
  leaves the batch as soon as its search is done, so later steps run on fewer rows (as
  CTranslate2 does).
- `fixed_shapes`, for XLA, which compiles fixed shapes only: the caches have room for the
  longest output from the start and each step writes its position with a mask, reading and
  writing the whole buffer; every row stays until the whole batch is done.

Under hparams.mixed_precision=bfloat16 (or float16) the model computes in that dtype, and the
caches hold its keys and values in it (they come out of its matmuls so: float32 copies would
only double what each step reads); the logits, log probabilities, scores and length penalty
are float32 (`_float32`).

The maximum output length of each sentence is its input length (EOS included) + `extra_length`
(50 in the paper; t2t used the padded length of the batch). Outputs are ids [batch, padded
input length + extra_length], EOS included, padded with 0 after it.
"""
import dataclasses

import tensorflow as tf

from t2t_lite.data.vocab import EOS_ID, PAD_ID
from t2t_lite.decoding.block_top_k import block_top_k
from t2t_lite.layers.attention import NEG_INF



@dataclasses.dataclass(frozen=True)
class SearchHParams:
    """What the search does, the search's part of t2t's --decode_hparams (the decoder's batching
    and XLA are decoder.TranslatorHParams). beam_size 4 and alpha 0.6 are the paper's (§6.1);
    beam_size=1 is greedy search. extra_length: tokens allowed past the input length (the
    paper's 50). use_cache: incremental decoding (off only to measure it).

    stop_after_finished: when beam search is done with a sentence. 0 (the default): when no
    alive hypothesis can beat its best finished one, t2t's bound, so the output is the one a
    search to the length limit returns. N > 0: also as soon as N hypotheses have ended among
    its K best candidates of the steps so far, the rule of CTranslate2 (N = K x patience, its
    default patience 1; it has no exact rule) and fairseq (N = K): fewer steps, and a
    sentence can miss a better hypothesis that would have ended later. (Which sequences
    compete for the output stays t2t's: every candidate of the 2K that ended, where
    CTranslate2 keeps those among the K best only.)"""
    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50
    use_cache: bool = True
    stop_after_finished: int = 0


def length_penalty(length, alpha):
    """t2t's (and GNMT's) length penalty ((5 + length) / 6)^alpha; beam scores are log
    probabilities divided by it (alpha 0.6 in the paper, §6.1)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


class _Decoder:
    """The model's next-token logits for the N rows still searched, with or without the cache.

    What each row needs besides its tokens ("rows": the source padding, and the caches, or the
    encoder output without them) is loop state, so that finished sentences can leave the batch.
    The rows have one row per sentence, but for the self-attention caches, which have one per
    decoded sequence (per beam); the model's encoder-decoder attention lets a sentence's beams
    share its keys and values (MultiHeadAttention.attend_to_memory), and the uncached decoder
    repeats the encoder output per beam.

    fixed_shapes: the self-attention cache has room for max_length positions from the start
    and no row leaves (XLA compiles only fixed shapes); otherwise the cache grows by one
    position per step, so a step reads and writes only the positions decoded so far.
    """

    def __init__(self, model, encoder_output, inputs_padding, max_length, use_cache,
                 fixed_shapes):
        self.model = model
        self.use_cache = use_cache
        self.fixed_shapes = fixed_shapes
        self.rows = {"inputs_padding": inputs_padding}
        if use_cache:
            self.rows["cache"] = model.initial_cache(encoder_output,
                                                     max_length if fixed_shapes else None)
        else:
            self.rows["encoder_output"] = encoder_output

    def logits(self, decoded, position, rows):
        """decoded [N, max_length + 1] (position 0 is the start symbol PAD) -> float32 logits
        [N, V] for the token after `position`, and the updated rows."""
        if self.use_cache:
            logits, cache = self.model.decode_step(decoded[:, position], position,
                                                   rows["cache"], rows["inputs_padding"],
                                                   self.fixed_shapes)
            return _float32(logits), {**rows, "cache": cache}
        beams = tf.shape(decoded)[0] // tf.maximum(tf.shape(rows["inputs_padding"])[0], 1)
        logits = self.model.decode(decoded[:, :-1], _tile_beams(rows["encoder_output"], beams),
                                   _tile_beams(rows["inputs_padding"], beams), training=False)
        return _float32(logits[:, position, :]), rows

    def shape_invariants(self, rows):
        """The shapes of `rows` (the loop's first) as the search loop may change them: the
        number of rows and the self-attention caches' length, unless fixed_shapes."""
        if self.fixed_shapes:
            return tf.nest.map_structure(lambda tensor: tensor.shape, rows)

        def any_rows_and_length(tensor):
            return tf.TensorShape([None, tensor.shape[1], None, tensor.shape[3]])
        shapes = tf.nest.map_structure(_any_rows, rows)
        if self.use_cache:
            shapes["cache"] = [
                {**layer_shapes, "self_attention": tf.nest.map_structure(
                    any_rows_and_length, layer["self_attention"])}
                for layer_shapes, layer in zip(shapes["cache"], rows["cache"])]
        return shapes

    def follow(self, rows, parent_rows=None, kept=None, rows_left=None):
        """The rows of the next step. With `parent_rows` (beam search), the self-attention
        caches follow their sequences: row i continues row parent_rows[i] (beam search
        reorders its beams, and leaves out those of the sentences done). With `rows_left`
        (bool scalar), when it is true, only the sentences `kept` (those still searched) are
        kept of the rest: of the rows with one row per sentence, and of the self-attention
        caches too without `parent_rows` (greedy search: one row per sentence)."""
        def gather(indices):
            return lambda tensor: tf.gather(tensor, indices)

        def reorder(tensor):
            followed = tf.gather(tensor, parent_rows)
            return tf.ensure_shape(followed, tensor.shape) if self.fixed_shapes else followed

        reordered = parent_rows is not None and self.use_cache
        if reordered:
            rows = self.map_self_attention_caches(reorder, rows)
        if rows_left is None:
            return rows

        def keep(rows):
            if not reordered:
                return tf.nest.map_structure(gather(kept), rows)
            kept_rows = {name: tf.nest.map_structure(gather(kept), value)
                         for name, value in rows.items() if name != "cache"}
            kept_rows["cache"] = [{**layer, "encoder_decoder": tf.nest.map_structure(
                gather(kept), layer["encoder_decoder"])} for layer in rows["cache"]]
            return kept_rows
        return tf.cond(rows_left, lambda: keep(rows), lambda: rows)

    def map_self_attention_caches(self, function, rows):
        """`rows` with `function` applied to each self-attention cache's tensors (the only rows
        with a row per beam; the rest have one per sentence)."""
        if not self.use_cache:
            return rows
        return {**rows, "cache": [
            {**layer, "self_attention": tf.nest.map_structure(function,
                                                              layer["self_attention"])}
            for layer in rows["cache"]]}


def _float32(logits):
    """The search's log-softmax, scores and length penalty in float32 whatever the model
    computes in (the Transformer's logits already are float32: a no-op then), as Keras' mixed
    precision guide keeps a model's final softmax in float32: half-precision scores summed
    over 50 steps would decide between beams by their rounding."""
    return tf.cast(logits, tf.float32)


def _encode(model, inputs, extra_length):
    """Encoder output, padding, each input's output length limit [B] (its length + extra) and
    the largest limit (the buffers' size). Per-input limits make an output independent of the
    other inputs in its batch and of how far the batch is padded."""
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    encoder_output, inputs_padding = model.encode(inputs, training=False)
    limits = tf.reduce_sum(tf.cast(tf.logical_not(inputs_padding), tf.int32), axis=1)
    limits += extra_length
    return inputs, encoder_output, inputs_padding, limits, tf.shape(inputs)[1] + extra_length


def _any_rows(tensor):
    """tensor's shape with any number of rows (its leading dimension) in a search loop."""
    return tf.TensorShape([None]).concatenate(tensor.shape[1:])


def _loop(decoder, not_done, step, state):
    """tf.while_loop over `state`, whose last item is the decoder's rows. With fixed_shapes
    every shape stays; otherwise the leading dimension (the sentences still searched) may
    shrink."""
    def invariant(tensor):
        if decoder.fixed_shapes or tensor.shape.rank == 0:
            return tensor.shape
        return _any_rows(tensor)
    shapes = tuple(tf.nest.map_structure(invariant, item) for item in state[:-1])
    return tf.while_loop(not_done, step, state,
                         shape_invariants=shapes + (decoder.shape_invariants(state[-1]),))


def _still_searched(done):
    """Indices int32 [n] of the sentences not done, of done bool [b]."""
    return tf.cast(tf.reshape(tf.where(tf.logical_not(done)), [-1]), tf.int32)


def greedy_search(model, inputs, extra_length: int = 50, use_cache: bool = True,
                  fixed_shapes: bool = False):
    """Greedy decoding of padded `inputs` [B, S]: ids [B, S + extra_length] and their log
    probabilities [B]. A sentence is done when it has produced EOS or reached its limit; done
    sentences leave the batch (unless fixed_shapes: then they are padded with PAD until all
    are done)."""
    inputs, encoder_output, inputs_padding, limits, max_length = _encode(model, inputs,
                                                                         extra_length)
    batch_size = tf.shape(inputs)[0]
    decoder = _Decoder(model, encoder_output, inputs_padding, max_length, use_cache,
                       fixed_shapes)
    # decoded[:, 0] is the start position (PAD, as t2t's shift_right); token t lands at t + 1.
    decoded = tf.zeros([batch_size, max_length + 1], tf.int32)
    scores = tf.zeros([batch_size], tf.float32)
    positions = tf.range(max_length + 1)[tf.newaxis, :]

    # `searched` [n]: the sentences still searched (their rows in decoded, scores, done and
    # the decoder's rows); `outputs` and `output_scores` hold every sentence.
    def step(t, searched, done, decoded, scores, outputs, output_scores, rows):
        logits, rows = decoder.logits(decoded, t, rows)
        log_probs = tf.nn.log_softmax(logits)
        next_ids = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        best = tf.gather(log_probs, next_ids, batch_dims=1)
        scores += tf.where(done, 0.0, best)
        next_ids = tf.where(done, PAD_ID, next_ids)
        decoded = tf.where(positions == t + 1, next_ids[:, tf.newaxis], decoded)
        done |= tf.equal(next_ids, EOS_ID) | (t + 1 >= tf.gather(limits, searched))
        outputs = tf.tensor_scatter_nd_update(outputs, searched[:, tf.newaxis], decoded)
        output_scores = tf.tensor_scatter_nd_update(output_scores, searched[:, tf.newaxis],
                                                    scores)
        if not fixed_shapes:
            kept = _still_searched(done)
            rows = decoder.follow(rows, None, kept, tf.size(kept) < tf.size(done))
            searched, done, decoded, scores = (tf.gather(tensor, kept)
                                               for tensor in (searched, done, decoded, scores))
        return t + 1, searched, done, decoded, scores, outputs, output_scores, rows

    def not_done(t, searched, done, decoded, scores, outputs, output_scores, rows):
        return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(done)))

    state = (tf.constant(0), tf.range(batch_size), tf.zeros([batch_size], tf.bool), decoded,
             scores, decoded, scores, decoder.rows)
    outputs, output_scores = _loop(decoder, not_done, step, state)[5:7]
    return outputs[:, 1:], output_scores


def _merge_beams(tensor, batch_size, beam_size):
    """[B * K, ...] -> [B, K, ...]."""
    return tf.reshape(tensor, tf.concat([[batch_size, beam_size], tf.shape(tensor)[1:]], 0))


def _flatten_beams(tensor):
    """[B, K, ...] -> [B * K, ...]."""
    return tf.reshape(tensor, tf.concat([[-1], tf.shape(tensor)[2:]], 0))


def _tile_beams(tensor, beam_size):
    """[B, ...] -> [B * K, ...], each row repeated K times in a row."""
    return tf.repeat(tensor, beam_size, axis=0)


def beam_search(model, inputs, beam_size: int = 4, alpha: float = 0.6, extra_length: int = 50,
                use_cache: bool = True, fixed_shapes: bool = False,
                stop_after_finished: int = 0):
    """The paper's beam search (§6.1, beam 4, length penalty alpha 0.6), as t2t's
    beam_search.py: keeps the `beam_size` most probable unfinished sequences ("alive") and the
    `beam_size` best finished ones, scored by log probability / length_penalty. A candidate
    that reaches its input's length limit counts as finished (t2t compared such sequences only
    when none had ended). A sentence is done as soon as no alive sequence can still beat its
    best finished one (t2t stopped when none could beat the worst kept, for the whole batch),
    or, with `stop_after_finished` N > 0, once N candidates have ended among its K best of
    the steps so far (CTranslate2's rule, SearchHParams); done sentences leave the batch, so
    the steps after run on fewer rows (as CTranslate2 does), unless fixed_shapes (they then
    stay, their results kept as they were when done).

    Returns ids [B, S + extra_length] (the best finished sequence of each input, or the best
    alive one if none finished) and their scores [B].
    """
    inputs, encoder_output, inputs_padding, limits, max_length = _encode(model, inputs,
                                                                         extra_length)
    batch_size = tf.shape(inputs)[0]
    per_beam = min(2 * beam_size, model.vocab_size)  # each beam's best tokens considered
    # The decoder's rows are one per sentence, but for the self-attention caches after the
    # first step: the encoder-decoder keys and values are projected once per sentence and
    # shared by its K beams, and the first step runs on one row per sentence (all K beams
    # start from the same start symbol); its outputs and caches are then tiled to K beams.
    decoder = _Decoder(model, encoder_output, inputs_padding, max_length, use_cache,
                       fixed_shapes)
    length = max_length + 1  # with the start position
    positions = tf.range(length)[tf.newaxis, tf.newaxis, :]
    alive_seq = tf.zeros([batch_size, beam_size, length], tf.int32)
    # Only the first beam is live at the start, so the first step does not pick K copies.
    alive_log_probs = tf.tile(tf.constant([[0.0] + [NEG_INF] * (beam_size - 1)]),
                              [batch_size, 1])
    finished_seq = tf.zeros([batch_size, beam_size, length], tf.int32)
    finished_scores = tf.fill([batch_size, beam_size], NEG_INF)
    finished_flags = tf.zeros([batch_size, beam_size], tf.bool)

    def gather_beams(tensor, indices):
        """tensor [B, K', ...], indices [B, K] -> [B, K, ...]."""
        return tf.gather(tensor, indices, batch_dims=1)

    def bound_met(alive_log_probs, finished_scores, finished_flags, limits):
        """[b]: the best score an alive beam can still reach, its log probability (which only
        falls) over the largest penalty (at its input's limit), cannot beat the best finished
        sequence, the one returned. (t2t waited until it could not beat the worst of the K
        finished ones, which it could return too; the returned best is the same.)"""
        best_alive = alive_log_probs[:, 0] / length_penalty(limits, alpha)
        best_finished = tf.where(finished_flags[:, 0], finished_scores[:, 0], NEG_INF)
        return best_finished > best_alive

    # `searched` [b]: the sentences still searched, whose rows the alive and finished tensors,
    # `done`, `ended` (with stop_after_finished: how many of their K best candidates have ended
    # so far) and the decoder's rows (b of them, b * K in the self-attention caches) hold;
    # `results` holds every sentence's finished sequences, scores and flags.
    def step(t, searched, done, ended, alive_seq, alive_log_probs, finished_seq,
             finished_scores, finished_flags, results, rows, first=False):
        """One search step; `first`: the step at position 0, whose decoder rows are one per
        sentence (the K beams' would be equal), tiled to K beams after it."""
        b = tf.shape(searched)[0]
        searched_limits = tf.gather(limits, searched)
        logits, rows = decoder.logits(alive_seq[:, 0] if first else _flatten_beams(alive_seq),
                                      t, rows)
        # 2K candidates: even if K of them end with EOS, K stay alive. They are the top 2K of
        # the K beams' best 2K tokens each (the top 2K of all K * V, in the same order).
        beam_log_probs, beam_tokens = block_top_k(tf.nn.log_softmax(logits), per_beam)
        if first:
            beam_log_probs, beam_tokens = (_tile_beams(tensor, beam_size)
                                           for tensor in (beam_log_probs, beam_tokens))
            rows = decoder.map_self_attention_caches(
                lambda tensor: _tile_beams(tensor, beam_size), rows)
        candidate_log_probs = (_merge_beams(beam_log_probs, b, beam_size)
                               + alive_log_probs[:, :, tf.newaxis])  # [b, K, 2K]
        top_log_probs, top_indices = tf.math.top_k(
            tf.reshape(candidate_log_probs, [b, beam_size * per_beam]), k=2 * beam_size)
        beam_indices = top_indices // per_beam
        token_ids = tf.gather(tf.reshape(beam_tokens, [b, beam_size * per_beam]),
                              top_indices, batch_dims=1)
        top_seq = gather_beams(alive_seq, beam_indices)
        top_seq = tf.where(positions == t + 1, token_ids[:, :, tf.newaxis], top_seq)
        # A candidate ends with EOS, or by reaching its input's length limit.
        ends = tf.equal(token_ids, EOS_ID) | (t + 1 >= searched_limits)[:, tf.newaxis]

        # Alive: the best K candidates that did not end.
        alive_candidates = top_log_probs + tf.cast(ends, tf.float32) * NEG_INF
        _, alive_choice = tf.math.top_k(alive_candidates, k=beam_size)
        alive_seq = gather_beams(top_seq, alive_choice)
        alive_log_probs = gather_beams(alive_candidates, alive_choice)
        parents = gather_beams(beam_indices, alive_choice)  # [b, K]: the beam each continues

        # Finished: the best K of the old finished ones and the candidates that ended now.
        scores = top_log_probs / length_penalty(t + 1, alpha)
        scores += (1.0 - tf.cast(ends, tf.float32)) * NEG_INF
        all_seq = tf.concat([finished_seq, top_seq], axis=1)
        all_scores = tf.concat([finished_scores, scores], axis=1)
        all_flags = tf.concat([finished_flags, ends], axis=1)
        finished_scores, finished_choice = tf.math.top_k(all_scores, k=beam_size)
        finished_seq = gather_beams(all_seq, finished_choice)
        finished_flags = gather_beams(all_flags, finished_choice)
        updates = (finished_seq, finished_scores, finished_flags)
        if fixed_shapes:  # every sentence stays; those done before keep their results
            updates = tuple(tf.where(tf.reshape(done, [-1] + [1] * (update.shape.rank - 1)),
                                     tf.gather(result, searched), update)
                            for result, update in zip(results, updates))
        results = tuple(tf.tensor_scatter_nd_update(result, searched[:, tf.newaxis], update)
                        for result, update in zip(results, updates))
        done |= bound_met(alive_log_probs, finished_scores, finished_flags, searched_limits)
        if stop_after_finished:  # else `ended` stays 0: no count in the default's steps
            ended += tf.reduce_sum(tf.cast(ends[:, :beam_size], tf.int32), axis=1)
            done |= ended >= stop_after_finished

        if fixed_shapes:
            kept = tf.range(b)
        else:
            kept = _still_searched(done)
            searched, done, ended, alive_seq, alive_log_probs, finished_seq, finished_scores, \
                finished_flags = (tf.gather(tensor, kept) for tensor in (
                    searched, done, ended, alive_seq, alive_log_probs, finished_seq,
                    finished_scores, finished_flags))
        kept_beams = kept[:, tf.newaxis] * beam_size
        rows = decoder.follow(rows, _flatten_beams(kept_beams + tf.gather(parents, kept)), kept,
                              None if fixed_shapes else tf.size(kept) < b)
        return (t + 1, searched, done, ended, alive_seq, alive_log_probs, finished_seq,
                finished_scores, finished_flags, results, rows)

    def not_done(t, searched, done, *unused_state):
        return tf.logical_and(t < max_length, tf.logical_not(tf.reduce_all(done)))

    state = (tf.constant(0), tf.range(batch_size), tf.zeros([batch_size], tf.bool),
             tf.zeros([batch_size], tf.int32), alive_seq, alive_log_probs, finished_seq,
             finished_scores, finished_flags,
             (finished_seq, finished_scores, finished_flags), decoder.rows)
    state = step(*state, first=True)
    (_, searched, _, _, alive_seq, alive_log_probs, _, _, _,
     (finished_seq, finished_scores, finished_flags), _) = _loop(decoder, not_done, step, state)
    # Sentences searched to the last step without a finished sequence: their best alive one.
    best_alive_seq = tf.scatter_nd(searched[:, tf.newaxis], alive_seq[:, 0],
                                   [batch_size, length])
    best_alive_score = tf.scatter_nd(
        searched[:, tf.newaxis],
        alive_log_probs[:, 0] / length_penalty(tf.gather(limits, searched), alpha),
        [batch_size])
    any_finished = tf.reduce_any(finished_flags, axis=1)
    best_seq = tf.where(any_finished[:, tf.newaxis], finished_seq[:, 0], best_alive_seq)
    best_score = tf.where(any_finished, finished_scores[:, 0], best_alive_score)
    return best_seq[:, 1:], best_score


def search(model, inputs, search_hparams: SearchHParams, fixed_shapes: bool = False):
    """The search search_hparams asks for: beam search, or greedy search for beam_size 1.
    fixed_shapes for a search compiled with XLA (the caller's jit_compile)."""
    hp = search_hparams
    with model.step_kernels():  # the decoder's kernels laid out for steps, once per search
        if hp.beam_size > 1:
            return beam_search(model, inputs, hp.beam_size, hp.alpha, hp.extra_length,
                               hp.use_cache, fixed_shapes=fixed_shapes,
                               stop_after_finished=hp.stop_after_finished)
        return greedy_search(model, inputs, hp.extra_length, hp.use_cache,
                             fixed_shapes=fixed_shapes)
