"""Writes tests/file_seconds.json, the worker-seconds of each test file, from pytest
`--junitxml` files of the README's command (the smallest time of each test over the files
given: the least disturbed reading), for tests/conftest.py's longest-first file order.

    python -m pytest -q -n 2 --dist loadfile -m "not release" tests --junitxml=/tmp/a.xml
    python tests/file_seconds.py /tmp/a.xml [/tmp/b.xml ...]

Standard library only.
"""

import collections
import json
import os
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "file_seconds.json")
MIN_SECONDS = 5.0  # shorter files keep their collection order, after the listed ones


def test_times(junit_path):
    """{node id: seconds} of one junit file (setup, call and teardown together)."""
    times = {}
    for case in ET.parse(junit_path).iter("testcase"):
        module = case.get("classname").replace(".", "/") + ".py"
        times[f"{module}::{case.get('name')}"] = float(case.get("time"))
    return times


def file_seconds(junit_paths):
    """{test file: its tests' smallest times summed}, longest first, files >= MIN_SECONDS."""
    runs = [test_times(path) for path in junit_paths]
    per_test = {}
    for run in runs:
        for test, seconds in run.items():
            per_test[test] = min(seconds, per_test.get(test, seconds))
    per_file = collections.Counter()
    for test, seconds in per_test.items():
        per_file[test.split("::")[0]] += seconds
    return {path: round(seconds, 1) for path, seconds in per_file.most_common()
            if seconds >= MIN_SECONDS and os.path.exists(os.path.join(ROOT, path))}


def main(argv):
    if not argv:
        sys.exit(__doc__)
    with open(OUT) as f:
        about = json.load(f)["about"]
    with open(OUT, "w") as f:
        json.dump({"about": about, "seconds": file_seconds(argv)}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
