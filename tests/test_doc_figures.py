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
        _block_differs(
            "docs/benchmarks.md",
            "2026-12-06-04297a2-step-vs-tfm-retinanet_mobilenetv2_fpn-honest-eval-per-row-nms.json")]


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


# Results files whose `file` field was set by hand after their run (written to another path,
# then moved in). Kept as they were measured; no new file may join them.
RENAMED_AFTER_THEIR_RUN = {
    "2026-12-03-3fc34c2-eval-input-start.json", "2026-12-03-5595f55-step-vs-tfm-maskrcnn.json",
    "2026-12-03-56c1cdd-step-vs-tfm-maskrcnn-profile.json",
    "2026-12-03-90dc296-step-vs-tfm-retinanet-train-profile.json",
    "2026-12-06-1d3825c-step-vs-tfm-retinanet-mobilenetv2-profile-by-name.json",
    "2026-12-06-77e2a9d-step-vs-tfm-retinanet-focal-2.json",
    # Written to a scratch path; its float32 row was complete when the run (still on its
    # bfloat16 row, not wanted) was stopped.
    "2026-12-06-1a5e0d3-step-vs-tfm-retinanet-honest-eval-profile-by-name.json",
}


def _recorded_out(command):
    """The `--out` path a results file's recorded command wrote to, or the path a learning run
    was given in `LITE_LEARNING_RUN_OUT=` (tests/vision/learning_run.py); None if it names none."""
    if isinstance(command, str):
        command = command.split()
    if not isinstance(command, list):
        return None
    for i, arg in enumerate(command):
        if arg == "--out" and i + 1 < len(command):
            return command[i + 1]
        for prefix in ("--out=", "LITE_LEARNING_RUN_OUT="):
            if isinstance(arg, str) and arg.startswith(prefix):
                return arg[len(prefix):]
    return None


def test_a_results_files_command_wrote_the_file_it_names():
    # Results files are never edited after their run: the command a file records wrote to the
    # path its `file` field names, and that is where the file is.
    import json  # pylint: disable=import-outside-toplevel

    results = os.path.join(doc_figures.REPO_ROOT, doc_figures.RESULTS)
    disagree = []
    for name in sorted(os.listdir(results)):
        if not name.endswith(".json") or name in RENAMED_AFTER_THEIR_RUN:
            continue
        with open(os.path.join(results, name)) as f:
            data = json.load(f)
        out = _recorded_out(data.get("command")) if isinstance(data, dict) else None
        if out is None:
            continue
        if os.path.normpath(out) != os.path.normpath(data.get("file") or "") or \
                os.path.basename(out) != name:
            disagree.append(f"{name}: command --out {out}, file {data.get('file')}")
    assert not disagree, "\n".join(disagree)
    assert RENAMED_AFTER_THEIR_RUN <= set(os.listdir(results))


def test_the_results_file_check_sees_an_edited_file_field():
    assert _recorded_out(["x.py", "--out", "/tmp/a.json"]) == "/tmp/a.json"
    assert _recorded_out("x.py --out=benchmarks/results/b.json") == "benchmarks/results/b.json"
    assert _recorded_out("LITE_LEARNING_RUN_OUT=benchmarks/results/c.json python -m pytest") == \
        "benchmarks/results/c.json"
    assert _recorded_out(None) is None


def test_an_altered_cell_of_a_first_step_block_is_reported():
    """The first-step blocks (issue 55, first_step.py files) are rendered blocks too: a cell of
    one altered is reported, naming its file."""
    doc = "docs/benchmarks.md"
    text = _docs()[doc]
    start = text.index(report.FIRST_STEP_START_MARKER)
    source = doc_figures._SOURCE.search(text, start).group(1)
    cell = re.compile(r"\| \d+\.\d{2} \[").search(text, start)
    altered = text[:cell.start()] + "| 99.99 [" + text[cell.end():]
    assert doc_figures.check({doc: altered}, claims=[]) == [
        f"{doc}: the {report.FIRST_STEP_START_MARKER} block differs from what report.py "
        f"renders from {source}; rerun report.py --update"]


def test_suite_times_round_a_half_second_up():
    # round() would give 600.5 s as "10 min 00 s", within a 10-minute budget it missed.
    assert doc_figures._min_s(600.5) == "10 min 01 s"  # pylint: disable=protected-access
    assert doc_figures._min_s(664.5) == "11 min 05 s"  # pylint: disable=protected-access
    assert doc_figures._min_s(689.4) == "11 min 29 s"  # pylint: disable=protected-access
    assert doc_figures._min_s(599.4) == "9 min 59 s"  # pylint: disable=protected-access
