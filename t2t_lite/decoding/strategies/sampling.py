"""Random sampling (CTranslate2's sampling_topk, sampling_temperature and sampling_topp,
keras-hub's TopKSampler and TopPSampler), over greedy search's rows."""
import tensorflow as tf

from t2t_lite.decoding.strategies.greedy import RowStrategy
from t2t_lite.keyed_random import hashed_uniform
from t2t_lite.layers.attention import NEG_INF


class SamplingStrategy(RowStrategy):
    """Each token drawn from softmax(logits / temperature) over the `topk` most probable (0:
    every token), and of those the fewest most probable whose probability reaches `topp`
    (nucleus sampling; CTranslate2's order: top-k, temperature, top-p), `num_samples` samples
    per input, by the Gumbel-max trick: its noise a function of the input's seed (`seed`
    int32 [B, 2], or [2] for every input: the decoder's are the run's seed and the line's
    index), the sample's number, the step and the piece's rank (`hashed_uniform`), so that a
    line's samples are the same in any batch, with fixed shapes or a shrinking batch.
    Tokens of ~NEG_INF log probability are never drawn."""
    name, samples = "sampling", True
    settings = ("sampling_topk", "sampling_temperature", "sampling_topp")
    implies, ctranslate2_lacks = {"beam_size": 1}, ()
    help = ("sampling_topk=K samples among the K most probable pieces (0: all; 1: no "
            "sampling) of logits / sampling_temperature; sampling_topp=P among those, the "
            "fewest most probable whose probability reaches P")

    def __init__(self, topk, temperature, num_samples, seed, topp=1.0):
        self.topk, self.temperature, self.topp = topk, temperature, topp
        self.rows_per_input, self.seed = num_samples, seed

    @staticmethod
    def chosen(settings):
        return settings["sampling_topk"] != 1

    @classmethod
    def of_hparams(cls, hp, seed, with_log_probs):
        if seed is None:
            raise ValueError("sampling (sampling_topk != 1) needs a seed: int32 [B, 2] or [2]")
        return cls(hp.sampling_topk, hp.sampling_temperature, hp.num_hypotheses,
                   tf.convert_to_tensor(seed, tf.int32), hp.sampling_topp)

    @staticmethod
    def ctranslate2(hp):
        return {"beam_size": 1, "length_penalty": 0.0, "sampling_topk": hp.sampling_topk,
                "sampling_temperature": hp.sampling_temperature,
                "sampling_topp": hp.sampling_topp}

    @staticmethod
    def n_best(settings):
        return 1

    def pick(self, logits, log_probs, position, sentence, run):
        values, tokens = log_probs, None
        if self.topk > 0 or self.topp < 1:  # top-p reads them sorted
            width = log_probs.shape[-1]
            values, tokens = tf.math.top_k(log_probs, k=min(self.topk or width, width))
        # Gumbel noise [n, width] of each row's (seed of its input, sample, step).
        inputs = tf.shape(run.limits)[0] // self.rows_per_input
        seeds = tf.gather(tf.broadcast_to(self.seed, [inputs, 2]),
                          sentence // self.rows_per_input)
        keys = tf.concat([seeds, tf.stack([sentence % self.rows_per_input,
                                           tf.fill(tf.shape(sentence), position)], axis=1)], 1)
        gumbel = -tf.math.log(-tf.math.log(hashed_uniform(keys, tf.shape(values)[1])))
        scaled = tf.where(values > NEG_INF / 2, values / self.temperature, -float("inf"))
        if self.topp < 1:  # a piece stays if the more probable ones hold less than topp
            before = tf.math.cumsum(tf.nn.softmax(scaled), axis=-1, exclusive=True)
            scaled = tf.where(before < self.topp, scaled, -float("inf"))
        choice = tf.argmax(scaled + gumbel, axis=-1, output_type=tf.int32)
        return choice if tokens is None else tf.gather(tokens, choice, batch_dims=1)
