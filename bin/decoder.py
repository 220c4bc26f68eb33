"""t2t_lite-decoder: translate a file with the latest checkpoint (t2t-decoder).

  t2t_lite-decoder --problem=algorithmic_copy --data_dir=D --output_dir=O \
      --decode_from_file=IN --decode_to_file=OUT --score_reference=REF

  t2t_lite-decoder --ctranslate2_model=E --data_dir=D --decode_from_file=IN ...

  t2t_lite-decoder ... --decode_from_file=IN --score_targets=TARGETS   (the model's scores)
  t2t_lite-decoder ... --decode_interactive                             (a line at a time)

The model and hparams default to those the trainer recorded in --output_dir. With
--ctranslate2_model, CTranslate2 searches with a folder of t2t_lite-exporter
--format=ctranslate2 instead (its hparams.json stands for --output_dir's). With
--attention_dir it also draws the attention of the first --attention_sentences lines and their
translations (t2t_lite.visualize). docs/decoding.md shows n-best lists, scores, prefixes,
alignments and sampling.
"""
from absl import logging

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags

# The rest of the library is imported in the functions below: it loads TensorFlow, which
# common.start loads first, quietly.


def define_flags():
    common.define_problem_flags()
    common.define_model_flags()
    common.define_trained_model_flags()
    common.define_thread_flags()  # 0 for both: see decoder.size_thread_pools
    flags.DEFINE_string("decode_from_file", None, "Sentences to translate (default: stdin).")
    flags.DEFINE_string("decode_to_file", None, "Where to write translations (default: stdout).")
    flags.DEFINE_string("score_reference", None,
                        "Reference translations: print exact-match accuracy and sacreBLEU.")
    flags.DEFINE_string("attention_dir", None,
                        "Write attention heatmaps (PNG) of the first --attention_sentences "
                        "translations here; needs --decode_from_file and --decode_to_file.")
    flags.DEFINE_integer("attention_sentences", 5, "How many sentences --attention_dir draws.",
                         lower_bound=1)
    flags.DEFINE_string("ctranslate2_model", None,
                        "Translate with this CTranslate2 model folder (t2t_lite-exporter "
                        "--format=ctranslate2) instead of a checkpoint of --output_dir; "
                        "--decode_hparams' beam_size, alpha (CTranslate2's length_penalty), "
                        "extra_length, batch_size and parallel_batches (its inter_threads) "
                        "apply.")
    flags.DEFINE_string("score_targets", None,
                        "Score these translations of --decode_from_file's lines (a line each) "
                        "instead of searching: writes log-likelihood, pieces and mean per piece "
                        "a line (OpenNMT-tf's onmt-main score).")
    flags.DEFINE_string("target_prefix_file", None,
                        "A target prefix for each line of --decode_from_file (a line each, may "
                        "be empty): each translation begins with it.")
    flags.DEFINE_boolean("decode_interactive", False,
                         "Load the model once, then translate stdin a line at a time, writing "
                         "and flushing each translation before reading the next (t2t's "
                         "--decode_interactive).")
    flags.DEFINE_integer("seed", 0, "The seed of sampling (--decode_hparams=sampling_topk=K): "
                         "a line's samples are decided by it and the line's index.")
    flags.mark_flags_as_required(["data_dir"])


# The files the decoder reads, which no output may be.
INPUT_FLAGS = ("decode_from_file", "score_reference", "score_targets", "target_prefix_file")

# Flags that do not go together: (flag, the flags it refuses, why).
EXCLUSIVE = (
    ("decode_interactive", ("decode_from_file", "decode_to_file", "score_reference",
                            "score_targets", "target_prefix_file", "attention_dir"),
     "it reads stdin a line at a time and writes each answer to stdout"),
    ("score_targets", ("score_reference", "target_prefix_file", "attention_dir"),
     "it scores the given translations and searches nothing"),
)


def check_exclusive_flags():
    """A FlagError for two flags that do not go together (EXCLUSIVE), or for --decode_hparams
    that a scoring run has no use for."""
    for flag, refused, why in EXCLUSIVE:
        if FLAGS[flag].value:
            given = [name for name in refused if FLAGS[name].value]
            if given:
                raise common.FlagError(f"--{given[0]} does not go with --{flag}: {why}")
    if FLAGS.score_targets:
        from t2t_lite.decoding.decoder import SCORING_SETTINGS, decode_hparams_names
        common.refuse_decode_hparams(
            set(decode_hparams_names()) - SCORING_SETTINGS,
            f"with --score_targets (it scores the given translations and searches nothing: "
            f"{' and '.join(sorted(SCORING_SETTINGS))} apply)")
        if not FLAGS.decode_from_file:
            raise common.FlagError("--score_targets needs --decode_from_file (the sources of "
                                   "its translations, a line each)")


def main(argv):
    from t2t_lite.decoding import decoder, strategies
    from t2t_lite.decoding.ctranslate2_translator import export_record
    from t2t_lite.decoding.output_files import OutputForm
    from t2t_lite.decoding.trained_model import TranslationModel
    from t2t_lite.storage import outputs
    common.check_inputs_reachable("decode_from_file", "score_reference", "output_dir",
                                  "checkpoint_path", "data_dir", "ctranslate2_model",
                                  "score_targets", "target_prefix_file")
    check_exclusive_flags()
    if FLAGS.target_prefix_file and not FLAGS.decode_from_file:
        raise common.FlagError("--target_prefix_file needs --decode_from_file (a prefix for "
                               "each of its lines)")
    if FLAGS.attention_dir and not (FLAGS.decode_from_file and FLAGS.decode_to_file):
        raise common.FlagError("--attention_dir needs --decode_from_file and --decode_to_file "
                               "(it draws the first input lines with their translations)")
    if FLAGS.ctranslate2_model:
        for name in ("output_dir", "checkpoint_path", "attention_dir"):
            if FLAGS[name].value:
                raise common.FlagError(f"--{name} does not go with --ctranslate2_model (the "
                                       "folder holds the model it was exported from)")
        export_record(FLAGS.ctranslate2_model)  # an error unless the exporter wrote it
        common.refuse_decode_hparams(
            ("jit_compile", "alignment_layer", *strategies.ctranslate2_lacks()),
            "with --ctranslate2_model (CTranslate2 runs its own search, and aligns with the "
            "last decoder layer: beam_size, alpha, extra_length, batch_size, parallel_batches, "
            "num_hypotheses, return_beams, write_beam_scores, alignments and sampling apply)")
    elif not FLAGS.output_dir:
        raise common.FlagError("--output_dir (a trained model) or --ctranslate2_model (an "
                               "exported one) is required")
    run = common.trained_run_from_flags(FLAGS.ctranslate2_model)
    search_hparams, translator_hparams = common.decode_hparams_from_flags()
    run.problem  # an unknown problem is refused before the files are read
    # Everything that can be wrong with the inputs and outputs fails here, before the work.
    scoring = FLAGS.score_targets is not None
    form = OutputForm() if scoring else decoder.output_form(translator_hparams)
    wanted = [outputs.Output.file(path, "decode_to_file") for path in
              ([] if FLAGS.decode_to_file is None else form.paths(FLAGS.decode_to_file).values())]
    if FLAGS.attention_dir:
        wanted.append(outputs.Output.folder(FLAGS.attention_dir, "attention_dir", lock_name=None))
    inputs = {flag: FLAGS[flag].value for flag in INPUT_FLAGS}
    for output in wanted:
        output.check(inputs)
    interactive, source = FLAGS.decode_interactive, FLAGS.decode_from_file or "stdin"
    lines = [] if interactive else decoder.read_sentences(FLAGS.decode_from_file,
                                                          "decode_from_file")
    prefixes, targets, references = (
        None if FLAGS[flag].value is None else decoder.read_line_for_line(
            FLAGS[flag].value, flag, lines, source)
        for flag in ("target_prefix_file", "score_targets", "score_reference"))
    decoder.size_thread_pools(translator_hparams, len(lines) or 1,
                              FLAGS.intra_op_parallelism_threads,
                              FLAGS.inter_op_parallelism_threads)
    run.check_vocabulary()
    if not run.ctranslate2:
        decoder.check_alignment_layer(translator_hparams, run.hparams.decoder_layers)
    decoder.check_sampling_topk(search_hparams, run.problem.vocab_size(run.data_dir))
    with outputs.opened(*wanted, name_full_disk=False):  # the files name a failed write
        model = TranslationModel(run, FLAGS.checkpoint_path, FLAGS.seed,
                                 FLAGS.intra_op_parallelism_threads)
        translator = model.translator(search_hparams, translator_hparams, len(lines), source)
        if interactive:
            return decoder.decode_interactively(translator)
        if targets is not None:
            decoder.write_target_scores(translator, lines, targets, FLAGS.decode_to_file)
            return None
        translations = decoder.write_translations(translator, lines, FLAGS.decode_to_file,
                                                  prefixes=prefixes)
        if FLAGS.attention_dir:
            from t2t_lite import visualize  # matplotlib only when pictures are asked for
            sentences = list(zip(lines, translations))[:FLAGS.attention_sentences]
            paths = visualize.write_attention_pictures(model.model, model.encoders, sentences,
                                                       FLAGS.attention_dir)
            logging.info("attention pictures of %d sentences (%d files) in %s",
                         len(sentences), len(paths), FLAGS.attention_dir)
    if references is not None:
        scores = decoder.score(translations, references)
        logging.info("exact match %.2f%% (%d sentences); %s", 100 * scores["exact_match"],
                     len(lines), scores["bleu_text"])


def run():
    """The program; a SIGINT or SIGTERM ends it at once with one line and status 130 or 143,
    --decode_to_file not written (the lines done kept as on any failure)."""
    common.start(main, define_flags, interrupted="before the end: no output file was "
                 "completed; the same command starts again")


if __name__ == "__main__":
    run()
