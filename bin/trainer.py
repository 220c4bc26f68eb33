"""t2t_lite-trainer: train a model on a problem (t2t-trainer).

  t2t_lite-trainer --problem=algorithmic_copy --model=transformer --hparams_set=transformer_tiny \
      --data_dir=D --output_dir=O --train_steps=1000

On SIGTERM or SIGINT it saves a checkpoint after the update under way, says so in one line and
exits with status 143 or 130; the same command resumes from that checkpoint. Its handler is in
place from the program's first instant (a signal before training began ends it at once, with
one line and the same status, nothing written).

Fine-tuning a trained model on new data (t2t's --warm_start_from; docs/training.md):

  t2t_lite-trainer --problem=algorithmic_reverse ... --warm_start_from=O --output_dir=O2
"""
import sys

from t2t_lite.bin import common
from t2t_lite.bin.common import FLAGS, flags

# The rest of the library is imported in the functions below: it loads TensorFlow, which
# common.start loads first, quietly.


def define_flags():
    """The trainer's flags, with RunConfig's defaults."""
    from t2t_lite.training import trainer
    defaults = trainer.RunConfig()
    common.define_problem_flags()
    common.define_model_flags()
    common.define_thread_flags()
    flags.DEFINE_integer("train_steps", defaults.train_steps, "Total optimizer updates.",
                         lower_bound=1)
    common.define_float("train_minutes", defaults.train_minutes, "Stop after this many "
                        "minutes of training, with a checkpoint, if --train_steps is not "
                        "reached first (0: no limit).", lower_bound=0)
    flags.DEFINE_integer("eval_steps", defaults.eval_steps,
                         "Dev batches per evaluation (0: none).", lower_bound=0)
    flags.DEFINE_integer("eval_every", defaults.eval_every, "Updates between evaluations.",
                         lower_bound=1)
    flags.DEFINE_integer("save_checkpoints_steps", defaults.save_checkpoints_steps,
                         "Updates between checkpoints.", lower_bound=1)
    flags.DEFINE_integer("keep_checkpoint_max", defaults.keep_checkpoint_max,
                         "How many recent checkpoints to keep.", lower_bound=1)
    flags.DEFINE_integer("log_every_steps", defaults.log_every_steps,
                         "Updates between progress lines and TensorBoard points.",
                         lower_bound=1)
    flags.DEFINE_boolean("jit_compile", defaults.jit_compile,
                         "Compile the training step with XLA (default: on GPUs and TPUs; off on "
                         "a CPU, where it compiles every batch shape and trains no faster).")
    flags.DEFINE_integer("seed", defaults.seed, "Seed of the weights, dropout and batch order.")
    flags.DEFINE_list("devices", list(defaults.devices),
                      "Devices to mirror the model over, e.g. GPU:0,GPU:1 (default: every GPU, "
                      "else the CPU). With a TF_CONFIG naming several workers, one process per "
                      "worker trains with MultiWorkerMirroredStrategy instead.")
    flags.DEFINE_integer("eval_bleu_sentences", 100,
                         "Dev sentences decoded for sacreBLEU at each evaluation (0: none).",
                         lower_bound=0)
    flags.DEFINE_enum("keep_best", defaults.keep_best, ["", "bleu", "loss"],
                      "After each evaluation, keep a checkpoint that beats the best so far in "
                      "O/best/ (with best.json: its step and score): by the dev BLEU (higher; "
                      "needs --eval_bleu_sentences > 0) or the dev loss (lower; needs "
                      "--eval_steps > 0). Never deleted by --keep_checkpoint_max; the decoder and "
                      "exporter take it with --checkpoint_path=O/best, the averager with "
                      "--checkpoints=O/best.")
    flags.DEFINE_integer("early_stopping_patience", defaults.early_stopping_patience,
                         "Stop after this many evaluations in a row without an improvement of "
                         "at least --early_stopping_min_delta over the best, in --keep_best's "
                         "metric (the dev loss when --keep_best is empty); 0: never.",
                         lower_bound=0)
    common.define_float("early_stopping_min_delta", defaults.early_stopping_min_delta,
                        "The smallest change of the dev BLEU or loss that counts as an "
                        "improvement for --early_stopping_patience.", lower_bound=0)
    flags.DEFINE_boolean("allow_unverified_data", defaults.allow_unverified_data,
                         "Train on shards that have no datagen manifest, e.g. data written by "
                         "other tools.")
    flags.DEFINE_string("warm_start_from", defaults.warm_start_from,
                        "Start a new run from the model weights of a trained --output_dir, a "
                        "folder with a `checkpoint` file (O/best, O/averaged/model.ckpt) or a "
                        "checkpoint prefix: step 0, a fresh optimizer, this run's hparams and "
                        "schedule. Its vocabulary, model shape and the hparams that shape the "
                        "model's function (num_heads, timing signal, norms) must be this "
                        "run's. Not used "
                        "when --output_dir holds checkpoints: training resumes from them.")
    flags.mark_flags_as_required(["problem", "data_dir", "hparams_set", "output_dir"])


def main(argv, signal_watch=None):
    """Trains as the flags say (t2t_lite.train); `signal_watch` (signals.SignalWatch): the
    handler of SIGTERM and SIGINT that run() installed, with SIGTERM held until the strategy
    exists."""
    import t2t_lite
    from t2t_lite.training import distribution, trainer
    # First: the thread pools and the multi-worker strategy, before any other TensorFlow work.
    common.set_threads_from_flags()
    strategy = distribution.choose_strategy(FLAGS.devices)
    if signal_watch is not None:  # the workers have met: a signal now stops them all
        signal_watch.keep_until_loop = distribution.cluster_workers() > 1
        signal_watch.release_sigterm()
    common.check_inputs_reachable("data_dir", "warm_start_from")  # --output_dir: in train
    try:
        t2t_lite.train(FLAGS.problem, FLAGS.data_dir, FLAGS.output_dir, model=FLAGS.model,
                       hparams_set=common.hparams_from_flags(), strategy=strategy,
                       signal_watch=signal_watch,
                       **{name: FLAGS[name].value for name in trainer.SETTINGS})
    except trainer.StoppedBySignal as stop:  # one line, and the signal's exit status
        print(stop, file=sys.stderr)
        sys.exit(stop.exit_status)


def run():
    """The program, with the trainer's SIGTERM and SIGINT handler in place before TensorFlow
    loads (signals.py)."""
    from t2t_lite.training import signals
    watch = signals.SignalWatch()
    signals.hold_sigterm()  # until main has made the strategy
    common.start(lambda argv: main(argv, watch), define_flags, watch,
                 "before training began: nothing written; the same command starts again")


if __name__ == "__main__":
    run()
