"""sacreBLEU on a dev subset during training, decoded by the current model.

tensor2tensor reported `approx_bleu` on subword ids, which users mistook for real BLEU; this
callback decodes the first dev sentences to text with the same Translator the decoder uses and
scores them with sacreBLEU against the detokenized references, after every evaluation.
"""
import keras
import tensorflow as tf
from absl import logging

from t2t_lite.data import pipeline
from t2t_lite.data.problem import DEV
from t2t_lite.decoding.decoder import Translator, score
from t2t_lite.decoding.search import SearchHParams


def first_dev_pairs(problem, data_dir: str, count: int) -> tuple:
    """(sources, references): the first `count` pairs of the dev split in datagen's order, as
    text. The trainer's dev BLEU and the benchmarks' (race.py, multi30k_recipe.py) take these."""
    encoders = problem.feature_encoders(data_dir)
    examples = pipeline.read_examples(problem.filepattern(data_dir, DEV),
                                      shuffle_files=False).take(count)
    pairs = [(encoders["inputs"].decode(example["inputs"]),
              encoders["targets"].decode(example["targets"]))
             for example in examples.as_numpy_iterator()]
    return [source for source, _ in pairs], [reference for _, reference in pairs]


class DevBleu(keras.callbacks.Callback):
    """At each evaluation: greedy translations of the first `num_sentences` dev sentences by
    the model being trained, their sacreBLEU in the log, as `bleu` under `output_dir/eval` in
    TensorBoard, and as `val_bleu` in the evaluation's logs (for best-keeping and early
    stopping: training.best). A dev metric of the training loop (training.loop.DevMetric's
    interface: `names`, `measure(model, step)`)."""

    names = ("val_bleu",)

    def __init__(self, problem, data_dir: str, output_dir: str, num_sentences: int = 100):
        super().__init__()
        self.problem = problem
        self.data_dir = data_dir
        self.output_dir = output_dir
        self.num_sentences = num_sentences
        self.translator = self.translator_model = None

    def on_train_begin(self, logs=None):
        """Reads the dev sentences and opens the summary writer once training starts, after the
        trainer has checked its inputs and locked output_dir."""
        self.encoders = self.problem.feature_encoders(self.data_dir)
        self.sources, self.references = first_dev_pairs(self.problem, self.data_dir,
                                                         self.num_sentences)
        self.writer = tf.summary.create_file_writer(tf.io.gfile.join(self.output_dir, "eval"))

    def measure(self, model, step: int) -> dict:
        """{"val_bleu": sacreBLEU of `model`'s greedy translations}, logged at `step`."""
        if self.translator is None or self.translator_model is not model:
            self.translator = Translator(model, self.encoders, SearchHParams(beam_size=1))
            self.translator_model = model
        hypotheses = self.translator.translate(self.sources, show_progress=False)
        scores = score(hypotheses, self.references)
        logging.info("step %d  dev %s (greedy, %d sentences; %s)", step, scores["bleu_text"],
                     len(self.sources), scores["bleu_signature"])
        with self.writer.as_default(step=step):
            tf.summary.scalar("bleu", scores["bleu"])
        self.writer.flush()
        return {"val_bleu": float(scores["bleu"])}
