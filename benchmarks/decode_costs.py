"""What decode_speed.py measures of the decoder's features beyond the 1-best (benchmarks/README.md,
decode_speed.py): the interactive decoder's answers timed through its pipes, and the checks of
the model's scores of given translations (a reference against a shuffled one; TensorFlow's
against CTranslate2's).

The standard library only, so that its tests need no TensorFlow.
"""
import random
import statistics
import subprocess
import threading
import time

import harness

READY = "ready: translating stdin a line at a time"  # t2t_lite-decoder --decode_interactive's
READY_TIMEOUT_SECONDS = 900  # the model loaded and its search traced, on a busy machine


def derangement(count: int, seed: int) -> list:
    """A fixed permutation of range(count) that moves every index (count >= 2): a shuffle by
    `seed`, each index left in place swapped with its neighbour. The shuffled references of
    the scoring check: no pair keeps its own reference."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    for i in range(count):
        if order[i] == i:
            j = (i + 1) % count
            order[i], order[j] = order[j], order[i]
    return order


def read_scores(lines: list) -> list:
    """The decoder's score lines (--score_targets: log-likelihood, pieces, mean per piece,
    tab-separated; an empty line for a pair not scored) as (log-likelihood, pieces) or None."""
    scores = []
    for line in lines:
        fields = line.split("\t")
        scores.append((float(fields[0]), int(fields[1])) if line.strip() else None)
    return scores


def reference_preference(references: list, shuffled: list) -> dict:
    """Of the pairs scored both ways ((log-likelihood, pieces) or None each), the fraction whose
    reference scores above the shuffled reference: by the mean per piece ("mean_above", the
    check's figure: lengths differ) and by the sum ("sum_above")."""
    both = [(a, b) for a, b in zip(references, shuffled) if a and b]
    count = max(len(both), 1)
    return {"pairs": len(both),
            "mean_above": sum(a[0] / a[1] > b[0] / b[1] for a, b in both) / count,
            "sum_above": sum(a[0] > b[0] for a, b in both) / count}


def score_agreement(first: list, second: list) -> dict:
    """Two engines' scores of the same pairs: the largest |difference| of the mean per piece
    and of the sum over the pairs both scored, and the pairs whose piece counts differ."""
    both = [(a, b) for a, b in zip(first, second) if a and b]
    return {"pairs": len(both),
            "max_mean_difference": max((abs(a[0] / a[1] - b[0] / b[1]) for a, b in both),
                                       default=None),
            "max_sum_difference": max((abs(a[0] - b[0]) for a, b in both), default=None),
            "pieces_differ": sum(a[1] != b[1] for a, b in both)}


def interactive_answers(command: list, sentences: list, log_path: str,
                        environment: dict = None) -> dict:
    """Starts `command` (t2t_lite-decoder --decode_interactive) with pipes, waits for its READY
    line on stderr (the model loaded, the search traced), then writes each sentence and times
    until its translation's line arrives on stdout: {"ready_seconds" (from the start),
    "latency_seconds" (a sentence each), "translations"}. Its stderr goes to `log_path`; a
    process that ends early raises harness.ChildFailed naming it."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, encoding="utf-8",
                               errors="replace", env=environment)
    ready = threading.Event()  # set on the READY line or when stderr closes
    saw_ready = threading.Event()  # set on the READY line only
    with open(log_path, "w", encoding="utf-8") as log:
        def drain():
            for line in process.stderr:
                log.write(line)
                log.flush()
                if READY in line:
                    saw_ready.set()
                    ready.set()
            ready.set()  # stderr closed: the process ended
        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            # stderr can close before the ended process is reaped, so poll() alone would race.
            ready.wait(READY_TIMEOUT_SECONDS)
            if not saw_ready.is_set() or process.poll() is not None:
                raise failed(command, process, log_path, "before its ready line")
            result = {"ready_seconds": time.perf_counter() - start, "latency_seconds": [],
                      "translations": []}
            for sentence in sentences:
                sent = time.perf_counter()
                process.stdin.write(sentence + "\n")
                process.stdin.flush()
                answer = process.stdout.readline()
                if not answer:
                    raise failed(command, process, log_path, "before its answer")
                result["latency_seconds"].append(time.perf_counter() - sent)
                result["translations"].append(answer.rstrip("\n"))
            process.stdin.close()
            status = process.wait(60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            reader.join(10)
    if status:
        raise failed(command, process, log_path, "after its answers")
    return result


def failed(command: list, process, log_path: str, when: str) -> harness.ChildFailed:
    """The ChildFailed of an interactive decoder that ended `when`, naming its log."""
    status = process.poll() if process.poll() is not None else "still running, stopped"
    return harness.ChildFailed(f"{harness.command_name(command)} --decode_interactive ended "
                               f"{when} (exit status {status}); {harness.where_logged(log_path)}",
                               process.poll() or 1)


def answer_summary(latencies: list) -> dict:
    """The first answer's latency and the median of the others (None with one answer)."""
    return {"first_answer_seconds": latencies[0],
            "other_answers_median_seconds": statistics.median(latencies[1:])
            if len(latencies) > 1 else None}
