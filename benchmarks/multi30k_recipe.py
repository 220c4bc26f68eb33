"""The whole Multi30k example, timed: datagen, training, averaging, beam search, sacreBLEU.

  python benchmarks/multi30k_recipe.py --work_dir=W [--train_minutes=30 | --train_steps=N]
      [--compare] [--output_json=F]

1. `translate_multi30k_deen` into W/data (from the raw files in --tmp_dir; kept if there).
2. `transformer_small` (the comparison configuration) trained into W/t2t_lite for
   --train_steps updates or --train_minutes of training, whichever comes first, with the
   recipe's schedule (--hparams), a checkpoint every --save_every updates.
3. The last --average_last checkpoints averaged (paper §6.1).
4. test_2016_flickr decoded with beam 4, alpha 0.6 (paper §6.1) and scored with sacreBLEU.

Prints BLEU (with its signature), the wall time of each stage and the steps reached; with
--compare, runs the OpenNMT-tf peer (benchmarks/peers/opennmt_tf) with the same data,
configuration, schedule and time budget next, and prints both rows.

Why these defaults (this data is small and a CPU run is short):
- warmup 400 updates instead of the paper's 4000 (or t2t's 8000): a 30-minute CPU run makes a
  few hundred to a thousand updates, and would end still warming up;
- learning_rate_constant 0.5, a peak rate of 0.5 * 400^-0.5 * 256^-0.5 = 1.6e-3: a peak near
  4e-3 (t2t's transformer_base schedule with d_model 256 and a short warmup) left a peer stuck
  at a loss near 5 for 1,000 steps;
- averaging the last 3 checkpoints, 100 updates apart: the paper averaged the last 5 of
  checkpoints 10 minutes apart; at a few hundred updates, older checkpoints are much worse;
- XLA only where a GPU is visible: on a CPU it compiles each of Multi30k's ~18 bucket shapes
  (10-15 s each, minutes of a 30-minute budget) and then runs no faster (benchmarks/README.md,
  train_speed); the peer trains without XLA too.
"""
import json
import os
import subprocess
import sys
import time

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry

import reporting  # noqa: E402  (benchmarks/reporting.py, beside this script)

import keras  # noqa: E402  (after common: its quiet start)
import tensorflow as tf  # noqa: E402
from absl import logging  # noqa: E402

from t2t_lite.decoding import decoder  # noqa: E402
from t2t_lite.training import averaging, trainer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TMP_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))
PEER = os.path.join(REPO, "benchmarks", "peers", "opennmt_tf", "run.py")
PROBLEM = "translate_multi30k_deen"
HPARAMS_SET = "transformer_small"
WARMUP, CONSTANT = 400, 0.5

flags.DEFINE_string("work_dir", None, "Folder of the data, models and outputs.")
flags.DEFINE_string("tmp_dir", DEFAULT_TMP_DIR, "Folder of the raw Multi30k files.")
flags.DEFINE_integer("train_steps", 100_000, "Stop training after this many updates.")
flags.DEFINE_float("train_minutes", 30, "Stop training after this many minutes (0: no limit).")
flags.DEFINE_string("hparams", f"learning_rate_warmup_steps={WARMUP},"
                    f"learning_rate_constant={CONSTANT}", "Overrides of transformer_small.")
flags.DEFINE_integer("save_every", 100, "Updates between checkpoints.")
flags.DEFINE_integer("average_last", 3, "Checkpoints averaged before decoding.")
flags.DEFINE_boolean("jit_compile", None, "Train with XLA (default: only where a GPU is "
                     "visible; see above).")
flags.DEFINE_integer("test_sentences", 0, "Decode only the first this many test sentences (0: "
                     "all 1,000; fewer only for a quick check, not for a result).")
flags.DEFINE_boolean("compare", False, "Also run the OpenNMT-tf peer with the same budget.")
flags.DEFINE_string("output_json", None, "Write the results to this JSON file.")
flags.mark_flags_as_required(["work_dir"])


class TimeLimit(keras.callbacks.Callback):
    """Stops training after `minutes` of it (the trainer then saves a last checkpoint)."""

    def __init__(self, minutes: float):
        super().__init__()
        self.seconds = minutes * 60
        self.start = None

    def on_train_begin(self, logs=None):
        self.start = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds and time.time() - self.start > self.seconds:
            self.model.stop_training = True


def use_xla() -> bool:
    if FLAGS.jit_compile is not None:
        return FLAGS.jit_compile
    return bool(tf.config.list_physical_devices("GPU"))


def run_t2t_lite(problem, data_dir, output_dir):
    times = {}
    start = time.time()
    hparams = registry.hparams(HPARAMS_SET).override_from_string(FLAGS.hparams)
    trainer.train(PROBLEM, "transformer", hparams, data_dir, output_dir,
                  trainer.RunConfig(train_steps=FLAGS.train_steps, eval_every=FLAGS.save_every * 5,
                                    eval_steps=20, save_checkpoints_steps=FLAGS.save_every,
                                    keep_checkpoint_max=max(FLAGS.average_last, 5),
                                    log_every_steps=25, jit_compile=use_xla()),
                  callbacks=[TimeLimit(FLAGS.train_minutes)] if FLAGS.train_minutes else [])
    times["train_seconds"] = time.time() - start
    steps = int(tf.train.latest_checkpoint(output_dir).rsplit("-", 1)[1])

    start = time.time()
    averaged = os.path.join(output_dir, "averaged", "model.ckpt")
    available = len(tf.train.get_checkpoint_state(output_dir).all_model_checkpoint_paths)
    averaging.average_checkpoints(output_dir, min(FLAGS.average_last, available), averaged)
    times["average_seconds"] = time.time() - start

    start = time.time()
    paths = problem.text_paths(data_dir, "test")
    sources, references = (decoder.read_lines(paths[name])[:FLAGS.test_sentences or None]
                           for name in ("inputs", "targets"))
    model = decoder.load_model("transformer", hparams, problem.vocab_size(data_dir), output_dir,
                               averaged)
    translator = decoder.Translator(model, problem.feature_encoders(data_dir),
                                    decoder.DecodeHParams(beam_size=4, alpha=0.6),
                                    problem.max_length)
    hypotheses = translator.translate(sources)
    decoder.write_lines(os.path.join(output_dir, "test_2016_flickr.beam4.en"), hypotheses)
    times["decode_seconds"] = time.time() - start
    scores = decoder.score(hypotheses, references)
    return {"toolkit": f"t2t_lite (TF {tf.__version__}, Keras {keras.__version__})",
            "steps": steps, "bleu": scores["bleu"], "bleu_signature": scores["bleu_signature"],
            "averaged_checkpoints": min(FLAGS.average_last, available), "xla": use_xla(),
            **times}


def run_peer(data_dir):
    """The OpenNMT-tf row, or None (with the reason printed) if the peer cannot run here."""
    json_path = os.path.join(FLAGS.work_dir, "opennmt_tf.json")
    command = [sys.executable, PEER, f"--data_dir={data_dir}", f"--tmp_dir={FLAGS.tmp_dir}",
               f"--work_dir={os.path.join(FLAGS.work_dir, 'opennmt_tf')}",
               f"--train_steps={FLAGS.train_steps}", f"--train_minutes={FLAGS.train_minutes}",
               f"--warmup_steps={WARMUP}", f"--learning_rate_constant={CONSTANT}",
               f"--save_every={FLAGS.save_every}", f"--average_last={FLAGS.average_last}",
               f"--test_sentences={FLAGS.test_sentences}", "--decode",
               f"--output_json={json_path}"]
    result = subprocess.run(command)
    if result.returncode:
        print(f"OpenNMT-tf peer did not run (exit status {result.returncode}); see above")
        return None
    with open(json_path, encoding="utf-8") as handle:
        return json.load(handle)


def print_table(rows):
    header = f"{'toolkit':<44}{'steps':>7}{'train min':>10}{'total min':>10}{'BLEU':>7}"
    print("\n" + header + "\n" + "-" * len(header))
    for row in rows:
        total = row.get("wall_seconds", row.get("total_seconds", 0))
        print(f"{row['toolkit'][:43]:<44}{row['steps']:>7}{row['train_seconds'] / 60:>10.1f}"
              f"{total / 60:>10.1f}{row['bleu']:>7.2f}")
    count = FLAGS.test_sentences or 1000
    print(f"BLEU: sacreBLEU on test_2016_flickr ({count:,} sentences), "
          f"{rows[0]['bleu_signature']}")


def main(unused_argv):
    problem = registry.problem(PROBLEM)
    data_dir = os.path.join(FLAGS.work_dir, "data")
    start = time.time()
    problem.generate_data(data_dir, FLAGS.tmp_dir)
    datagen_seconds = time.time() - start
    result = run_t2t_lite(problem, data_dir, os.path.join(FLAGS.work_dir, "t2t_lite"))
    result["datagen_seconds"] = datagen_seconds
    result["total_seconds"] = time.time() - start
    rows = [result]
    if FLAGS.compare:
        peer = run_peer(data_dir)
        if peer:
            rows.append(peer)
    print_table(rows)
    if FLAGS.output_json:
        reporting.write_json(FLAGS.output_json, {
            "train_minutes": FLAGS.train_minutes, "train_steps": FLAGS.train_steps,
            "hparams": FLAGS.hparams, "rows": rows})


if __name__ == "__main__":
    logging.set_verbosity(logging.INFO)
    common.run_main(main)
