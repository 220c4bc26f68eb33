"""What users do after the first translation, through t2t_lite-decoder on the trained copy
model (docs/decoding.md): n-best lists in the Moses format whose first is the default output,
the 1-best's scores, the model's scores of given translations (--score_targets) equal to the
n-best's raw log probabilities, target prefixes, alignments, reproducible sampling, and
--decode_interactive answering a line before the next one is written."""
import math
import os
import random
import select
import subprocess

import pytest

from program_runs import error_lines, program_command, run

BEAMS = 4
ALPHA = 0.6  # the search's default length penalty


def symbol_lines(count: int, seed: int) -> list:
    """Copy-task inputs: 1-12 of the symbols 1-10."""
    rng = random.Random(seed)
    return [" ".join(str(rng.randint(1, 10)) for _ in range(rng.randint(1, 12)))
            for _ in range(count)]


@pytest.fixture(scope="module")
def decoding(trained_copy_model, tmp_path_factory):
    """A function running t2t_lite-decoder on the copy model with `flags`, returning the output
    file (and asserting it exits 0; with `reuse`, an earlier run's of the same flags), and the
    folder and input file it uses."""
    data_dir, output_dir, _ = trained_copy_model
    folder = tmp_path_factory.mktemp("after_translation")
    source = folder / "source.txt"
    lines = symbol_lines(30, seed=5)
    lines[7] = ""  # a line not translated keeps its place
    source.write_text("\n".join(lines) + "\n")

    done = {}  # (flags, source file): the output of an earlier run

    def decode(name, *flags, source_file=source, reuse=False):
        if reuse and (flags, source_file) in done:
            return done[flags, source_file]
        out = folder / name
        status, output = run("decoder", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                             f"--decode_from_file={source_file}", f"--decode_to_file={out}",
                             *flags)
        assert status == 0, output
        done[flags, source_file] = out
        return out
    return decode, folder, lines


def n_best(path) -> dict:
    """{input index: [(translation, score), ...]} of a Moses n-best file."""
    hypotheses = {}
    for line in path.read_text().splitlines():
        index, translation, score = line.split(" ||| ")
        hypotheses.setdefault(int(index), []).append(
            (translation, float(score) if score else None))
    return hypotheses


def test_n_best_lists_scores_and_alignments(decoding):
    decode, folder, lines = decoding
    default = decode("default.txt", reuse=True).read_text().splitlines()
    out = decode("n_best.txt", "--decode_hparams=return_beams=true,write_beam_scores=true,"
                 "alignments=true")
    best, scores = zip(*(line.split("\t") for line in out.read_text().splitlines()))
    assert list(best) == default  # the 1-best of an n-best decoding is the default output
    assert sum(map(str.__eq__, default, lines)) >= 0.9 * len(lines)  # the model copies
    hypotheses = n_best(folder / "n_best.txt.nbest")
    assert sorted(hypotheses) == list(range(len(lines)))
    for index, found in hypotheses.items():
        if not lines[index]:
            assert found == [("", None)] and scores[index] == ""
            continue
        assert len(found) == BEAMS  # return_beams returns the whole beam, t2t's
        texts, values = zip(*found)
        assert texts[0] == default[index] and len(set(texts)) == BEAMS
        assert list(values) == sorted(values, reverse=True)
        assert float(scores[index]) == pytest.approx(values[0], abs=1e-6)

    # Alignments of the copy task: the diagonal for at least 95% of pieces.
    alignments = (folder / "n_best.txt.align").read_text().splitlines()
    assert len(alignments) == len(lines)
    pairs = [tuple(map(int, pair.split("-"))) for line in alignments for pair in line.split()]
    assert len(pairs) == sum(len(translation.split()) for translation in default)
    assert sum(i == j for i, j in pairs) >= 0.95 * len(pairs)


def test_scores_of_given_translations_are_the_n_best_raw_log_probabilities(decoding):
    """Each hypothesis' raw log probability (its beam score times t2t's length penalty
    ((5 + pieces) / 6)^alpha, docs/decoding.md) is what --score_targets gives its pair, within
    1e-4 in float32 (the copy model decodes in bfloat16 on a CPU with bfloat16 products)."""
    decode, folder, lines = decoding
    float32 = "--hparams=mixed_precision=float32"  # 1e-4 holds in float32
    decode("beams.txt", f"--decode_hparams=num_hypotheses={BEAMS}", float32)
    hypotheses = n_best(folder / "beams.txt.nbest")
    pairs = [(lines[index], text, score) for index, found in sorted(hypotheses.items())
             for text, score in found if lines[index]]
    sources, targets = folder / "pair_sources.txt", folder / "pair_targets.txt"
    sources.write_text("".join(source + "\n" for source, _, _ in pairs) + "\n")
    targets.write_text("".join(target + "\n" for _, target, _ in pairs) + "1 2\n")
    scored = decode("scored.txt", f"--score_targets={targets}", float32, source_file=sources)
    rows = scored.read_text().splitlines()
    assert len(rows) == len(pairs) + 1 and rows[-1] == ""  # an empty source: no score
    for (source, target, score), row in zip(pairs, rows):
        log_likelihood, pieces, mean = row.split("\t")
        assert int(pieces) == len(target.split()) + 1  # EOS counted
        assert float(mean) == pytest.approx(float(log_likelihood) / int(pieces), abs=1e-5)
        raw = score * math.pow((5 + int(pieces)) / 6, ALPHA)
        assert float(log_likelihood) == pytest.approx(raw, abs=1e-4)


def test_target_prefixes_begin_each_translation(decoding):
    decode, folder, lines = decoding
    # Odd lines: a prefix the copy would not begin with; even lines: the line's first symbol.
    prefixes = ["" if not line else "9 9" if number % 2 else line.split()[0]
                for number, line in enumerate(lines)]
    prefixes[3] = ""
    prefix_file = folder / "prefixes.txt"
    prefix_file.write_text("".join(prefix + "\n" for prefix in prefixes))
    prefixed = decode("prefixed.txt", f"--target_prefix_file={prefix_file}").read_text()
    for line, prefix, translation in zip(lines, prefixes, prefixed.splitlines()):
        if line:
            assert translation.split()[:len(prefix.split())] == prefix.split()
        else:
            assert translation == ""
    empty = folder / "empty_prefixes.txt"
    empty.write_text("\n" * len(lines))
    assert decode("unprefixed.txt", f"--target_prefix_file={empty}").read_text() == \
        decode("plain.txt", reuse=True).read_text()


def test_sampling_one_seed_one_output(decoding):
    decode, folder, _ = decoding
    sampling = "--decode_hparams=sampling_topk=0,sampling_temperature=3.0"
    first = decode("sampled_1.txt", sampling, "--seed=7").read_text()
    assert decode("sampled_2.txt", sampling, "--seed=7").read_text() == first
    assert decode("sampled_3.txt", sampling, "--seed=8").read_text() != first


def test_flags_that_do_not_go_together_are_one_error_each(decoding, trained_copy_model):
    data_dir, output_dir, _ = trained_copy_model
    _, folder, _ = decoding
    base = [f"--data_dir={data_dir}", f"--output_dir={output_dir}"]
    short = folder / "two_lines.txt"
    short.write_text("1\n2\n")
    targets = folder / "targets_kept.txt"
    targets.write_text((folder / "source.txt").read_text())
    os.symlink(targets, folder / "scores_link.txt")
    for flags, expected in (
            (["--decode_interactive", f"--decode_from_file={folder / 'source.txt'}"],
             "error: --decode_from_file does not go with --decode_interactive"),
            ([f"--decode_from_file={folder / 'source.txt'}",
              f"--score_targets={folder / 'source.txt'}", "--decode_hparams=return_beams=true"],
             "error: --decode_hparams: return_beams does not apply with --score_targets"),
            ([f"--decode_from_file={folder / 'source.txt'}",
              "--decode_hparams=beam_size=2,num_hypotheses=3"],
             "error: --decode_hparams: num_hypotheses=3 is more than beam_size=2"),
            ([f"--decode_from_file={folder / 'source.txt'}",
              f"--target_prefix_file={folder / 'pair_targets_missing.txt'}"],
             "error: --target_prefix_file:"),
            ([f"--decode_from_file={folder / 'source.txt'}",
              "--decode_hparams=alignments=true,alignment_layer=2"],
             "error: --decode_hparams: alignment_layer=2: the model has 1 decoder layers"),
            ([f"--decode_from_file={folder / 'source.txt'}",
              f"--score_reference={short}"],
             f"error: --score_reference={short} has 2 lines but {folder / 'source.txt'} has 30"),
            ([f"--decode_from_file={folder / 'source.txt'}", f"--score_targets={targets}",
              "--decode_hparams=batch_size=8,beam_size=2"],
             "error: --decode_hparams: beam_size does not apply with --score_targets (it "
             "scores the given translations and searches nothing: batch_size and "
             "parallel_batches apply)"),
            ([f"--decode_from_file={folder / 'source.txt'}", f"--score_targets={targets}",
              f"--decode_to_file={folder / 'scores_link.txt'}"],
             f"error: --decode_to_file={folder / 'scores_link.txt'} is the file "
             f"--score_targets={targets} reads")):
        status, output = run("decoder", *base, *flags)
        assert status == 2 and len(error_lines(output)) == 1, output
        assert error_lines(output)[0].startswith(expected), output
    assert targets.read_text() == (folder / "source.txt").read_text()
    status, output = run("exporter", *base, f"--export_dir={folder / 'export'}",
                         "--decode_hparams=sampling_topk=5")
    assert status == 2 and error_lines(output) == [
        "error: --decode_hparams: sampling_topk does not apply to the SavedModel: it searches "
        "each request as one batch (XLA: --export_jit_compile), serves the n-best lists in its "
        "n_best signature and does not sample; beam_size, alpha, extra_length, "
        "stop_after_finished and num_hypotheses (n_best's N) apply"], output


def read_line(process, timeout: float = 120.0) -> str:
    """The next line of the process' stdout, within `timeout` seconds."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "no answer"
    return process.stdout.readline().decode().rstrip("\n")


def test_interactive_decoding_answers_each_line_before_the_next(trained_copy_model):
    data_dir, output_dir, _ = trained_copy_model
    process = subprocess.Popen(
        program_command("decoder", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                        "--decode_interactive", "--decode_hparams=write_beam_scores=true"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        for line in ("3 1 4 1 5", "9 2 6", ""):
            process.stdin.write((line + "\n").encode())
            process.stdin.flush()  # the next line is written only once this one is answered
            translation, score = read_line(process).split("\t")
            assert translation == line and (float(score) < 0 if line else score == "")
        process.stdin.close()
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
