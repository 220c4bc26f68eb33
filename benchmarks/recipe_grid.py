"""The README's Multi30k recipe against a small grid of its regularisation, chosen on dev alone
(benchmarks/README.md, recipe_grid.py).

  python benchmarks/recipe_grid.py --work_dir=W [--data_dir=D] [--points=P;P;...]
      [--seeds=1,2] [--chosen_seeds=1,2] [--train_steps=1500] [--output_json=F]

Each point (hparams overrides of the README's command: transformer_small, warmup 400,
constant 0.64, a checkpoint every 100 updates) and seed is one t2t_lite-trainer run of
--train_steps updates; its last 3 checkpoints are averaged and the dev set (Multi30k's val,
1,014 sentences) is translated with beam 4 and alpha 0.6 and scored by sacreBLEU. The point of
the best mean dev BLEU is chosen; then the chosen point and the README's own (the first) get
--chosen_seeds too, and only their test_2016_flickr BLEU is measured. A run whose result is in
W is not run again, so an interrupted grid goes on where it stopped.
"""
import json
import os
import statistics

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags, registry
common.load_tensorflow()  # the programs' start: a quiet TensorFlow

import harness  # noqa: E402  (benchmarks/, beside this script)
from harness import HPARAMS_SET, PROBLEM  # noqa: E402

from t2t_lite.decoding import decoder  # noqa: E402
from t2t_lite.decoding.dev_bleu import first_dev_pairs  # noqa: E402
from t2t_lite.decoding.search import SearchHParams  # noqa: E402
from t2t_lite.models import restoring  # noqa: E402
from t2t_lite.storage.run_description import saved_run  # noqa: E402
from t2t_lite.training import averaging  # noqa: E402

# The README's recipe, then subword sampling (BPE-dropout: the vocabulary is BPE; at 0.1 its
# sentences are 1.4 times as many pieces, so a lighter one too), less and more dropout, less
# and more label smoothing.
README = "learning_rate_warmup_steps=400,learning_rate_constant=0.64"
POINTS = ("", "sentencepiece_alpha=0.1", "sentencepiece_alpha=0.03",
          "layer_prepostprocess_dropout=0.05", "layer_prepostprocess_dropout=0.2",
          "label_smoothing=0.05", "label_smoothing=0.2")
AVERAGE_LAST = 3

harness.define_data_flags(flags)
flags.DEFINE_string("work_dir", None, "Folder of the runs and their results.")
flags.DEFINE_string("points", ";".join(POINTS), "Grid points, ';' between them: hparams "
                    "overrides over the README's recipe (the first: the README's own).")
flags.DEFINE_list("seeds", ["1"], "The trainer's --seed of every point's runs.")
flags.DEFINE_list("chosen_seeds", ["1", "2"], "The seeds of the chosen point and the README's.")
flags.DEFINE_integer("train_steps", 1500, "Updates of each run.", lower_bound=1)
flags.DEFINE_string("output_json", None, "The results (default W/grid.json).")
flags.mark_flags_as_required(["work_dir"])


def run_folder(point: str, seed: str) -> str:
    name = "".join(c if c.isalnum() or c in "._=" else "_" for c in point) or "readme"
    return os.path.join(FLAGS.work_dir, f"{name}.seed{seed}")


def trained(point: str, seed: str, data_dir: str) -> str:
    """The output folder of the point's run with `seed`, trained unless it holds the last
    checkpoint already (the trainer resumes an interrupted run)."""
    output_dir = run_folder(point, seed)
    if not os.path.exists(os.path.join(output_dir, f"model.ckpt-{FLAGS.train_steps}.index")):
        print(f"training {point or 'the README recipe'}, seed {seed}", flush=True)
        harness.run_logged([
            *harness.t2t_lite_command("trainer"), f"--problem={PROBLEM}", "--model=transformer",
            f"--hparams_set={HPARAMS_SET}", f"--hparams={','.join(filter(None, [README, point]))}",
            f"--data_dir={data_dir}", f"--output_dir={output_dir}", f"--seed={seed}",
            f"--train_steps={FLAGS.train_steps}", "--save_checkpoints_steps=100",
            "--eval_steps=0", "--eval_bleu_sentences=0"], output_dir + ".log")
    return output_dir


def bleu(output_dir: str, problem, data_dir: str, sources: list, references: list) -> dict:
    """sacreBLEU of the last AVERAGE_LAST checkpoints averaged, beam 4, alpha 0.6."""
    averaged = os.path.join(output_dir, harness.AVERAGED)
    averaging.average_checkpoints(output_dir, AVERAGE_LAST, averaged)
    hparams = saved_run(output_dir)["hparams"]
    model = restoring.load_model("transformer", hparams, problem.vocab_size(data_dir),
                                 output_dir, averaged)
    translator = decoder.Translator(model, problem.feature_encoders(data_dir),
                                    SearchHParams(beam_size=4, alpha=0.6), problem.max_length)
    scores = decoder.score(translator.translate(sources, show_progress=False), references)
    return {"bleu": scores["bleu"], "signature": scores["bleu_signature"]}


def measured(results: dict, key: str, measure) -> dict:
    """results[key], measured (and the results written) the first time it is asked for."""
    if key not in results:
        results[key] = measure()
        harness.write_json(FLAGS.output_json, results, announce=False)
    return results[key]


def main(unused_argv):
    FLAGS.output_json = FLAGS.output_json or os.path.join(FLAGS.work_dir, "grid.json")
    data_dir = FLAGS.data_dir or os.path.join(FLAGS.work_dir, "data")
    problem = registry.problem(PROBLEM)
    problem.generate_data(data_dir, FLAGS.tmp_dir)
    results = {}
    if os.path.exists(FLAGS.output_json):
        with open(FLAGS.output_json, encoding="utf-8") as handle:
            results = json.load(handle)
    results["machine"] = harness.machine()
    dev = first_dev_pairs(problem, data_dir, -1)  # all of val
    test = [decoder.read_sentences(path) for path in problem.text_paths(data_dir, "test").values()]
    points = FLAGS.points.split(";")

    def dev_bleu(point, seed):
        return measured(results, f"dev {point} seed {seed}", lambda: bleu(
            trained(point, seed, data_dir), problem, data_dir, *dev))["bleu"]

    means = {point: statistics.mean(dev_bleu(point, seed) for seed in FLAGS.seeds)
             for point in points}
    chosen = max(points, key=lambda point: means[point])
    finals = {}
    for point in dict.fromkeys([points[0], chosen]):
        dev_scores = [dev_bleu(point, seed) for seed in FLAGS.chosen_seeds]
        test_scores = [measured(results, f"test {point} seed {seed}", lambda: bleu(
            trained(point, seed, data_dir), problem, data_dir, *test))["bleu"]
            for seed in FLAGS.chosen_seeds]
        finals[point] = {"dev": dev_scores, "test": test_scores}
    results.update(means=means, chosen=chosen, finals=finals)
    harness.write_json(FLAGS.output_json, results)

    print(f"\n{HPARAMS_SET} on {PROBLEM}, the README's recipe ({README}) and "
          f"{FLAGS.train_steps} updates; {harness.machine_line(results['machine'])}; dev: val "
          f"({len(dev[0]):,} sentences), the last {AVERAGE_LAST} checkpoints averaged, beam 4")
    print(harness.table(["point", "dev BLEU, mean over seeds " + ",".join(FLAGS.seeds)],
                        [[point or "README", f"{means[point]:.2f}"] for point in points]))
    print(f"chosen on dev: {chosen or 'README'}")
    print(harness.table(["point", "dev BLEU by seed", "test_2016_flickr BLEU by seed"], [
        [point or "README", " ".join(f"{b:.2f}" for b in final["dev"]),
         " ".join(f"{b:.2f}" for b in final["test"])] for point, final in finals.items()]))


if __name__ == "__main__":
    harness.run_main(main)
