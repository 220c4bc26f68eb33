"""t2t_lite-exporter: a SavedModel that translates raw text, for TensorFlow Serving
(t2t-exporter, with the vocabulary and the search inside the graph), or a CTranslate2 model.

  t2t_lite-exporter --data_dir=D --output_dir=O --export_dir=E [--checkpoint_path=C] \
      [--decode_hparams="beam_size=4,alpha=0.6,extra_length=50"]
  t2t_lite-exporter --format=ctranslate2 [--quantization=int8] --data_dir=D --output_dir=O \
      --export_dir=E [--checkpoint_path=C]

The model and hparams are those the trainer recorded in --output_dir. docs/serving.md has
the SavedModel's signatures and the CTranslate2 folder (its search settings are given when it
translates, not here).
"""
from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags

# The rest of the library is imported in the functions below: it loads TensorFlow, which
# common.start loads first, quietly.


def define_flags():
    common.define_problem_flags()
    common.define_model_flags()
    common.define_trained_model_flags()
    flags.DEFINE_string("export_dir", None, "Where to write the SavedModel (for TensorFlow "
                        "Serving, a version folder such as models/NAME/1).")
    flags.DEFINE_bool("export_jit_compile", False,
                      "Compile the search with XLA in the SavedModel (the server must support "
                      "XLA; off by default for portability).")
    flags.DEFINE_bool("overwrite", False, "Replace a non-empty --export_dir.")
    flags.DEFINE_enum("format", "saved_model", ["saved_model", "ctranslate2"],
                      "saved_model: for TensorFlow Serving; ctranslate2: a CTranslate2 model "
                      "folder (needs the extra: pip install 't2t_lite[ctranslate2]').")
    flags.DEFINE_enum("quantization", "int8", ["int8", "int8_float32", "int16", "bfloat16",
                                               "float32"],
                      "With --format=ctranslate2: the weights' type (CTranslate2's names; int8 "
                      "is what its CPU users run).")
    flags.mark_flags_as_required(["data_dir", "output_dir", "export_dir"])


def main(argv):
    from t2t_lite.decoding import strategies
    from t2t_lite.serving import export_run
    if FLAGS.format != "ctranslate2" and FLAGS["quantization"].present:
        raise common.FlagError("--quantization applies to --format=ctranslate2 only")
    if FLAGS.format == "ctranslate2":
        if FLAGS.export_jit_compile or FLAGS.decode_hparams:
            raise common.FlagError("--decode_hparams and --export_jit_compile apply to the "
                                   "SavedModel: a CTranslate2 model takes its search settings "
                                   "when it translates (t2t_lite-decoder --ctranslate2_model "
                                   "--decode_hparams=...)")
    common.check_inputs_reachable("output_dir", "checkpoint_path", "data_dir")
    run = common.trained_run_from_flags()
    # The SavedModel searches each request as one batch, with --export_jit_compile: of
    # --decode_hparams only the search's settings apply.
    common.refuse_decode_hparams(
        ("batch_size", "parallel_batches", "jit_compile", "return_beams", "write_beam_scores",
         "alignments", "alignment_layer", *strategies.sampling_settings()),
        "to the SavedModel: it searches each request as one batch (XLA: --export_jit_compile), "
        "serves the n-best lists in its n_best signature and does not sample; beam_size, "
        "alpha, extra_length, stop_after_finished and num_hypotheses (n_best's N) apply")
    search_hparams, _ = common.decode_hparams_from_flags()
    checkpoint = export_run(run, FLAGS.export_dir, FLAGS.format, FLAGS.checkpoint_path,
                            FLAGS.quantization, search_hparams, FLAGS.export_jit_compile,
                            FLAGS.overwrite)
    print(f"exported {checkpoint} to {FLAGS.export_dir}")
    if FLAGS.format == "ctranslate2":
        print(f"translate with: t2t_lite-decoder --ctranslate2_model={FLAGS.export_dir} "
              f"--data_dir={FLAGS.data_dir} ...")
    else:
        print(f"inspect with: saved_model_cli show --dir {FLAGS.export_dir} --all")


def run():
    common.start(main, define_flags)


if __name__ == "__main__":
    run()
