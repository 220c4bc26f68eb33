"""What every benchmark shares: the Multi30k setup, the machine it ran on, child processes,
alternating rounds with their ratios and summaries, tables and JSON, and the clocks of a
decoding contestant's passes (benchmarks/README.md, "The harness").

The standard library only at import, so that the peers' programs import it too, in their own
environments. It puts benchmarks/ and benchmarks/peers/ on sys.path: the shared modules are
imported by their names (harness, peer_environment, peer_training, ctranslate2_runtime), the
peers' programs by `peer_module`. t2t_lite's programs run as the installed console scripts
(`t2t_lite_command`), and a benchmark's entry point (`run_main`) ends a failed child with one
line naming its log.
"""
import importlib.util
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import sysconfig
import time

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCHMARKS)
PEERS = os.path.join(BENCHMARKS, "peers")
for _folder in (PEERS, BENCHMARKS):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

# --- Multi30k, the comparison's model and the peers -------------------------------------------

PROBLEM = "translate_multi30k_deen"
HPARAMS_SET = "transformer_small"
DEFAULT_TMP_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))
NO_PYTHON_EXIT_STATUS = 3  # a peer's program: it cannot run here (no Python for its environment)
ONEDNN = "TF_ENABLE_ONEDNN_OPTS"
ONEDNN_ON_LINE = "oneDNN custom operations are on"  # TensorFlow's log line when it loads oneDNN
AVERAGED = os.path.join("averaged", "model.ckpt")  # t2t_lite's averaged checkpoint in a run


def define_data_flags(flags, test_sentences: bool = False):
    """--data_dir (generated there when missing), --tmp_dir (the raw Multi30k files) and, for a
    script that translates the test set, --test_sentences."""
    flags.DEFINE_string("data_dir", None, f"Generated {PROBLEM} (generated there from --tmp_dir "
                        "when missing).")
    flags.DEFINE_string("tmp_dir", DEFAULT_TMP_DIR, "Folder of the raw Multi30k files.")
    if test_sentences:
        flags.DEFINE_integer("test_sentences", 0, "Translate only the first this many "
                             "sentences of test_2016_flickr (0: all 1,000; fewer only for a quick "
                             "check, not for a result).", lower_bound=0)


def peer_module(relative_path: str):
    """A program under benchmarks/peers/ (e.g. "eole/run.py") as a module; its flags are defined
    only when it runs as a program."""
    name = "peer_" + re.sub(r"\W", "_", relative_path[:-3])
    spec = importlib.util.spec_from_file_location(name, os.path.join(PEERS, relative_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def t2t_lite_checkpoint(output_dir: str, checkpoint: str = None) -> str:
    """`checkpoint`, else the run's averaged checkpoint (multi30k_recipe.py's and race.py's; a
    folder, or in the old layout files), else its latest."""
    import tensorflow as tf
    averaged = os.path.join(output_dir, AVERAGED)
    found = checkpoint or (averaged if os.path.isdir(averaged) or os.path.exists(
        averaged + ".index") else tf.train.latest_checkpoint(output_dir))
    if not found:
        raise ValueError(f"{output_dir} has no checkpoint")
    return found


# --- Schedules as (warmup, peak learning rate) ----------------------------------------------------

def parse_schedule(text: str) -> tuple:
    """"1000,1e-3" -> (1000, 0.001): warmup updates and the peak learning rate."""
    try:
        warmup, peak = text.split(",")
        warmup, peak = int(warmup), float(peak)
    except ValueError:
        raise ValueError(f"a schedule is WARMUP,PEAK (e.g. 1000,1e-3), not {text!r}") from None
    if warmup < 1 or not peak > 0:
        raise ValueError(f"schedule {text!r}: warmup must be >= 1 and the peak rate > 0")
    return warmup, peak


def learning_rate_constant(warmup: int, peak: float, hidden_size: int) -> float:
    """The constant of t2t's constant * min(1, s/warmup) * rsqrt(max(s, warmup)) *
    rsqrt(hidden_size) (OpenNMT-tf's NoamDecay scale, eole's noam learning_rate) whose
    highest rate, at s = warmup, is `peak`."""
    return peak * math.sqrt(warmup) * math.sqrt(hidden_size)


def schedule_name(warmup: int, peak: float) -> str:
    return f"w{warmup}_p{peak:g}"


# --- The machine ---------------------------------------------------------------------------------

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
# Words of a model name that name a CPU line, with its maker (the model name may lack it).
CPU_LINES = (("EPYC", "AMD"), ("Threadripper", "AMD"), ("Ryzen", "AMD"), ("Opteron", "AMD"),
             ("Xeon", "Intel"), ("Core", "Intel"), ("Atom", "Intel"), ("Pentium", "Intel"),
             ("Celeron", "Intel"))


def cpu_line(model_name: str) -> str:
    """"AMD EPYC" for "AMD EPYC 7B13 64-Core Processor"; an unknown line without trademarks,
    clock and "Processor"."""
    words = re.sub(r"\((R|TM|tm|r)\)|[®™]|@.*$|\b\d+-Core\b|\bProcessor\b|\bCPU\b", " ",
                   model_name or "").split()
    for line, maker in CPU_LINES:
        if line in words:
            return f"{maker} {line}"
    return " ".join(words) or "unknown CPU"


def cpu_kind(model_name: str, flags) -> str:
    """The CPU's line and widest float32 and bfloat16 vector instructions ("AMD EPYC, AVX-512 +
    AVX512_BF16"; the line alone without x86 flags)."""
    flags = set(flags)
    if not flags:
        return cpu_line(model_name)
    if "avx512f" in flags:
        isa = ["AVX-512"] + (["AVX512_BF16"] if "avx512_bf16" in flags else [])
    else:
        isa = ["AVX2" if "avx2" in flags else "no AVX2"]
    if flags & {"amx_tile", "amx_bf16", "amx_int8"}:
        isa.append("AMX")
    return f"{cpu_line(model_name)}, {' + '.join(isa)}"


def cpu_description(cpuinfo: str) -> dict:
    """The first processor of a /proc/cpuinfo text: {"model_name", "vendor", "family", "model",
    "stepping" (or None), "flags": {name: bool for CPU_FLAGS}, "kind": cpu_kind}."""
    fields = {}
    for line in cpuinfo.strip().split("\n\n")[0].splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())

    def number(key):
        value = fields.get(key, "")
        return int(value) if value.isdigit() else None

    return {"model_name": fields.get("model name"), "vendor": fields.get("vendor_id"),
            "family": number("cpu family"), "model": number("model"),
            "stepping": number("stepping"), "flags": {name: name in flags for name in CPU_FLAGS},
            "kind": cpu_kind(fields.get("model name"), flags)}


def machine() -> dict:
    """The CPU (cpu_description's; "cpu", the kind, is what every table header prints), cores,
    memory, TensorFlow, Keras, oneDNN and the load."""
    import keras
    import tensorflow as tf
    with open("/proc/cpuinfo", encoding="utf-8") as cpu, open("/proc/meminfo") as memory:
        cpu, memory_kb = cpu.read(), re.search(r"MemTotal:\s*(\d+)", memory.read()).group(1)
    described = cpu_description(cpu)
    return {"cpu": described["kind"], "cpu_kind": described["kind"],
            "cpu_model": described["model_name"], "cpu_vendor": described["vendor"],
            "cpu_family": described["family"], "cpu_model_number": described["model"],
            "cpu_stepping": described["stepping"], "cpu_flags": described["flags"],
            "cores": os.cpu_count(), "avx512f": described["flags"]["avx512f"],
            "memory_gb": round(int(memory_kb) / 2**20, 1), "tensorflow": tf.__version__,
            "keras": keras.__version__, "onednn": onednn_enabled(),
            "load_average_at_start": os.getloadavg()}


def machine_line(host: dict) -> str:
    """What a table header says of the machine: "AMD EPYC, AVX2, 2 cores, TF 2.21.0"."""
    return f"{host['cpu']}, {host['cores']} cores, TF {host['tensorflow']}"


def onednn_enabled() -> bool:
    """Whether this process's TensorFlow runs oneDNN's kernels (decided when it loaded)."""
    from tensorflow.python.util import _pywrap_util_port
    return bool(_pywrap_util_port.IsMklEnabled())


# --- Child processes -----------------------------------------------------------------------------

CHILD_FAILED_EXIT_STATUS = 1  # a benchmark script whose child failed (its log says why)


class ChildFailed(RuntimeError):
    """A child process failed or ended without its result; `status` is its exit status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class ProgramMissing(RuntimeError):
    """A t2t_lite program that this Python has no console script of (t2t_lite not installed)."""


def script_folders() -> list:
    """Where this Python's console scripts are installed: beside the interpreter (a virtual
    environment's bin/), its installation scheme's scripts folder, and the user scheme's
    (`pip install --user`); each once, in that order."""
    folders = [os.path.dirname(sys.executable), sysconfig.get_path("scripts"),
               sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user"))]
    return list(dict.fromkeys(folders))


def t2t_lite_command(program: str) -> list:
    """The command that starts t2t_lite's program `program` ("trainer", "avg-checkpoints"):
    its installed console script t2t_lite-<program>, which imports the installed package
    whatever the working folder (`python -m t2t_lite.bin.<program>` would import a clone's own
    t2t_lite/ first, which has no bin/). Raises ProgramMissing, naming `pip install .`, when
    this Python has none."""
    name = f"t2t_lite-{program}"
    for folder in script_folders():
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return [path]
    raise ProgramMissing(f"{name} is not installed for {sys.executable} (looked in "
                         f"{', '.join(script_folders())}): install t2t_lite with `pip install .` "
                         "in the repository's folder first")


def command_name(command: list) -> str:
    """What a message calls a child: its program's file name ("t2t_lite-exporter"); for a
    Python, the script it runs (under benchmarks/: its path there, "peers/eole/run.py") or the
    module of -m."""
    program = os.path.basename(command[0])
    if not program.startswith("python") or len(command) < 2:
        return program
    if command[1] == "-m" and len(command) > 2:
        return command[2]
    script = os.path.abspath(command[1])
    inside = os.path.commonpath([script, BENCHMARKS]) == BENCHMARKS
    return os.path.relpath(script, BENCHMARKS) if inside else os.path.basename(script)


def run_main(main):
    """A benchmark script's entry point: t2t_lite's common.run_main(main) (absl's flags, the
    user's mistakes as one `error:` line and exit status 2), and a child that failed
    (ChildFailed) or a peer's step that failed (peer_environment.PeerError, naming its log) as
    one `error:` line and CHILD_FAILED_EXIT_STATUS, a t2t_lite program not installed
    (ProgramMissing) as one line and status 2; no traceback for any of them."""
    from t2t_lite.bin import common  # here, not at import: the peers' environments lack it
    from peer_environment import PeerError  # it imports this module: not at the top

    def reported(argv):
        try:
            return main(argv)
        except ProgramMissing as error:
            common.exit_with_error(str(error))
        except (ChildFailed, PeerError) as error:
            sys.stdout.flush()
            print(f"error: {error}", file=sys.stderr, flush=True)
            sys.exit(CHILD_FAILED_EXIT_STATUS)
    common.run_main(reported)


def child_environment(changes: dict) -> dict:
    """This process's environment with `changes` (None removes a variable)."""
    environment = dict(os.environ)
    for name, value in changes.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return environment


def where_logged(log_path: str) -> str:
    """Where a failed child's message sends the reader: its log, else the output shown."""
    return f"its log: {log_path}" if log_path else "its output is above"


def run_logged(command: list, log_path: str = None, environment: dict = None,
               progress=None, append: bool = False, what: str = None) -> str:
    """Runs `command`, its stdout and stderr written to `log_path` as they come (after a
    "$ command" line when `append`) and the lines that match `progress` (a compiled pattern)
    echoed without a logger's prefix, after "[what]". Returns its output; a failure shows the
    output's end and raises ChildFailed naming the log."""
    lines = []
    with open(log_path or os.devnull, "a" if append else "w", encoding="utf-8") as log:
        if append:
            log.write(f"\n$ {' '.join(command)}\n")
            log.flush()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace", env=environment)
        for line in process.stdout:
            lines.append(line)
            log.write(line)
            log.flush()
            if progress is not None and progress.search(line):
                print(f"  {f'[{what}] ' if what else ''}{line.rstrip().split('] ', 1)[-1]}",
                      flush=True)
        status = process.wait()
    if status:
        print("".join(lines[-25:]), flush=True)
        raise ChildFailed(f"{what or command_name(command)} failed (exit status {status}); "
                          f"{where_logged(log_path)}", status)
    return "".join(lines)


def run_child(command: list, environment: dict, marker: str, log_path: str = None) -> dict:
    """run_logged, then the JSON of the output's last line that starts with `marker` + " "."""
    output = run_logged(command, log_path, environment)
    found = [line for line in output.splitlines() if line.startswith(marker + " ")]
    if not found:
        raise ChildFailed(f"{command_name(command)} printed no {marker} line; "
                          f"{where_logged(log_path)}", 0)
    return json.loads(found[-1][len(marker) + 1:])


def print_result(marker: str, result: dict):
    """A child's result line, which run_child reads."""
    print(f"{marker} {json.dumps(result)}", flush=True)


def thread_flags(intra: int, inter: int) -> list:
    return [f"--intra_op_parallelism_threads={intra}", f"--inter_op_parallelism_threads={inter}"]


def define_rounds_flags(flags, work_dir: str):
    """--rounds, --work_dir (every contestant-round's output and log) and --output_json."""
    flags.DEFINE_integer("rounds", 3, "Rounds: every contestant runs once a round, in turn, each "
                         "contestant-round in a process of its own.", lower_bound=1)
    flags.DEFINE_string("work_dir", work_dir, "Folder of every contestant-round's output and log "
                        "(round<R>_<contestant>.*) and of what the contestants need.")
    flags.DEFINE_string("output_json", None, "Write the measurements to this JSON file.")


# --- Rounds, ratios and summaries ----------------------------------------------------------------

def run_rounds(entries: list, rounds: int, run_one) -> list:
    """Every entry ({"name", "ours": a failure ends the run, "group": the entries a
    NO_PYTHON_EXIT_STATUS leaves out with it, "dropped": why it is out}) once a round, in turn:
    `run_one(entry, round_index)` returns its result or raises ChildFailed. Fills each entry's
    "rounds" (None where it did not run); returns the order, times and load averages."""
    order = []
    for entry in entries:
        entry["rounds"] = []
    for round_index in range(rounds):
        for entry in entries:
            if entry.get("dropped"):
                entry["rounds"].append(None)
                continue
            print(f"round {round_index + 1}/{rounds}: {entry['name']}", flush=True)
            start, load, result = time.time(), os.getloadavg(), None
            try:
                result = run_one(entry, round_index)
            except ChildFailed as error:
                if entry.get("ours"):
                    raise
                reason, group = str(error), entry.get("group", entry["name"])
                if error.status == NO_PYTHON_EXIT_STATUS:
                    reason += " (no Python for it)"
                for other in (e for e in entries if e.get("group", e["name"]) == group and (
                        e is entry or error.status == NO_PYTHON_EXIT_STATUS)):
                    other.setdefault("dropped", reason)
                print(f"  left out of the remaining rounds: {reason}", flush=True)
            order.append({"round": round_index + 1, "contestant": entry["name"], "start": start,
                          "seconds": time.time() - start, "load_average_before": load})
            entry["rounds"].append(result)
    return order


def per_round(entry: dict, key: str) -> list:
    return [result.get(key) if result else None for result in entry["rounds"]]


def spread(values) -> dict:
    """The median, min and max of the values that are not None (None without any)."""
    valid = [value for value in values if value is not None]
    if not valid:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(valid), "min": min(valid), "max": max(valid)}


def medians(results: list, keys) -> dict:
    """{key: median over the results that have it (None if none)}."""
    return {key: spread(result.get(key) for result in results if result)["median"]
            for key in keys}


def ratio_cells(r: dict) -> list:
    """A ratio's first cells in a table: "a / b", median, min, max."""
    return [f"{r['numerator']} / {r['denominator']}", *(fmt(r[k], ".2f") for k in (
        "median", "min", "max"))]


def ratio(a: dict, b: dict, key: str) -> dict:
    """Contestant a over b round by round ("per_round": a[key] / b[key] of each round, None
    where either did not run), with the median, min and max of those ratios."""
    each = [x / y if x and y else None for x, y in zip(per_round(a, key), per_round(b, key))]
    return {"numerator": a["name"], "denominator": b["name"], "per_round": each, **spread(each)}


def kept_windows(windows: list, skip_steps: int, left_out=None) -> list:
    """A training program's log windows that count, one rule for every toolkit: those after
    `skip_steps` updates that hold an update, less those `left_out` (e.g. XLA compiling)."""
    return [w for w in windows if w["first_step"] > skip_steps and w["step"] >= w["first_step"]
            and w.get("steps_per_s") and not (left_out and left_out(w))]


def window_medians(windows: list, skip_steps: int, left_out=None,
                   target: str = "target_tokens_per_s", source: str = "source_tokens_per_s"):
    """Medians over kept_windows of target and source tokens/s (keys `target`, `source`),
    steps/s and target tokens per step, and "throughput_windows" (rates None without any)."""
    kept = kept_windows(windows, skip_steps, left_out)
    rates = {"target_tokens_per_s": [w[target] for w in kept],
             "source_tokens_per_s": [w[source] for w in kept],
             "steps_per_s": [w["steps_per_s"] for w in kept],
             "target_tokens_per_step": [w[target] / w["steps_per_s"] for w in kept]}
    return {**{key: spread(values)["median"] for key, values in rates.items()},
            "throughput_windows": len(kept)}


# --- Tables and JSON -----------------------------------------------------------------------------

def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(headings: list, rows: list) -> str:
    """Text cells under `headings`, columns as wide as their widest cell, the first
    left-aligned, the others right-aligned but a last heading ending in "  " ("per round  ")."""
    widths = [max(len(str(row[i])) for row in [headings] + rows) for i in range(len(headings))]
    free = headings[-1].endswith("  ")

    def line(cells):
        text = [f"{cells[0]:<{widths[0]}}"] + [f"{cell:>{width + 2}}" for cell, width in zip(
            cells[1:len(cells) - free], widths[1:])]
        return "".join(text + ([f"  {cells[-1]}"] if free else [])).rstrip()
    return "\n".join([line(headings), "-" * len(line(headings))] + [line(row) for row in rows])


def pyplot():
    """matplotlib's pyplot, drawing into files only."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plot
    return plot


def save_figure(figure, path: str):
    """A figure as a PNG, written apart and renamed (as write_json writes)."""
    figure.tight_layout()
    figure.savefig(path + ".tmp", format="png")
    os.replace(path + ".tmp", path)


def write_json(path: str, value, announce: bool = True):
    """`value` as JSON in `path`, written apart and renamed: an interrupted run leaves the last
    complete record."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(json.dumps(value, indent=2) + "\n")
    os.replace(path + ".tmp", path)
    if announce:
        print(f"wrote {path}")


# --- A decoding contestant's clocks (decode_speed.py's children and the peers' decode.py) -------

def cpu_seconds() -> float:
    """CPU time of this process so far, every thread: beside a pass's wall time it tells a
    pass that waited for the CPU (another program on it) from one that did more work."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: VmHWM, its own high-water mark (getrusage's
    ru_maxrss, the fallback without /proc, carries over an exec from the parent)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def differing_lines(first: list, second: list) -> int:
    """Lines that differ between two passes' outputs, extra lines included (decoding is
    deterministic: 0)."""
    return sum(a != b for a, b in zip(first, second)) + abs(len(first) - len(second))


def two_passes(translate_all, write, result: dict) -> list:
    """The sentences translated twice: the first pass (tracing included) written by `write` (its
    end, `written_at`, ends the end-to-end time), the second timed ("seconds", "cpu_seconds");
    "passes_differ" compares them."""
    start = time.perf_counter()
    first = translate_all()
    write(first)
    result.update(written_at=time.time(), first_pass_seconds=time.perf_counter() - start)
    start, cpu = time.perf_counter(), cpu_seconds()
    second = translate_all()
    result.update(seconds=time.perf_counter() - start, cpu_seconds=cpu_seconds() - cpu,
                  passes_differ=differing_lines(first, second))
    return first


def latencies(translate_one, lines: list, warm_up_each: bool = False) -> list:
    """Seconds to translate each line alone, after one untimed line (after each line once with
    `warm_up_each`: an XLA-compiled search compiles each shape)."""
    for line in lines if warm_up_each else lines[:1]:
        translate_one(line)
    seconds = []
    for line in lines:
        start = time.perf_counter()
        translate_one(line)
        seconds.append(time.perf_counter() - start)
    return seconds
