"""The Python floor: pyproject.toml's `requires-python` and every place README.md and docs/
state a minimum Python agree. Keras >= 3.13 needs Python >= 3.11, so a floor of 3.10 let pip
resolve an untested Keras 3.12 on Python 3.10 (issue 52)."""

import glob
import os
import re
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOOR = (3, 11)
# "Python ≥ 3.11", "Python >= 3.11", "Python 3.11+", "python3.11 or newer"
_STATED = re.compile(r"python\s*(?:≥|>=)\s*(3\.\d+)|python\s*(3\.\d+)\s*(?:\+|or newer|or later)",
                     re.IGNORECASE)


def requires_python():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["requires-python"]


def stated_floors(paths):
    """{(path relative to the root, line number, column): 'X.Y'} for each minimum Python
    stated."""
    found = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for match in _STATED.finditer(line):
                    place = (os.path.relpath(path, ROOT), number, match.start())
                    found[place] = match.group(1) or match.group(2)
    return found


def _docs():
    return [os.path.join(ROOT, "README.md")] + sorted(
        glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))


def test_pyproject_floor_is_3_11_and_this_python_meets_it():
    assert requires_python() == ">=" + ".".join(map(str, FLOOR))
    assert sys.version_info[:2] >= FLOOR


def test_every_stated_floor_in_the_docs_is_pyprojects():
    floor = requires_python().removeprefix(">=")
    stated = stated_floors(_docs())
    assert stated, "README.md states the Python floor"
    assert {place: version for place, version in stated.items() if version != floor} == {}


def test_a_stale_floor_in_a_page_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Needs Python ≥ 3.10.\nOr python 3.9+ here, and Python >= 3.11 there.\n")
    assert sorted(stated_floors([str(page)]).values()) == ["3.10", "3.11", "3.9"]
