"""What every t2t_lite program shares: its start (a quiet TensorFlow), the run flags, and
errors that end the program with one clear line instead of a traceback.

Importing this module, or a program's, changes nothing in the process: no environment
variable, no file descriptor, no TensorFlow. A program's `run()` calls `start`, which does it
all in the order it needs. TensorFlow's own defaults choose the CPU kernels (oneDNN or not:
TF_ENABLE_ONEDNN_OPTS, which TensorFlow reads, is the user's switch).
"""
import contextlib
import os
import sys

from absl import app, flags, logging

from t2t_lite import registry
from t2t_lite.errors import FlagError, UserError

FLAGS = flags.FLAGS


# The address space (ulimit -v, RLIMIT_AS) TensorFlow 2.21 takes to load and start its
# thread pools, before any work: 1.54 GiB on 2 CPU cores with MALLOC_ARENAS_UNDER_A_LIMIT
# (VmPeak; more with more cores). Under a lower limit every program dies in native code (a
# thread that cannot be created aborts, a library fails to map), so `check_address_space`
# refuses it first.
TENSORFLOW_ADDRESS_SPACE = int(1.5 * 2**30)
# glibc's malloc gives threads that allocate at once arenas of their own, each reserving 64 MB
# of address space (up to 8 per core): under ulimit -v those reservations, not the memory
# used, make TensorFlow's threads fail to start (the decoder of a small model reserved 2.16 GB
# on 2 cores, 1.82 GB with 2 arenas). Under a limit, malloc keeps to this many.
MALLOC_ARENAS_UNDER_A_LIMIT = 2
M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def start(main, define_flags):
    """Runs a program: under ulimit -v, fewer malloc arenas (MALLOC_ARENAS_UNDER_A_LIMIT) and
    `check_address_space`; `load_tensorflow`, then `define_flags()` (flags
    may take the library's defaults, which load TensorFlow), then `main` through `run_main`;
    memory that runs out where Python sees it is one error line (`memory_errors_reported`)."""
    if address_space_limit() is not None:
        _limit_malloc_arenas(MALLOC_ARENAS_UNDER_A_LIMIT)
    check_address_space()
    with memory_errors_reported():
        load_tensorflow()
    define_flags()
    run_main(main)


def address_space_limit():
    """The soft limit of this process' address space (ulimit -v) in bytes; None without."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _limit_malloc_arenas(arenas: int):
    """glibc's mallopt(M_ARENA_MAX, arenas), what MALLOC_ARENA_MAX=arenas sets at a process'
    start; must run before the threads that would make more (TensorFlow's). Nothing where the
    C library is not glibc."""
    import ctypes
    try:
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, arenas)
    except (OSError, AttributeError):  # no mallopt: not glibc
        pass


def _megabytes(size: int) -> str:
    return f"{size / 2**20:,.0f} MB"


def check_address_space():
    """Ends the program with one error line when ulimit -v is below what TensorFlow takes to
    start (TENSORFLOW_ADDRESS_SPACE): it would otherwise abort in native code with no word
    of memory (exit status 127 or 134)."""
    limit = address_space_limit()
    if limit is not None and limit < TENSORFLOW_ADDRESS_SPACE:
        exit_with_error(
            f"the address space is limited to {_megabytes(limit)} (ulimit -v) and TensorFlow "
            f"takes about {_megabytes(TENSORFLOW_ADDRESS_SPACE)} of it to start, before any "
            f"work: raise the limit (ulimit -v unlimited)")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` says memory (or address space) ran out: MemoryError, Python's "can't
    start new thread", a library that could not be mapped, TensorFlow's OOM
    (ResourceExhaustedError; not a full disk, which storage_errors reports) or an aborted
    operation whose allocation failed."""
    message = str(error).lower()
    if isinstance(error, MemoryError):
        return True
    if isinstance(error, RuntimeError) and "can't start new thread" in message:
        return True
    if isinstance(error, ImportError) and "failed to map segment" in message:
        return True
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return False
    if isinstance(error, tf.errors.ResourceExhaustedError):
        return "no space left" not in message and ("oom" in message or "alloc" in message)
    if isinstance(error, tf.errors.AbortedError):
        return "alloc" in message or "memory" in message
    return False


def out_of_memory_message(error: BaseException) -> str:
    """One line: memory ran out, the error's kind and first line, the address-space limit
    (ulimit -v) if any, and what to do."""
    from t2t_lite.storage.output_paths import one_line
    cause = one_line(getattr(error, "message", None) or error) or "no message"
    limit = address_space_limit()
    where = (f"the address space is limited to {_megabytes(limit)} (ulimit -v): raise the "
             f"limit (ulimit -v unlimited)" if limit is not None else
             "free memory (other programs)")
    return (f"memory ran out ({type(error).__name__}: {cause}); {where}, or ask for less "
            f"(the decoder: --decode_hparams=batch_size=8,parallel_batches=1)")


@contextlib.contextmanager
def memory_errors_reported():
    """Runs the block; memory that runs out in it (`is_out_of_memory`) ends the program with
    one error line saying so (`out_of_memory_message`), status 2; other errors go on."""
    try:
        yield
    except Exception as error:  # any kind can say memory ran out; the others go on
        if not is_out_of_memory(error):
            raise
        exit_with_error(out_of_memory_message(error))


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


def define_trained_model_flags():
    """The flags of the programs that use a trained model (decoder, exporter)."""
    flags.DEFINE_string("checkpoint_path", None, "A checkpoint to use instead of the latest in "
                        "--output_dir (an averaged one, say).")
    flags.DEFINE_string("decode_hparams", "", 'Search settings, e.g. "beam_size=4,alpha=0.6,'
                        'extra_length=50" (the defaults; beam_size=1 is greedy; '
                        "stop_after_finished=N: a sentence's beam search also "
                        "stops once N hypotheses have ended among its K best candidates, "
                        "CTranslate2's rule; 0, the default, keeps t2t's exact stop). The "
                        "decoder also takes batch_size (32), jit_compile and parallel_batches "
                        "(0: one per CPU core without a GPU); the exporter ignores them (see "
                        "--export_jit_compile).")


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
    hparams = registry.hparams(FLAGS.hparams_set)
    return hparams.override_from_string(FLAGS.hparams) if FLAGS.hparams else hparams


def check_inputs_reachable(*names: str):
    """For each of these flags that is given (a file or folder the program reads), a
    StorageError "--name=path: cannot reach ..." when its storage cannot be reached (a gs://
    bucket without network, a scheme TensorFlow has no file system for:
    output_paths.check_reachable), before any work; else TensorFlow's error came out as a
    traceback from wherever the path was first read."""
    from t2t_lite.storage import output_paths
    for name in names:
        path = FLAGS[name].value
        if path:
            output_paths.check_reachable(path, f"--{name}={path}")


# What decoding or exporting a trained model may take other than its hparams.json records:
# the dtype it computes in (its float32 weights are cast once when loaded).
INFERENCE_SETTINGS = frozenset({"mixed_precision"})
# What only training reads (the optimiser, its schedule, dropout, the loss, the batches and
# the initializer, whose values the checkpoint replaces): ignored beside a record.
TRAINING_ONLY = frozenset({
    "learning_rate_schedule", "learning_rate_constant", "learning_rate_warmup_steps",
    "optimizer_adam_beta1", "optimizer_adam_beta2", "optimizer_adam_epsilon", "clip_grad_norm",
    "optimizer_multistep_accumulate_steps", "layer_prepostprocess_dropout", "attention_dropout",
    "relu_dropout", "label_smoothing", "output_layer_chunk_rows", "initializer_gain",
    "batch_size", "max_length", "min_length_bucket", "length_bucket_step", "length_bucketing"})


def trained_run_from_flags(run_dir: str = None):
    """(problem name, model name, hparams) of the model in --output_dir (or `run_dir`, a
    folder with the hparams.json of an exported model): from the hparams.json the trainer
    wrote there, with what --hparams_set and --hparams may change for inference
    (`inference_hparams`); from the flags alone when there is none (t2t-decoder took them
    from the flags only)."""
    from t2t_lite.storage.run_description import description_path, saved_run
    run_dir = run_dir or FLAGS.output_dir
    run = saved_run(run_dir)
    problem = FLAGS.problem or run.get("problem")
    if not problem:
        raise FlagError("--problem is required (no hparams.json in --output_dir)")
    recorded = run.get("hparams")
    if recorded is None:
        if not FLAGS.hparams_set:
            raise FlagError("--hparams_set is required (no hparams.json in --output_dir)")
        return problem, FLAGS.model, hparams_from_flags()
    if FLAGS.hparams_set:
        requested = hparams_from_flags()
    else:  # e.g. mixed_precision=bfloat16: a float32 model decoded in bfloat16
        requested = recorded.override_from_string(FLAGS.hparams) if FLAGS.hparams else recorded
    hparams = inference_hparams(recorded, requested, description_path(run_dir),
                                _hparams_flags_given())
    return problem, run.get("model", FLAGS.model), hparams


def _hparams_flags_given() -> str:
    """How the hparams flags given read on the command line, for messages."""
    given = [f"--{name}={FLAGS[name].value}" for name in ("hparams_set", "hparams")
             if FLAGS[name].value]
    return " ".join(given)


def inference_hparams(recorded, requested, path: str, given: str):
    """The hparams to decode or export the model recorded in `path` (its hparams `recorded`)
    with, when the flags `given` ask for `requested`: the record, with requested
    INFERENCE_SETTINGS ("auto" stands for the recorded choice, as on a resume). A
    TRAINING_ONLY difference is ignored with a warning; any other (the model's shape or
    computation: num_hidden_layers, hidden_size, the norms, the timing signal ...) is a
    FlagError naming each hparam, the recorded and the requested value, and `path`: a
    checkpoint restores into a model of another shape by dropping or missing weights
    without an error (tensor2tensor's decoder took the flags' hparams as they were)."""
    for name in ("mixed_precision", "length_bucketing"):  # "auto": the trainer's choice
        if getattr(requested, name) == "auto":
            requested = requested.replace(**{name: getattr(recorded, name)})
    before, after = recorded.to_dict(), requested.to_dict()
    changed = {name: (before[name], after[name]) for name in before
               if before[name] != after[name]}
    refused = {name: values for name, values in changed.items()
               if name not in INFERENCE_SETTINGS | TRAINING_ONLY}
    if refused:
        raise FlagError(
            f"{given} changes the trained model: {_listed(refused, path)}. A trained model is "
            f"decoded and exported as it was trained (only mixed_precision may change): drop "
            f"{'them' if len(refused) > 1 else 'it'} from the flags")
    ignored = {name: values for name, values in changed.items() if name in TRAINING_ONLY}
    if ignored:
        logging.warning("%s: ignored, only training reads them: %s", given,
                        _listed(ignored, path))
    return recorded.replace(**{name: after[name] for name in changed
                               if name in INFERENCE_SETTINGS})


def _listed(changes: dict, path: str) -> str:
    return "; ".join(f"{name}: {before!r} in {path}, {after!r} requested"
                     for name, (before, after) in changes.items())


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
    """absl's flag parsing for app.run, with its mistakes (a value out of bounds, an unknown
    flag, a bad number, a missing required flag) ending the program as a UserError does,
    instead of absl's "FATAL Flags parsing error" and status 1. --help, --helpfull and
    --helpxml print and exit; absl's status 1 for them becomes 0."""
    try:
        return FLAGS(argv)
    except flags.Error as error:
        lines = [line.strip().rstrip(".") for line in str(error).splitlines() if line.strip()]
        exit_with_error("; ".join(lines) + " (--helpshort lists the flags)")
    except SystemExit:  # raised by absl's help flags only, once the help is printed
        sys.exit(0)


def run_main(main):
    """absl's app.run, with errors the user can fix (t2t_lite.errors.UserError, flag errors:
    parse_flags, and memory that runs out: memory_errors_reported) reported as one
    `error: ...` line and exit status 2; any other exception is a bug and keeps its
    traceback."""
    def guarded(argv):
        logging.set_verbosity(logging.INFO)
        logging.use_absl_handler()
        try:
            with memory_errors_reported():
                return main(argv)
        except UserError as error:
            exit_with_error(str(error))
    app.run(guarded, flags_parser=parse_flags)
