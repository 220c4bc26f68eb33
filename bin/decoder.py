"""t2t_lite-decoder: translate a file with the latest checkpoint (t2t-decoder).

  t2t_lite-decoder --problem=algorithmic_copy --data_dir=D --output_dir=O \
      --decode_from_file=IN --decode_to_file=OUT --score_reference=REF

The model and hparams default to those the trainer recorded in --output_dir.
"""
from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags
from t2t_lite.decoding import decoder
from t2t_lite.hparams_lib import parse_overrides

common.define_problem_flags()
common.define_model_flags()
flags.DEFINE_string("checkpoint_path", None, "A checkpoint to use instead of the latest.")
flags.DEFINE_string("decode_from_file", None, "Sentences to translate (default: stdin).")
flags.DEFINE_string("decode_to_file", None, "Where to write translations (default: stdout).")
flags.DEFINE_string("score_reference", None,
                    "Reference translations: print exact-match accuracy and sacreBLEU.")
flags.DEFINE_string("decode_hparams", "", 'e.g. "batch_size=32,extra_length=50".')
flags.mark_flags_as_required(["data_dir", "output_dir"])


def main(argv):
    run = decoder.saved_run(FLAGS.output_dir)
    problem = FLAGS.problem or run.get("problem")
    if not problem:
        raise ValueError("--problem is required (no hparams.json in --output_dir)")
    hparams = common.hparams_from_flags() if FLAGS.hparams_set else run.get("hparams")
    if hparams is None:
        raise ValueError("--hparams_set is required (no hparams.json in --output_dir)")
    defaults = decoder.DecodeHParams()
    decode_hparams = defaults.__class__(**parse_overrides(FLAGS.decode_hparams, defaults))
    decoder.decode_from_file(problem, run.get("model", FLAGS.model), hparams, FLAGS.data_dir,
                             FLAGS.output_dir, FLAGS.decode_from_file, FLAGS.decode_to_file,
                             FLAGS.score_reference, decode_hparams, FLAGS.checkpoint_path)


def run():
    common.run_main(main)


if __name__ == "__main__":
    run()
