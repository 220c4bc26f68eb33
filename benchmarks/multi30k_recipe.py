"""The whole Multi30k example, timed, with its dev BLEU curve over training time
(benchmarks/README.md, multi30k_recipe.py).

  python benchmarks/multi30k_recipe.py --work_dir=W [--data_dir=D] [--train_minutes=30]
      [--t2t_lite_schedule=WARMUP,PEAK] [--bleu_every_minutes=3] [--output_json=F]

Datagen; transformer_small for --train_minutes (the trainer's time budget) or --train_steps,
with no evaluation while it trains and the weights written apart every --bleu_every_minutes
(`CurveCheckpoints`); the last --average_last checkpoints averaged (paper §6.1) and
test_2016_flickr decoded with beam 4, alpha 0.6 and scored by sacreBLEU; then each curve
checkpoint's greedy dev BLEU, drawn beside the JSON. The schedule is t2t's warmup / rsqrt decay
given as (warmup, peak): constant = peak * sqrt(warmup) * sqrt(hidden_size).
"""
import math
import os
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry
common.load_tensorflow()  # the programs' start: a quiet TensorFlow

import harness  # noqa: E402  (benchmarks/, beside this script)
from harness import HPARAMS_SET, PROBLEM  # noqa: E402

import keras  # noqa: E402  (after common: its quiet start)
import tensorflow as tf  # noqa: E402

from t2t_lite import checkpoints  # noqa: E402
from t2t_lite.decoding import decoder, output_files  # noqa: E402
from t2t_lite.models import restoring  # noqa: E402
from t2t_lite.decoding.dev_bleu import first_dev_pairs  # noqa: E402
from t2t_lite.decoding.search import SearchHParams  # noqa: E402
from t2t_lite.models.building import build_model  # noqa: E402
from t2t_lite.training import averaging, trainer  # noqa: E402

flags.DEFINE_string("work_dir", None, "Folder of the model and outputs (and of the data "
                    "unless --data_dir).")
harness.define_data_flags(flags, test_sentences=True)
flags.DEFINE_integer("train_steps", 100_000, "Stop training after this many updates.",
                     lower_bound=1)
flags.DEFINE_float("train_minutes", 30, "Stop training after this many minutes (0: no limit).")
flags.DEFINE_string("t2t_lite_schedule", "400,1.5625e-3", "WARMUP,PEAK learning rate (constant "
                    "0.5: a 30-minute CPU run makes a few hundred updates).")
flags.DEFINE_string("hparams", "", "Other overrides of transformer_small.")
flags.DEFINE_integer("save_every", 100, "Updates between checkpoints.", lower_bound=1)
flags.DEFINE_integer("average_last", 3, "Checkpoints averaged before decoding.", lower_bound=1)
flags.DEFINE_float("bleu_every_minutes", 3, "Minutes of training between the checkpoints of "
                   "the dev BLEU curve (0: its last point only).")
flags.DEFINE_integer("bleu_sentences", 100, "Dev sentences of the dev BLEU curve.", lower_bound=1)
flags.DEFINE_boolean("jit_compile", None, "Train with XLA (default: only where a GPU is visible).")
flags.DEFINE_string("output_json", None, "The results (default W/recipe.json); the picture of "
                    "the curve goes beside it (.png).")
common.define_thread_flags()
flags.mark_flags_as_required(["work_dir"])


class CurveCheckpoints(keras.callbacks.Callback):
    """Every `every_minutes` of training (from `on_train_begin`, read after each update) and after
    the last update, the model's weights (no optimizer state) in `curve_dir/model.ckpt-STEP`;
    `points` holds {step, seconds, path} of each, also written to `curve_dir/curve.json`."""

    def __init__(self, every_minutes: float, curve_dir: str):
        super().__init__()
        self.every, self.curve_dir, self.points = every_minutes * 60, curve_dir, []
        self.start = self.last_update = self.manager = self.next_save = None

    def on_train_begin(self, logs=None):  # every 0: the last update's point only
        self.start = self.last_update = time.time()
        self.next_save = self.every or math.inf
        self.manager = checkpoints.make_manager(self.curve_dir, self.model, max_to_keep=None)

    def on_train_batch_end(self, batch, logs=None):
        self.last_update = time.time()
        elapsed = self.last_update - self.start
        if elapsed >= self.next_save:
            self._save(elapsed)
            while self.next_save <= elapsed:
                self.next_save += self.every

    def on_train_end(self, logs=None):
        self._save(self.last_update - self.start)

    def _save(self, seconds: float):
        step = int(self.model.optimizer.iterations.numpy())
        if not self.points or self.points[-1]["step"] != step:
            path = self.manager.save(checkpoint_number=step)
            self.points.append({"step": step, "seconds": round(seconds, 2), "path": path})
            harness.write_json(os.path.join(self.curve_dir, "curve.json"), self.points,
                               announce=False)


def dev_bleu_curve(points: list, problem, hparams, data_dir: str) -> list:
    """Each curve checkpoint's greedy translations of the first --bleu_sentences dev sentences
    (the decoder's Translator, as the trainer's DevBleu) scored with sacreBLEU: the points with
    `bleu` added. One model, each checkpoint restored into it: the search is traced once."""
    sources, references = first_dev_pairs(problem, data_dir, FLAGS.bleu_sentences)
    model = build_model("transformer", hparams, problem.vocab_size(data_dir))
    translator = decoder.Translator(model, problem.feature_encoders(data_dir),
                                    SearchHParams(beam_size=1), problem.max_length)
    scored = []
    for point in points:
        checkpoints.restore(point["path"], model)
        scores = decoder.score(translator.translate(sources, show_progress=False), references)
        scored.append({**point, "bleu": scores["bleu"], "bleu_signature": scores["bleu_signature"]})
    return scored


def draw_curve(points: list, path: str, title: str):
    """Dev BLEU against training minutes, as a PNG."""
    plot = harness.pyplot()
    figure, axes = plot.subplots(figsize=(7, 4.5), dpi=110)
    axes.plot([p["seconds"] / 60 for p in points], [p["bleu"] for p in points], marker="o")
    axes.set(xlabel="training minutes (from the start of the training loop)",
             ylabel="dev BLEU (greedy)", xlim=(0, None), ylim=(0, None))
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    harness.save_figure(figure, path)
    plot.close(figure)


def main(unused_argv):
    common.set_threads_from_flags()
    if "learning_rate" in FLAGS.hparams:
        raise ValueError("--hparams: give the schedule as --t2t_lite_schedule=WARMUP,PEAK")
    data_dir = FLAGS.data_dir or os.path.join(FLAGS.work_dir, "data")
    output_dir = os.path.join(FLAGS.work_dir, "t2t_lite")
    output_json = FLAGS.output_json or os.path.join(FLAGS.work_dir, "recipe.json")
    problem, start = registry.problem(PROBLEM), time.time()
    problem.generate_data(data_dir, FLAGS.tmp_dir)
    hparams = registry.hparams(HPARAMS_SET).override_from_string(FLAGS.hparams or "")
    warmup, peak = harness.parse_schedule(FLAGS.t2t_lite_schedule)
    hparams = hparams.replace(learning_rate_warmup_steps=warmup, learning_rate_constant=(
        harness.learning_rate_constant(warmup, peak, hparams.hidden_size)))
    jit_compile = FLAGS.jit_compile if FLAGS.jit_compile is not None else trainer.xla_pays(
        tf.distribute.get_strategy())
    report = {"machine": harness.machine(), "datagen_seconds": time.time() - start,
              **{name: FLAGS[name].value for name in ("train_minutes", "train_steps",
                                                       "t2t_lite_schedule", "hparams")},
              "hparams_set": HPARAMS_SET, "xla": jit_compile, "warmup_steps": warmup,
              "learning_rate_constant": hparams.learning_rate_constant,
              harness.ONEDNN: os.environ.get(harness.ONEDNN)}

    curve = CurveCheckpoints(FLAGS.bleu_every_minutes, os.path.join(output_dir, "curve"))
    start = time.time()
    trainer.train(PROBLEM, "transformer", hparams, data_dir, output_dir, trainer.RunConfig(
        train_steps=FLAGS.train_steps, train_minutes=FLAGS.train_minutes,
        eval_every=FLAGS.train_steps, eval_steps=0, save_checkpoints_steps=FLAGS.save_every,
        keep_checkpoint_max=max(FLAGS.average_last, 5), log_every_steps=25,
        jit_compile=jit_compile), callbacks=[curve])
    latest = tf.train.latest_checkpoint(output_dir)
    report.update(train_seconds=time.time() - start, steps=int(latest.rsplit("-", 1)[1]),
                  train_loop_seconds=curve.last_update - curve.start)

    start = time.time()
    averaged = os.path.join(output_dir, harness.AVERAGED)
    available = len(tf.train.get_checkpoint_state(output_dir).all_model_checkpoint_paths)
    report["averaged_checkpoints"] = min(FLAGS.average_last, available)
    averaging.average_checkpoints(output_dir, report["averaged_checkpoints"], averaged)
    report["average_seconds"], start = time.time() - start, time.time()
    sources, references = (decoder.read_sentences(path)[:FLAGS.test_sentences or None]
                           for path in problem.text_paths(data_dir, "test").values())
    model = restoring.load_model("transformer", hparams, problem.vocab_size(data_dir),
                                 output_dir, averaged)
    hypotheses = decoder.Translator(model, problem.feature_encoders(data_dir),
                                    SearchHParams(beam_size=4, alpha=0.6),
                                    problem.max_length).translate(sources)
    output_files.write_lines(os.path.join(output_dir, "test_2016_flickr.beam4.en"), hypotheses)
    scores = decoder.score(hypotheses, references)
    report.update(decode_seconds=time.time() - start, bleu=scores["bleu"],
                  bleu_signature=scores["bleu_signature"])
    start = time.time()
    report["dev_bleu_curve"] = dev_bleu_curve(curve.points, problem, hparams, data_dir)
    report["dev_bleu_seconds"] = time.time() - start

    print(f"\n{HPARAMS_SET} on {PROBLEM}; {harness.machine_line(report['machine'])}; warmup "
          f"{warmup}, peak {peak:g}; {report['steps']} updates in "
          f"{report['train_loop_seconds'] / 60:.1f} min of training")
    print(f"test BLEU {scores['bleu']:.2f}: the last {report['averaged_checkpoints']} "
          f"checkpoints averaged, beam 4, alpha 0.6, test_2016_flickr ({len(sources):,} "
          f"sentences), {scores['bleu_signature']}")
    print(f"dev BLEU (greedy, first {FLAGS.bleu_sentences} dev sentences) over training time: "
          + "  ".join(f"{p['seconds'] / 60:.1f} min {p['bleu']:.2f}"
                      for p in report["dev_bleu_curve"]))
    report["picture"] = os.path.splitext(output_json)[0] + ".png"
    draw_curve(report["dev_bleu_curve"], report["picture"], f"{HPARAMS_SET} on Multi30k de-en, "
               f"{FLAGS.train_minutes:g} min of training; greedy, first {FLAGS.bleu_sentences} "
               "dev sentences")
    print(f"picture: {report['picture']}")
    harness.write_json(output_json, report)


if __name__ == "__main__":
    harness.run_main(main)
