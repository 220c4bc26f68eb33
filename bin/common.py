"""What every t2t_lite program shares: its start (a quiet TensorFlow), the run flags, and
errors that end the program with one clear line instead of a traceback. The address-space
limit and memory that runs out are `memory_limits`'.

Importing this module, or a program's, changes nothing in the process: no environment
variable, no file descriptor, no TensorFlow. A program's `run()` calls `start`, which does it
all in the order it needs. TensorFlow's own defaults choose the CPU kernels (oneDNN or not:
TF_ENABLE_ONEDNN_OPTS, which TensorFlow reads, is the user's switch).
"""
import contextlib
import math
import os
import signal
import sys

from absl import app, flags, logging

from t2t_lite import registry
from t2t_lite.bin import memory_limits
from t2t_lite.errors import FlagError, UserError

FLAGS = flags.FLAGS


def start(main, define_flags, signal_watch=None, interrupted: str = "before the end"):
    """Runs a program: `memory_limits.prepare_for_the_limit` (under ulimit -v), then
    `load_tensorflow`, then `define_flags()` (flags may take the library's defaults, which
    load TensorFlow), then `main` through `run_main`; memory that runs out where Python sees
    it is one error line (`memory_limits.memory_errors_reported`).

    SIGTERM and SIGINT (Ctrl-C) are handled from the first instant by `signal_watch` (the
    trainer's, which stops training with a checkpoint; by default a training.signals
    SignalWatch that ends the program at once): a signal that ends it prints one line,
    "stopped by SIGINT `interrupted`", and exits with 128 + its number (130, 143), with no
    traceback. What was being written is left as its writer leaves it on any error."""
    from t2t_lite.training import signals  # no TensorFlow: in place before it loads
    watch = signal_watch or signals.SignalWatch()
    try:
        with watch.installed():
            with _user_errors_reported():
                memory_limits.prepare_for_the_limit()
                with memory_limits.memory_errors_reported():
                    load_tensorflow()
            define_flags()
            run_main(main)
    except signals.Interrupted as interrupt:
        print(f"stopped by {signal.Signals(interrupt.signal_number).name} {interrupted}",
              file=sys.stderr)
        sys.exit(interrupt.exit_status)


def load_tensorflow():
    """A program's first step, before anything loads TensorFlow: TensorFlow's native logging
    quiet (TF_CPP_MIN_LOG_LEVEL=3 unless set), then TensorFlow loaded with the native stderr
    closed (`_native_stderr_silenced`). Scripts that share the programs' start (benchmarks/)
    call it first."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with _native_stderr_silenced():
        import tensorflow as tf
        tf.config.list_physical_devices()


@contextlib.contextmanager
def _native_stderr_silenced():
    """TensorFlow's native code prints CUDA probing errors on machines without a GPU before
    its logging starts; they are noise on a CPU run, so stderr is closed while it loads."""
    if os.environ.get("T2T_LITE_VERBOSE_STARTUP"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def define_problem_flags():
    flags.DEFINE_string("problem", None, "Registered problem name, e.g. algorithmic_copy.")
    flags.DEFINE_string("data_dir", None, "Folder of the generated TFRecords and vocabulary.")


def define_model_flags():
    flags.DEFINE_string("model", "transformer", "Registered model name.")
    flags.DEFINE_string("hparams_set", None, "Registered hparams set, e.g. transformer_base.")
    flags.DEFINE_string("hparams", "", 'Overrides, e.g. "num_hidden_layers=2,batch_size=1024"; '
                        'for the decoder and exporter, only mixed_precision over the '
                        'hparams.json of --output_dir (mixed_precision=bfloat16 decodes or '
                        'exports in bfloat16); an override of the model\'s shape is refused.')
    flags.DEFINE_string("output_dir", None, "Folder of checkpoints and TensorBoard logs.")


class FiniteFloatParser(flags.FloatParser):
    """absl's float flag parser that also refuses nan and the infinities, which pass its bounds
    (every comparison with nan is false)."""

    def parse(self, argument):
        value = self.convert(argument)
        if not math.isfinite(value):
            raise ValueError(f"{value} is not {self.syntactic_help} (nan and the infinities "
                             f"are not taken)")
        return super().parse(value)


def define_float(name: str, default: float, help: str, lower_bound: float = None):
    """flags.DEFINE_float with FiniteFloatParser: every program's float flags are defined so."""
    flags.DEFINE(FiniteFloatParser(lower_bound), name, default, help,
                 serializer=flags.ArgumentSerializer())


def define_trained_model_flags():
    """The flags of the programs that use a trained model (decoder, exporter)."""
    flags.DEFINE_string("checkpoint_path", None, "A checkpoint to use instead of the latest in "
                        "--output_dir (an averaged one, say).")
    from t2t_lite.decoding import strategies
    flags.DEFINE_string("decode_hparams", "", 'Search settings, e.g. "beam_size=4,alpha=0.6,'
                        'extra_length=50" (the defaults; num_hypotheses=N: the N best; '
                        f"{strategies.settings_help()}). The decoder also takes batch_size "
                        "(32), jit_compile and parallel_batches (0: one per CPU core without "
                        "a GPU); the exporter ignores them (see --export_jit_compile).")


def define_thread_flags():
    """TensorFlow's two CPU thread pools, under t2t-trainer's (and onmt-main's) flag names."""
    flags.DEFINE_integer("intra_op_parallelism_threads", 0, "Threads that one operation, e.g. a "
                         "matrix multiply, runs on (0: TensorFlow's choice, one per core; the "
                         "decoder's: 1 when it searches a batch per core at once).", lower_bound=0)
    flags.DEFINE_integer("inter_op_parallelism_threads", 0, "Operations that run at once (0: "
                         "TensorFlow's choice). 1 can train faster on a CPU of few cores: see "
                         "benchmarks/README.md (profile_step.py).", lower_bound=0)


def set_threads_from_flags():
    """Sizes the thread pools; must run before TensorFlow executes any operation."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.intra_op_parallelism_threads)
    tf.config.threading.set_inter_op_parallelism_threads(FLAGS.inter_op_parallelism_threads)


def hparams_from_flags():
    """The HParams of --hparams_set with the --hparams overrides; a FlagError naming the flag
    for an unknown set (with what exists) or an override that is unknown or mistyped."""
    try:
        hparams = registry.hparams(FLAGS.hparams_set)
    except registry.RegistryError as error:
        raise FlagError(f"--hparams_set: {error}") from None
    return overridden(hparams, FLAGS.hparams)


def overridden(hparams, overrides: str):
    """`hparams` with the --hparams `overrides` ("a=1,b=x") applied; an error "--hparams:
    ..." for an unknown name (with a did-you-mean and the known ones), a value of the wrong
    type or hparams the model cannot be built with."""
    from t2t_lite.hparams_lib import HParamsError, parse_overrides
    if not overrides:
        return hparams
    changes = parse_overrides(overrides, hparams, "--hparams")  # its errors name the flag
    try:
        return hparams.replace(**changes)
    except HParamsError as error:  # a value the model cannot be built with
        raise FlagError(f"--hparams: {error}") from None


def check_inputs_reachable(*names: str):
    """For each of these flags that is given (a path the program reads), a StorageError
    "--name=path: cannot reach ..." before any work when its storage cannot be reached (a
    gs:// bucket without network, a scheme TensorFlow has no file system for)."""
    from t2t_lite.storage import output_paths
    for name in names:
        path = FLAGS[name].value
        if path:
            output_paths.check_reachable(path, f"--{name}={path}")


def trained_run_from_flags(run_dir: str = None):
    """The TrainedRun (decoding.trained_model.open_run) of --output_dir (or `run_dir`, an
    exported model's folder) with --data_dir, --problem, --model (when given), --hparams_set
    and --hparams."""
    from t2t_lite.decoding.trained_model import open_run
    return open_run(run_dir or FLAGS.output_dir, FLAGS.data_dir, FLAGS.problem,
                    FLAGS.model if FLAGS["model"].present else None, FLAGS.hparams_set,
                    FLAGS.hparams)


def refuse_decode_hparams(names, reason: str):
    """A FlagError when --decode_hparams sets any of `names`, which do not apply (`reason`)."""
    given = [item.split("=")[0].strip() for item in FLAGS.decode_hparams.split(",")
             if item.strip()]
    refused = [name for name in given if name in names]
    if refused:
        raise FlagError(f"--decode_hparams: {', '.join(refused)} does not apply {reason}")


def decode_hparams_from_flags():
    """(SearchHParams, TranslatorHParams) of --decode_hparams over their defaults, type-checked;
    each name goes to the settings that have it."""
    from t2t_lite.decoding.decoder import parse_decode_hparams
    return parse_decode_hparams(FLAGS.decode_hparams)


def exit_with_error(message: str):
    """Ends the program as every mistake a user can fix does: one `error:` line, status 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_flags(argv):
    """absl's flag parsing for app.run, its mistakes (an unknown flag, a bad value, a missing
    required flag) ending the program as a UserError does; --help and its kin exit 0."""
    try:
        return FLAGS(argv)
    except flags.Error as error:
        lines = [line.strip().rstrip(".") for line in str(error).splitlines() if line.strip()]
        exit_with_error("; ".join(lines) + " (--helpshort lists the flags)")
    except SystemExit:  # raised by absl's help flags only, once the help is printed
        sys.exit(0)


def run_main(main):
    """absl's app.run, errors the user can fix (UserError, flag errors, memory that runs out)
    reported as one `error: ...` line and exit status 2; any other keeps its traceback."""
    def guarded(argv):
        logging.set_verbosity(logging.INFO)
        logging.use_absl_handler()
        with _user_errors_reported(), memory_limits.memory_errors_reported():
            return main(argv)
    app.run(guarded, flags_parser=parse_flags)


@contextlib.contextmanager
def _user_errors_reported():
    """Runs the block; a UserError in it ends the program with its one `error:` line."""
    try:
        yield
    except UserError as error:
        exit_with_error(str(error))
