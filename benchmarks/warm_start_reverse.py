"""Updates to reach an exact-match target on algorithmic_reverse, fine-tuned from a copy model
(t2t_lite-trainer's --warm_start_from) against the same training from scratch
(docs/training.md, "Fine-tuning from a trained model").

  python benchmarks/warm_start_reverse.py --work_dir=W [--copy_dir=O] [--eval_every=50]
      [--target=0.95] [--max_steps=3000] [--output_json=F]

The copy model (algorithmic_copy, trained here until it copies --target of its dev sentences,
unless --copy_dir names a trained one) is fine-tuned on algorithmic_reverse, and the same
model is trained on it from scratch with the same hparams and seed; every --eval_every updates
each greedily decodes the first --eval_sentences reverse dev sentences and stops once their
exact match (decoder.exact_match, the decoder's "exact match") reaches --target. It trains
in-process through trainer.train, its checks and checkpoints included.
"""
import json
import os
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags
common.load_tensorflow()  # the programs' start: a quiet TensorFlow

import harness  # noqa: E402  (benchmarks/, beside this script)

import keras  # noqa: E402  (after common: its quiet start)

from t2t_lite import registry  # noqa: E402
from t2t_lite.decoding.decoder import Translator, exact_match  # noqa: E402
from t2t_lite.decoding.dev_bleu import first_dev_pairs  # noqa: E402
from t2t_lite.decoding.search import SearchHParams  # noqa: E402
from t2t_lite.training import trainer  # noqa: E402
from t2t_lite.training.loop import DevMetric  # noqa: E402

HPARAMS = ("hidden_size=64,filter_size=256,num_heads=4,num_hidden_layers=2,batch_size=1024,"
           "max_length=22,min_length_bucket=22,learning_rate_constant=1.0,"
           "learning_rate_warmup_steps=200,layer_prepostprocess_dropout=0,attention_dropout=0,"
           "relu_dropout=0")

flags.DEFINE_string("work_dir", None, "Folder of the data and the runs.")
flags.DEFINE_string("copy_dir", None, "A trained algorithmic_copy --output_dir to fine-tune "
                    "(default: one trained here, in W/copy).")
flags.DEFINE_string("hparams_set", "transformer_tiny", "The hparams set of every run.")
flags.DEFINE_string("hparams", HPARAMS, "Overrides of every run.")
flags.DEFINE_integer("train_samples", 20_000, "Training sequences of each problem.",
                     lower_bound=1)
flags.DEFINE_integer("eval_sentences", 200, "Dev sentences decoded at each evaluation.",
                     lower_bound=1)
flags.DEFINE_integer("eval_every", 50, "Updates between evaluations.", lower_bound=1)
flags.DEFINE_float("target", 0.95, "The exact match that ends a run.")
flags.DEFINE_integer("max_steps", 3000, "Updates after which a run ends anyway.", lower_bound=1)
flags.DEFINE_integer("seed", 1, "Seed of every run.")
flags.DEFINE_string("output_json", None, "Where to write the results.")
flags.mark_flags_as_required(["work_dir"])


class ExactMatchStop(DevMetric):
    """A dev metric of the training loop: at each evaluation, greedy translations of the dev
    sentences by the model being trained and their exact match (`val_exact_match`, in a
    progress line); decides from it to stop training once it reaches `target` (the step is
    `reached_at`)."""

    names = ("val_exact_match",)

    def __init__(self, label: str, problem, data_dir: str, count: int, target: float):
        super().__init__()
        self.label, self.target = label, target
        self.encoders = problem.feature_encoders(data_dir)
        self.sources, self.references = first_dev_pairs(problem, data_dir, count)
        self.curve, self.reached_at, self.start = [], None, time.time()
        self.translator = None

    def measure(self, model, step: int) -> dict:
        if self.translator is None:  # one run, one model: its search traced once
            self.translator = Translator(model, self.encoders, SearchHParams(beam_size=1))
        matched = exact_match(self.translator.translate(self.sources, show_progress=False),
                              self.references)
        self.curve.append((step, matched))
        print(f"{self.label}: step {step}  exact match {100 * matched:.1f}% "
              f"({len(self.sources)} dev sentences)  {time.time() - self.start:.0f} s",
              flush=True)
        return {"val_exact_match": matched}

    def on_epoch_end(self, epoch, logs=None):
        if logs and logs.get("val_exact_match", 0.0) >= self.target:
            self.reached_at = int(self.model.optimizer.iterations.numpy())
            self.model.stop_training = True


def generated(problem_name: str, data_dir: str):
    """The problem's records in data_dir (FLAGS.train_samples training sequences), made once."""
    problem = registry.problem(problem_name)
    if not os.path.exists(os.path.join(data_dir, f"{problem_name}-train.manifest.json")):
        problem.num_samples = {**problem.num_samples, "train": FLAGS.train_samples}
        problem.generate_data(data_dir, data_dir)
    return problem


def train_until(label: str, problem_name: str, data_dir: str, output_dir: str,
                warm_start_from: str = None) -> ExactMatchStop:
    """Trains until the dev exact match reaches FLAGS.target or FLAGS.max_steps updates."""
    problem = generated(problem_name, data_dir)
    hparams = registry.hparams(FLAGS.hparams_set).override_from_string(FLAGS.hparams)
    watch = ExactMatchStop(label, problem, data_dir, FLAGS.eval_sentences, FLAGS.target)
    config = trainer.RunConfig(train_steps=FLAGS.max_steps, eval_every=FLAGS.eval_every,
                               eval_steps=1, save_checkpoints_steps=FLAGS.max_steps,
                               log_every_steps=FLAGS.max_steps, seed=FLAGS.seed,
                               warm_start_from=warm_start_from)
    keras.backend.clear_session()  # each run names its variables as a process of its own
    trainer.train(problem_name, "transformer", hparams, data_dir, output_dir, config, [watch])
    return watch


def main(unused_argv):
    work = FLAGS.work_dir
    start = time.time()
    copy_dir = FLAGS.copy_dir
    report = {"machine": harness.machine(), "hparams_set": FLAGS.hparams_set,
              "hparams": FLAGS.hparams, "target": FLAGS.target, "eval_every": FLAGS.eval_every}
    if copy_dir is None:
        copy_dir = os.path.join(work, "copy")
        copied = train_until("copy", "algorithmic_copy", os.path.join(work, "copy_data"),
                             copy_dir)
        report["copy_updates"] = copied.reached_at
    reverse_data = os.path.join(work, "reverse_data")
    runs = {"warm start": train_until("reverse from copy", "algorithmic_reverse", reverse_data,
                                      os.path.join(work, "reverse_warm"), copy_dir),
            "from scratch": train_until("reverse from scratch", "algorithmic_reverse",
                                        reverse_data, os.path.join(work, "reverse_scratch"))}
    print(f"\nupdates to {100 * FLAGS.target:g}% exact match on algorithmic_reverse "
          f"({FLAGS.eval_sentences} dev sentences, every {FLAGS.eval_every} updates; "
          f"{harness.machine_line(report['machine'])}):")
    for name, run in runs.items():
        reached = run.reached_at or f"not within {FLAGS.max_steps}"
        print(f"  {name:13s} {reached}")
        report[name.replace(" ", "_")] = {"updates": run.reached_at, "curve": run.curve}
    report["seconds"] = time.time() - start
    print(f"{report['seconds']:.0f} s in all")
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    harness.run_main(main)
