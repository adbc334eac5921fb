"""Every skip in tests/ is listed, with when it fires and why, in docs/testing.md's "Skips"
table, and every row there is a skip that exists (issue 52: a user on a clean clone should
learn from the docs, not from a surprise `s` in pytest's output, what did not run).

A skip is a call of `pytest.skip(message)`, `pytest.importorskip(module)` or
`pytest.mark.skipif(..., reason=...)` / `pytest.mark.skip(reason=...)`, found by parsing each
file. A row names the file and `kind: text`, where text is the start (20 characters or more,
or all of it) of the message, module or reason, as the code spells it (an f-string's
placeholders as `{}`)."""

import ast
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTING = os.path.join(ROOT, "docs", "testing.md")
_KINDS = {"skip": "skip", "importorskip": "importorskip", "skipif": "skipif",
          "mark.skip": "skip"}
_ROW = re.compile(r"^\|\s*`(tests/[^`]+\.py)`\s*\|\s*`(skip|importorskip|skipif): ([^`]+)`\s*\|")
MIN_PREFIX = 20


def _text(node):
    """A string literal's text (implicitly joined parts; an f-string's placeholders `{}`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}"
                       for part in node.values)
    return None


def _dotted(node):
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return node.id if isinstance(node, ast.Name) else None


def skips_in(source):
    """[(kind, text)] of the skips in Python `source`, in order."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func) or ""
        if name in ("pytest.skip", "pytest.importorskip"):
            kind = name.split(".")[-1]
            text = _text(node.args[0]) if node.args else None
            if text is None:
                text = next((_text(k.value) for k in node.keywords
                             if k.arg in ("reason", "modname")), None)
        elif name in ("pytest.mark.skipif", "pytest.mark.skip"):
            kind = "skipif" if name.endswith("skipif") else "skip"
            text = next((_text(k.value) for k in node.keywords if k.arg == "reason"), None)
            if text is None and name.endswith(".skip") and node.args:
                text = _text(node.args[0])
        else:
            continue
        found.append((kind, text or "?"))
    return found


def code_skips(root=ROOT):
    """{(file relative to root, kind, text)} of every skip under root/tests."""
    found = set()
    for path in glob.glob(os.path.join(root, "tests", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        relative = os.path.relpath(path, root).replace(os.sep, "/")
        found.update((relative, kind, text) for kind, text in skips_in(source))
    return found


def listed_skips(markdown):
    """{(file, kind, text prefix)} of the rows of the "## Skips" section's table."""
    section = markdown.split("\n## Skips", 1)[1].split("\n## ", 1)[0]
    return {match.groups() for match in map(_ROW.match, section.splitlines()) if match}


def problems(code, listed):
    """One line per skip with no row, and per row with no skip."""
    def covers(row, skip):
        prefix = row[2]
        return (row[:2] == skip[:2] and skip[2].startswith(prefix)
                and len(prefix) >= min(MIN_PREFIX, len(skip[2])))

    lines = [f"{path}: {kind} {text!r} is not listed in docs/testing.md's Skips table"
             for path, kind, text in sorted(code)
             if not any(covers(row, (path, kind, text)) for row in listed)]
    lines += [f"docs/testing.md lists {path}: `{kind}: {prefix}`, which no skip there matches"
              for path, kind, prefix in sorted(listed)
              if not any(covers((path, kind, prefix), skip) for skip in code)]
    return lines


def test_every_skip_is_listed_with_its_reason_and_every_row_is_a_skip():
    code = code_skips()
    assert len(code) >= 10, code  # the parser finds them
    with open(TESTING, encoding="utf-8") as f:
        listed = listed_skips(f.read())
    assert problems(code, listed) == []


def test_an_unlisted_skip_and_a_stale_row_are_both_named(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n"
        "pytest.importorskip('pycocotools')\n"
        "@pytest.mark.skipif(True, reason='needs a ' 'GPU to run at all')\n"
        "def test_a():\n"
        "    pytest.skip(f'cannot mount here: {1}')\n")
    code = code_skips(str(tmp_path))
    assert code == {("tests/test_x.py", "importorskip", "pycocotools"),
                    ("tests/test_x.py", "skipif", "needs a GPU to run at all"),
                    ("tests/test_x.py", "skip", "cannot mount here: {}")}
    listed = listed_skips(
        "# T\n\n## Skips\n\n| file | skip | when | why |\n|---|---|---|---|\n"
        "| `tests/test_x.py` | `importorskip: pycocotools` | without [test] | COCO |\n"
        "| `tests/test_x.py` | `skipif: needs a GPU to run at all` | no GPU | GPU |\n"
        "| `tests/test_y.py` | `skip: gone` | never | removed |\n\n## Next\n")
    assert problems(code, listed) == [
        "tests/test_x.py: skip 'cannot mount here: {}' is not listed in docs/testing.md's "
        "Skips table",
        "docs/testing.md lists tests/test_y.py: `skip: gone`, which no skip there matches"]
    # A prefix shorter than 20 characters (of a longer text) does not cover it.
    short = {("tests/test_x.py", "skipif", "needs a GPU")}
    assert problems({("tests/test_x.py", "skipif", "needs a GPU to run at all")}, short)[0] \
        .endswith("is not listed in docs/testing.md's Skips table")
