"""`benchmarks/report.py --check`: every benchmark figure the docs quote is recomputed from its
committed results file, and an altered figure is caught (pure JSON and number work, ~1 s)."""

import functools
import os
import re
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import doc_figures  # noqa: E402
import report  # noqa: E402


def _docs():
    docs = {}
    for path in doc_figures.DOCS:
        with open(os.path.join(doc_figures.REPO_ROOT, path)) as f:
            docs[path] = f.read()
    return docs


@functools.lru_cache(maxsize=None)
def _normalised(path):
    return doc_figures.normalise(_docs()[path])


def test_check_finds_every_quoted_figure_and_block_equal_to_its_results_file(capsys):
    assert report.main(["--check"]) == 0
    assert "0 mismatch(es)" in capsys.readouterr().out


@pytest.mark.parametrize("index", range(len(doc_figures.CLAIMS)))
def test_each_quoted_figure_altered_in_its_doc_is_reported(index):
    claim = doc_figures.CLAIMS[index]
    figures = claim.figures()
    expected = doc_figures.normalise(claim.text.format(*figures))
    # The first figure with a digit, its last digit changed: one figure off by a little.
    k = next(i for i, f in enumerate(figures) if re.search(r"\d", f))
    altered = list(figures)
    altered[k] = re.sub(r"(\d)(\D*)$", lambda m: str((int(m.group(1)) + 1) % 10) + m.group(2),
                        altered[k])
    wrong = doc_figures.normalise(claim.text.format(*altered))
    text = _normalised(claim.doc)
    assert expected in text
    docs = {claim.doc: text.replace(expected, wrong)}
    problems = doc_figures.check(docs, claims=[claim], blocks=False)
    assert len(problems) == 1 and "expected" in problems[0], problems


def _problems_with_a_cell_altered(doc, find):
    """check()'s report after the first 0.000-style cell of the step-vs-tfm block at
    `find(text, marker)` in `doc` becomes 9.999."""
    text = _docs()[doc]
    cell = re.compile(r"\d\.\d{3}").search(text, find(text, report.STEP_VS_TFM_START_MARKER))
    altered = text[:cell.start()] + "9.999" + text[cell.end():]
    return doc_figures.check({doc: altered}, claims=[])


def _block_differs(doc, results_file):
    return (f"{doc}: the <!-- step-vs-tfm:start --> block differs from what report.py renders "
            f"from benchmarks/results/{results_file}; rerun report.py --update")


def test_an_altered_cell_of_a_rendered_block_is_reported(capsys):
    assert _problems_with_a_cell_altered("benchmarks/README.md", str.index) == [
        _block_differs("benchmarks/README.md", "2026-12-02-4cc55f6-step-vs-tfm.json")]


def test_an_altered_cell_of_a_later_block_of_the_same_doc_is_reported():
    """docs/benchmarks.md renders one step-vs-tfm block per results file: a cell of the last
    one altered is reported, naming that file (a check of the first block only missed it)."""
    assert _docs()["docs/benchmarks.md"].count(report.STEP_VS_TFM_START_MARKER) >= 2
    assert _problems_with_a_cell_altered("docs/benchmarks.md", str.rindex) == [
        _block_differs("docs/benchmarks.md",
                       "2026-12-06-77e2a9d-step-vs-tfm-retinanet-focal-2.json")]


def test_check_fails_on_a_copy_of_the_docs_with_one_profile_figure_altered(tmp_path, capsys):
    for path in doc_figures.DOCS:
        os.makedirs(tmp_path / os.path.dirname(path), exist_ok=True)
        with open(os.path.join(doc_figures.REPO_ROOT, path)) as f:
            (tmp_path / path).write_text(f.read())
    doc = tmp_path / "docs/benchmarks.md"
    text = doc.read_text()
    assert text.count("(profiled 300 against") == 1
    doc.write_text(text.replace("(profiled 300 against", "(profiled 290 against"))
    assert report.main(["--check", "--docs_root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert ("docs/benchmarks.md: expected \"Lite's step runs TFM's kernels (profiled 300 against "
            "375 ms a step).\"") in out
    assert out.strip().endswith("1 mismatch(es)")
