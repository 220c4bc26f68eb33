"""How training is tuned to the CPU (its matmul routines and thread pools), decided by timing
the step's own products on this machine (once per CPU model and TensorFlow version), not by
what is said of the CPU.

Three parts (CpuTuning):
- oneDNN or TensorFlow's own (Eigen) routines: TF_ENABLE_ONEDNN_OPTS, which TensorFlow reads once
  when it loads, so the choice is applied before `import tensorflow`;
- the weight gradients x^T dy through the BLAS op (t2t_lite/blas) or TensorFlow's matmul (the
  op only where it can be built: `pip install 't2t_lite[blas]'` and a C++ compiler);
- inter_op threads: 0 (TensorFlow's pool, independent products at once on a core each) or 1
  (one operation at a time on every core; benchmarks/README.md, profile_step.py).

`measure` times transformer_small's products over 4,096 tokens (STEP_PRODUCTS: each dense-layer
shape forward, and its input and weight gradients together as the backward pass runs them, and
the vocabulary projection), weighted by how often a step runs each, in one subprocess per oneDNN
setting (`python -m t2t_lite.cpu_tuning --measure` prints JSON), then one with inter_op 1
under the better setting. `choose` takes the fastest, but keeps the candidate nearest today's
default (DEFAULT) whenever it is within NOISE_MARGIN of the fastest, so that noise never flips a
choice. The result is cached as JSON per CPU (model name and AVX2 / AVX-512 / AVX512_BF16 / AMX)
and TensorFlow version under the BLAS op's cache folder, and read without TensorFlow.

Importing this module changes nothing and loads no TensorFlow. `apply()` chooses, before
TensorFlow loads: every program calls it first (bin/common.py: only the trainer may measure),
and a library user in Python gets the programs' tuning by calling it before importing
TensorFlow (`cpu_tuning.apply()` measures as the trainer does; `apply(may_measure=False)`
chooses as the other programs do). The library's own paths (the BLAS op, the trainer's thread
pools) read `current()`, which is that choice, or, when `apply` was not called, the choice
made then as the programs other than the trainer make it, oneDNN left as TensorFlow loaded.
The setting (`--cpu_tuning` of t2t_lite-trainer, else T2T_LITE_CPU_TUNING, else "auto") is
one of SETTINGS or parts joined by "+" (PARTS, e.g. "onednn+blas"). TF_ENABLE_ONEDNN_OPTS and
T2T_LITE_BLAS set by the user win over any setting.
"""
import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time

from t2t_lite import atomic_files
from t2t_lite.errors import FlagError

SETTING_VARIABLE = "T2T_LITE_CPU_TUNING"
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"  # read by TensorFlow when it loads
BLAS_VARIABLE = "T2T_LITE_BLAS"  # 0 turns the BLAS op off (t2t_lite/blas/matmul.py)
CACHE_VARIABLE = "T2T_LITE_CACHE"  # the cache folder (default ~/.cache/t2t_lite)
NOISE_MARGIN = 0.03  # a candidate must be this much faster to move away from today's default
MEASURE_SECONDS = 20  # what the announcement promises (2 cores, transformer_small's products)
CHILD_TIMEOUT_S = 900  # per subprocess; the first may compile the BLAS op (at most 600 s)

AUTO, MEASURE, DEFAULT_SETTING, CACHED = "auto", "measure", "default", "cached"
SETTINGS = {
    AUTO: "the choice cached for this CPU and TensorFlow, measured first if there is none "
          "(t2t_lite-trainer; the other programs take today's default then)",
    MEASURE: "measure again and cache the result",
    DEFAULT_SETTING: "today's default: oneDNN on x86-64, the BLAS weight gradients (where the op "
                     "can be built), inter_op 0",
    CACHED: "the cached choice, else today's default; never measures",
}
PARTS = ("onednn", "eigen", "blas", "inter_op1")  # an explicit choice, e.g. "eigen+blas"


@dataclasses.dataclass(frozen=True)
class CpuTuning:
    """How a training step is tuned to the CPU."""
    onednn: bool                  # TF_ENABLE_ONEDNN_OPTS=1 (else TensorFlow's Eigen routines)
    blas_weight_gradients: bool   # x^T dy through the BLAS op (else tf.matmul)
    inter_op_threads: int = 0     # 0: TensorFlow's pool; 1: one operation at a time

    def setting(self) -> str:
        """The explicit setting that asks for this choice, e.g. "onednn+blas"."""
        parts = ["onednn" if self.onednn else "eigen"]
        parts += ["blas"] if self.blas_weight_gradients else []
        parts += ["inter_op1"] if self.inter_op_threads == 1 else []
        return "+".join(parts)

    def describe(self) -> str:
        """"oneDNN on, weight gradients by the BLAS op, inter_op 0"."""
        gradients = "the BLAS op" if self.blas_weight_gradients else "TensorFlow's matmul"
        return (f"oneDNN {'on' if self.onednn else 'off'}, weight gradients by {gradients}, "
                f"inter_op {self.inter_op_threads}")


def is_x86_64() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def default_choice() -> CpuTuning:
    """Today's default, kept unless a measurement beats it by more than NOISE_MARGIN: oneDNN
    on x86-64 (TensorFlow turns it on only for AVX-512 VNNI / BF16 / AMX; on AVX2 its Eigen
    routines were slower: benchmarks/README.md, "oneDNN"), the BLAS weight gradients, inter_op 0."""
    return CpuTuning(onednn=is_x86_64(), blas_weight_gradients=True, inter_op_threads=0)


def parts_differing(choice: CpuTuning, other: CpuTuning) -> int:
    return sum(getattr(choice, field.name) != getattr(other, field.name)
               for field in dataclasses.fields(CpuTuning))


def choose(timings: dict, default: CpuTuning = None,
           margin: float = NOISE_MARGIN) -> CpuTuning:
    """The choice from `timings` ({CpuTuning: seconds of the step's products under it}):
    among the candidates within `margin` of the fastest (seconds <= fastest * (1 + margin)),
    the one differing from `default` (default_choice()) in the fewest parts, the faster of
    those, and of equal times the first by setting name. So a candidate replaces today's
    default only when it is faster by more than the margin, and noise never flips a choice.
    Without timings, `default`."""
    default = default or default_choice()
    if not timings:
        return default
    fastest = min(timings.values())
    close = [choice for choice, seconds in timings.items()
             if seconds <= fastest * (1 + margin)]
    return min(close, key=lambda choice: (parts_differing(choice, default), timings[choice],
                                          choice.setting()))


class SettingError(FlagError):
    """A --cpu_tuning / T2T_LITE_CPU_TUNING value that names no setting."""


def parse_setting(text: str):
    """One of SETTINGS (returned as is), or a CpuTuning from parts joined by "+": "onednn"
    or "eigen" (required), "blas", "inter_op1"."""
    text = (text or AUTO).strip().lower()
    if text in SETTINGS:
        return text
    parts = [part.strip() for part in text.split("+")]
    unknown = [part for part in parts if part not in PARTS]
    libraries = [part for part in parts if part in ("onednn", "eigen")]
    if unknown or len(libraries) != 1 or len(set(parts)) != len(parts):
        raise SettingError(
            f"CPU tuning {text!r}: give one of {', '.join(SETTINGS)}, or onednn or eigen "
            "with, joined by +, blas (the BLAS weight gradients) and inter_op1, e.g. "
            "onednn+blas")
    return CpuTuning(onednn=libraries[0] == "onednn", blas_weight_gradients="blas" in parts,
                        inter_op_threads=1 if "inter_op1" in parts else 0)


def setting_from_argv(argv, flag: str = "cpu_tuning"):
    """The value of --flag in `argv` (the last one), else None: a program's flag read before
    absl parses the flags, because TensorFlow loads first."""
    value = None
    for index, argument in enumerate(argv[1:], start=1):
        if argument == "--":
            break
        if argument.startswith(f"--{flag}="):
            value = argument.split("=", 1)[1]
        elif argument == f"--{flag}" and index + 1 < len(argv):
            value = argv[index + 1]
    return value


# --- This machine and the cache --------------------------------------------------------------

FEATURES = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX512_BF16",
            "amx_tile": "AMX"}  # /proc/cpuinfo's names -> ours


def machine() -> dict:
    """{"cpu": model name, "features": the FEATURES it has, "tensorflow": version}, read from
    /proc/cpuinfo and the installed package, without loading TensorFlow."""
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and cpu == (platform.processor()
                                                           or platform.machine()):
                    cpu = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {"cpu": cpu, "features": [name for flag, name in FEATURES.items() if flag in flags],
            "tensorflow": tensorflow_version()}


def multiplies_in_bfloat16(host: dict = None) -> bool:
    """Whether the CPU has bfloat16 matmul instructions (AVX512_BF16, or AMX), which oneDNN
    uses for bfloat16 products: where hparams.mixed_precision="auto" trains in bfloat16."""
    return bool({"AVX512_BF16", "AMX"} & set((host or machine())["features"]))


def tensorflow_version() -> str:
    for distribution in ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def cache_folder() -> str:
    """$T2T_LITE_CACHE, else t2t_lite under $XDG_CACHE_HOME or ~/.cache (where the BLAS op is
    compiled too)."""
    return os.environ.get(CACHE_VARIABLE) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "t2t_lite")


def cache_path(host: dict = None) -> str:
    """cpu_tuning/<cpu>-<features>-tf<version>.json in the cache folder."""
    host = host or machine()
    name = "-".join([host["cpu"]] + host["features"] + ["tf" + host["tensorflow"]])
    name = re.sub(r"[^a-z0-9_.]+", "-", name.lower()).strip("-")
    return os.path.join(cache_folder(), "cpu_tuning", name + ".json")


def read_cached(path: str):
    """The cached record ({"choice": CpuTuning, ...}), or None when there is none or it does
    not read (then it is measured again)."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        record["choice"] = CpuTuning(**record["choice"])
        return record
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as error:
        print(f"warning: the cached CPU tuning {path} does not read ({error}); "
              "measuring again", file=sys.stderr)
        return None


def write_cached(path: str, record: dict):
    """Writes `record` (its choice and timings as JSON) whole or not at all, under a temporary
    name of this process (atomic_files, without TensorFlow, which must not load before oneDNN
    is chosen)."""
    record = dict(record, choice=dataclasses.asdict(record["choice"]))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_files.local_atomic_write(path, owner=str(os.getpid())) as handle:
        json.dump(record, handle, indent=1)
        handle.write("\n")


# --- Measuring ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Product:
    """x [rows, depth_in] · W [depth_in, depth_out] as a step runs it `count` times, with its
    input gradient dy · W^T and weight gradient x^T · dy. `embedding`: the fused output layer's
    weights stored [depth_out, depth_in] (logits h E^T; dh = e E and dE = e^T h, both through
    the BLAS op when it is on; t2t_lite/training/output_layer_loss.py)."""
    rows: int
    depth_in: int
    depth_out: int
    count: int
    embedding: bool = False


def step_products(tokens=4096, hidden=256, filter_size=1024, layers=3, vocab=8192) -> list:
    """The products of one transformer_small step over `tokens` source and target tokens
    (benchmarks/training_run.py, dense_shapes): attention projections (encoder q, k, v, out;
    decoder self-attention q, k, v, out, encoder-decoder q, out and k, v of the memory), the
    feed-forward layers and the vocabulary projection of output_layer_chunk_rows = 4,096."""
    return [Product(tokens, hidden, hidden, 12 * layers),
            Product(tokens, hidden, filter_size, 2 * layers),
            Product(tokens, filter_size, hidden, 2 * layers),
            Product(tokens, hidden, vocab, 1, embedding=True)]


STEP_PRODUCTS = step_products()


class MeasurementError(Exception):
    """A measuring subprocess failed; the message says how."""


def _run_child(onednn: bool, inter_op_threads: int, products, repeats: int,
               blas: bool) -> dict:
    """One measuring subprocess under the oneDNN setting: its JSON ({"onednn": as TensorFlow
    reports it, "seconds": {"tensorflow": s, "blas": s or None}}). `blas`: the op is timed too
    (built first if the cache lacks it). The BLAS op's console lines (its build announced, or
    why it is unavailable) are passed on as the subprocess prints them; the rest of its stderr
    is kept for the error message."""
    from t2t_lite.blas import library
    environment = dict(os.environ, **{ONEDNN_VARIABLE: "1" if onednn else "0",
                                      "TF_CPP_MIN_LOG_LEVEL": "3"})
    environment.pop(SETTING_VARIABLE, None)
    command = [sys.executable, "-m", "t2t_lite.cpu_tuning", "--measure",
               f"--inter_op_threads={inter_op_threads}", f"--repeats={repeats}",
               f"--blas={int(blas)}",
               "--products=" + json.dumps([dataclasses.asdict(p) for p in products])]
    timed_out, errors = threading.Event(), []
    with subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as process:
        def stop():
            timed_out.set()
            process.kill()
        timer = threading.Timer(CHILD_TIMEOUT_S, stop)
        timer.start()
        try:
            for line in process.stderr:  # its one line of JSON waits in stdout's pipe
                for start in (library.COMPILING, library.UNAVAILABLE):
                    if start in line:
                        print(line[line.index(start):].rstrip(), file=sys.stderr, flush=True)
                errors.append(line)
            output = process.stdout.read()
            process.wait()
        finally:
            timer.cancel()
    if timed_out.is_set():
        raise MeasurementError(f"a measurement ran longer than {CHILD_TIMEOUT_S} s")
    lines = output.strip().splitlines()
    if process.returncode or not lines:
        last = ("".join(errors).strip().splitlines() or ["no output"])[-1]
        raise MeasurementError(f"the measuring process failed (status {process.returncode}): "
                               f"{last}")
    return json.loads(lines[-1])


def blas_missing():
    """Why the BLAS op cannot be built here (t2t_lite.blas.library.missing), or None."""
    from t2t_lite.blas import library
    return library.missing()


def measure(products=None, repeats: int = 2, run=_run_child) -> dict:
    """{CpuTuning: seconds of the step's products under it}: oneDNN on and off (on x86-64;
    elsewhere TensorFlow's own routines only) at inter_op 0, each with and without the BLAS op where
    it can be built and loads (tried until a subprocess finds that it does not, which says
    why); then inter_op 1 under the better oneDNN setting. `run` is _run_child (tests inject
    timings through it)."""
    products = products or STEP_PRODUCTS
    timings = {}
    try_blas = blas_missing() is None

    def add(onednn, inter_op_threads):
        nonlocal try_blas
        result = run(onednn, inter_op_threads, products, repeats, try_blas)
        try_blas = try_blas and result["seconds"].get("blas") is not None
        if result["onednn"] != onednn:  # this TensorFlow cannot switch oneDNN here
            return
        for blas, seconds in ((False, result["seconds"]["tensorflow"]),
                              (True, result["seconds"].get("blas"))):
            if seconds is not None:
                timings[CpuTuning(onednn, blas, inter_op_threads)] = seconds

    for onednn in ((True, False) if is_x86_64() else (False,)):
        add(onednn, 0)
    add(choose(timings).onednn if timings else default_choice().onednn, 1)
    return timings


def measure_and_cache(path: str, products=None, repeats: int = 2, run=_run_child) -> dict:
    """Announces the measurement on the console, measures, chooses and caches; returns the
    record written."""
    host, missing = machine(), blas_missing()
    print(f"measuring which CPU tuning pays on {host['cpu']}, TensorFlow {host['tensorflow']}"
          + (f" (not the BLAS op: {missing})" if missing else "")
          + f": about {MEASURE_SECONDS} s, once; cached in {path}; --cpu_tuning=default (or "
          f"{SETTING_VARIABLE}=default) skips this", file=sys.stderr, flush=True)
    start = time.monotonic()
    timings = measure(products, repeats, run)
    choice = choose(timings)
    record = {"choice": choice, "machine": host, "noise_margin": NOISE_MARGIN,
              "default": dataclasses.asdict(default_choice()),
              "timings": [dict(dataclasses.asdict(c), seconds=s) for c, s in timings.items()],
              "products": [dataclasses.asdict(p) for p in (products or STEP_PRODUCTS)],
              "measured": datetime.datetime.now().isoformat(timespec="seconds"),
              "measuring_seconds": round(time.monotonic() - start, 1)}
    write_cached(path, record)
    return record


def _time_products(products, repeats: int, blas: bool = True) -> dict:
    """In the measuring subprocess: {"tensorflow": s, "blas": s or None}, the seconds of the
    products' forward and backward passes weighted by their counts (min over `repeats` calls
    after one to warm up), the weight gradients by tf.matmul or, with `blas` where it loads, by
    the BLAS op."""
    import tensorflow as tf
    from t2t_lite.blas import library
    op = library.load() if blas else None

    def seconds(function, *operands):
        function(*operands).numpy()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            function(*operands).numpy()
            times.append(time.perf_counter() - start)
        return min(times)

    def backward(blas):
        def weight_gradient(a, b, transpose_a):
            if blas:
                return op.t2t_lite_blas_mat_mul(a, b, transpose_a=transpose_a)
            return tf.matmul(a, b, transpose_a=transpose_a)

        @tf.function
        def dense(x, w, dy):  # dx and dW are independent: inter_op decides if they overlap
            return (tf.matmul(dy, w, transpose_b=True)[0, 0]
                    + weight_gradient(x, dy, True)[0, 0])

        @tf.function
        def embedding(h, e_weights, e):  # dh = e E, dE = e^T h (output_layer_loss.py)
            multiply = weight_gradient if blas else (
                lambda a, b, transpose_a: tf.matmul(a, b, transpose_a=transpose_a))
            return multiply(e, e_weights, False)[0, 0] + multiply(e, h, True)[0, 0]
        return dense, embedding

    forward = tf.function(lambda x, w, transpose_b: tf.matmul(x, w, transpose_b=transpose_b)[0, 0])
    totals = {"tensorflow": 0.0, "blas": 0.0 if op is not None else None}
    backwards = {"tensorflow": backward(False), "blas": backward(True) if op else None}
    for product in products:
        x = tf.random.normal([product.rows, product.depth_in])
        dy = tf.random.normal([product.rows, product.depth_out])
        w = tf.random.normal([product.depth_out, product.depth_in] if product.embedding
                             else [product.depth_in, product.depth_out])
        common = seconds(lambda a, b: forward(a, b, product.embedding), x, w)
        for name, functions in backwards.items():
            if functions is None:
                continue
            dense, embedding = functions
            if product.embedding:
                pass_seconds = seconds(embedding, x, w, dy)
            else:
                pass_seconds = seconds(dense, x, w, dy)
            totals[name] += product.count * (common + pass_seconds)
    return totals


def _measure_main(argv):
    parser = argparse.ArgumentParser(prog="python -m t2t_lite.cpu_tuning")
    parser.add_argument("--measure", action="store_true", required=True)
    parser.add_argument("--inter_op_threads", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--blas", type=int, default=1)
    parser.add_argument("--products", default=None)
    arguments = parser.parse_args(argv)
    products = ([Product(**p) for p in json.loads(arguments.products)] if arguments.products
                else STEP_PRODUCTS)
    import tensorflow as tf
    from tensorflow.python.util import _pywrap_util_port
    tf.config.threading.set_inter_op_parallelism_threads(arguments.inter_op_threads)
    seconds = _time_products(products, arguments.repeats, bool(arguments.blas))
    print(json.dumps({"onednn": bool(_pywrap_util_port.IsMklEnabled()), "seconds": seconds,
                      "inter_op_threads": arguments.inter_op_threads}))


# --- Applying ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Applied:
    """What `apply` chose for this process, and why (the console line's parenthesis)."""
    choice: CpuTuning
    reason: str

    def line(self) -> str:
        return f"CPU tuning: {self.choice.describe()} ({self.reason})"


_applied = None  # the Applied of this process, once `apply` ran
_onednn_set_here = None  # the TF_ENABLE_ONEDNN_OPTS value `apply` set (not the user's)


def applied():
    """The Applied of this process, or None if `apply` was not called."""
    return _applied


def current() -> Applied:
    """The CPU tuning of this process, as the library's own paths read it (the BLAS op:
    t2t_lite/blas/matmul.py; the trainer's inter_op pool: bin/common.py): `applied()`, else
    chosen and announced now as the programs other than the trainer choose (the setting in
    T2T_LITE_CPU_TUNING, else the cached measurement, else today's default; never measuring),
    oneDNN as TensorFlow loaded if it has. Raises SettingError."""
    return _applied or apply(may_measure=False)


def _switch(variable: str):
    """True / False for a 1 / 0 the user set in `variable`, else None."""
    value = os.environ.get(variable, "").strip().lower()
    if variable == ONEDNN_VARIABLE and _onednn_set_here is not None and value == _onednn_set_here:
        return None
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return None


def _decide(setting, may_measure: bool, products, run):
    """(CpuTuning, reason) for a parsed setting."""
    if isinstance(setting, CpuTuning):
        return setting, f"{SETTING_VARIABLE} or --cpu_tuning={setting.setting()}"
    if setting == DEFAULT_SETTING:
        return default_choice(), "today's default, as asked"
    path = cache_path()
    host = machine()
    where = f"{host['cpu']}, TF {host['tensorflow']}"
    if setting != MEASURE:
        record = read_cached(path)
        if record is not None:
            return record["choice"], f"measured on {where}, cached in {path}"
        if setting == CACHED or not may_measure:
            return default_choice(), f"today's default: nothing measured yet for {where}"
    try:
        record = measure_and_cache(path, products, run=run)
    except (MeasurementError, OSError, ValueError) as error:
        print(f"warning: measuring the CPU tuning failed ({error}); using today's default",
              file=sys.stderr)
        return default_choice(), f"today's default: the measurement failed on {where}"
    return record["choice"], (f"measured now on {where} in {record['measuring_seconds']} s, "
                              f"cached in {path}")


def _onednn_loaded():
    """Whether the TensorFlow already loaded runs oneDNN; None before it loads."""
    if "tensorflow" not in sys.modules:
        return None
    from tensorflow.python.util import _pywrap_util_port
    return bool(_pywrap_util_port.IsMklEnabled())


def apply(setting: str = None, may_measure: bool = True, announce: bool = True,
          onednn_only: bool = False, products=None, run=_run_child) -> Applied:
    """Chooses this process's CPU tuning and sets TF_ENABLE_ONEDNN_OPTS for it; call it
    before TensorFlow loads (after, oneDNN stays as TensorFlow loaded it, and the result says
    so). `setting`: SETTINGS or parts (parse_setting); None reads T2T_LITE_CPU_TUNING, else
    "auto". `may_measure`: "auto" measures when nothing is cached (else today's default).
    TF_ENABLE_ONEDNN_OPTS and T2T_LITE_BLAS set to 0 or 1 by the user win; the BLAS op is
    never chosen where it cannot be built (blas_missing). The BLAS op and the trainer's
    thread pools read the result (`current()`; not with `onednn_only`, which sets oneDNN
    alone); with `announce`, its line goes to stderr. Raises SettingError."""
    global _applied, _onednn_set_here
    parsed = parse_setting(setting if setting is not None else os.environ.get(SETTING_VARIABLE))
    choice, reason = _decide(parsed, may_measure, products, run)
    overrides = []
    for variable, field in ((ONEDNN_VARIABLE, "onednn"), (BLAS_VARIABLE,
                                                          "blas_weight_gradients")):
        user = _switch(variable)
        if user is not None and user != getattr(choice, field):
            choice = dataclasses.replace(choice, **{field: user})
            overrides.append(f"{variable}={int(user)} set by you")
    missing = blas_missing() if choice.blas_weight_gradients else None
    if missing:
        choice = dataclasses.replace(choice, blas_weight_gradients=False)
        overrides.append(f"no BLAS op: {missing}")
    loaded = _onednn_loaded()
    if loaded is not None:
        if loaded != choice.onednn:
            choice = dataclasses.replace(choice, onednn=loaded)
            overrides.append("oneDNN as TensorFlow loaded before the choice")
    elif is_x86_64() or isinstance(parsed, CpuTuning):
        # Elsewhere TensorFlow's own default stays unless oneDNN was asked for by name.
        _onednn_set_here = "1" if choice.onednn else "0"
        os.environ[ONEDNN_VARIABLE] = _onednn_set_here
    result = Applied(choice, "; ".join([reason] + overrides))
    if not onednn_only:
        _applied = result
    if announce:
        print(result.line(), file=sys.stderr, flush=True)
    return result


def prefer_onednn() -> bool:
    """Sets oneDNN as the cached measurement chose it for this CPU and TensorFlow (today's
    default, on for x86-64, when nothing is cached), never measuring and touching nothing but
    oneDNN: TF_ENABLE_ONEDNN_OPTS set by the user wins. Returns whether oneDNN will be on; has
    no effect once TensorFlow is loaded. The programs apply the whole choice (`apply`, in
    bin/common.py); the tests take this part only."""
    applied = apply(CACHED, may_measure=False, announce=False, onednn_only=True)
    return applied.choice.onednn


if __name__ == "__main__":
    _measure_main(sys.argv[1:])
