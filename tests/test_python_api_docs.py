"""docs/python.md runs as written (its ```python blocks in order, in one namespace, in an empty
folder), and its model gives what t2t_lite-decoder writes for the same inputs and settings:
the 4 best with their scores, the 1-best's alignment and the scores of given translations,
with the trained model and with its CTranslate2 export."""
import os
import re

from program_runs import run

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "python.md")
def blocks() -> list:
    with open(DOCS, encoding="utf-8") as handle:
        return re.findall(r"```python\n(.*?)```", handle.read(), re.S)


def decoded(*flags) -> list:
    """The lines t2t_lite-decoder writes into copy/out.txt (and beside it) with `flags`."""
    for suffix in ("", ".nbest", ".align"):
        if os.path.exists(f"copy/out.txt{suffix}"):
            os.remove(f"copy/out.txt{suffix}")
    status, output = run("decoder", "--data_dir=copy/data", "--decode_from_file=copy/in.txt",
                         "--decode_to_file=copy/out.txt", *flags)
    assert status == 0, output
    return {suffix: open(f"copy/out.txt{suffix}").read().splitlines()
            for suffix in ("", ".nbest", ".align") if os.path.exists(f"copy/out.txt{suffix}")}


def expected_files(best4: list, scores: list) -> tuple:
    """What the decoder writes of the API's results: the 1-best with its score, the n-best
    list and the alignments; the scores of given translations."""
    from t2t_lite.decoding.alignments import alignment_text
    from t2t_lite.decoding.output_files import score_text, target_score_line
    return ({"": [f"{r.hypotheses[0].text}\t{score_text(r.hypotheses[0].score)}"
                  for r in best4],
             ".nbest": [f"{i} ||| {h.text} ||| {score_text(h.score)}"
                        for i, r in enumerate(best4) for h in r.hypotheses],
             ".align": [alignment_text(r.hypotheses[0].alignment) for r in best4]},
            {"": [target_score_line(s) for s in scores]})


def test_the_python_examples_run_and_give_what_the_decoder_writes(tmp_path, monkeypatch):
    from t2t_lite import registry
    monkeypatch.chdir(tmp_path)
    # The data smaller than the problem's, for the test's time.
    monkeypatch.setattr(type(registry.problem("algorithmic_copy")), "num_samples",
                        {"train": 10_000, "dev": 100, "test": 100})
    namespace = {}
    for block in blocks():
        exec(compile(block, DOCS, "exec"), namespace)

    sentences, references = namespace["sentences"], namespace["references"]
    assert [result.hypotheses[0].text for result in namespace["best4"]] == sentences
    assert [len(result.hypotheses) for result in namespace["best4"]] == [4, 4, 4]
    assert [result.error for result in namespace["results"]][1] == "empty"
    assert "not translated" in namespace["results"][2].error
    with open("copy/in.txt", "w") as handle:
        handle.write("".join(line + "\n" for line in sentences))
    with open("copy/references.txt", "w") as handle:
        handle.write("".join(line + "\n" for line in references))
    search = "--decode_hparams=beam_size=4,num_hypotheses=4,write_beam_scores=true,alignments=true"
    for model, best4, scores in (("--output_dir=copy/train", "best4", None),
                                 ("--ctranslate2_model=copy/ct2", "ct2_best4", "ct2_scores")):
        scored = namespace["model"].score(sentences, references) if scores is None \
            else namespace[scores]
        translations, target_scores = expected_files(namespace[best4], scored)
        assert decoded(model, search) == translations
        assert decoded(model, "--score_targets=copy/references.txt") == target_scores
