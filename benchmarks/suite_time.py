"""Times the README's test command on a clean clone, as CI runs it, into a results file.

    python benchmarks/suite_time.py [--repo .] [--out benchmarks/results/DATE-COMMIT-suite-time.json]

Clones `--repo` (its committed HEAD) into a temporary directory, then times the two halves of
the README's test command there: setting up (`python3 -m venv .venv && pip install -e ".[test]"`)
and the tests (`pytest -q -n 2 --dist loadfile -m "not release" tests`). The results file
records both wall times, pytest's own summary (passed / failed / skipped and its time), the
failed node ids, the CPU time of the run, the CPU model, cores, load average before and after,
TensorFlow's version, the commit, this command and the file's own path (`command` and `file`
agree: results files are never edited after their run). `docs/testing.md` quotes the newest
one, checked by `benchmarks/doc_figures.py`.

Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

from first_step import cpu_model  # noqa: E402

REPO_ROOT = os.path.dirname(_HERE)
SETUP = 'python3 -m venv .venv && .venv/bin/pip install -q -e ".[test]"'
TESTS = ('.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile '
         '-m "not release" tests')
# pytest's closing line, with or without its `=` border (-q leaves it out).
_SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in ([\d.]+)s", re.M)


def parse_summary(output: str) -> dict:
    """pytest's last summary line -> {passed, failed, skipped, errors, pytest_s}."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "pytest_s": None}
    matches = _SUMMARY.findall(output)
    if not matches:
        return counts
    text, seconds = matches[-1]
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)",
                                   text):
        key = "errors" if word.startswith("error") else word
        counts[key] = counts.get(key, 0) + int(number)
    counts["pytest_s"] = float(seconds)
    return counts


def failures_section(output: str) -> str:
    """pytest's FAILURES section (tracebacks), up to its short test summary; '' if none."""
    start = re.search(r"^=+ FAILURES =+$", output, re.M)
    if not start:
        return ""
    end = re.search(r"^=+ short test summary info =+$", output[start.end():], re.M)
    return output[start.start():start.end() + (end.start() if end else len(output))]


def _timed(command: str, cwd: str):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    result = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True,
                            check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result, wall, cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=REPO_ROOT)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.repo,
                            capture_output=True, text=True, check=True).stdout.strip()
    out = args.out or os.path.join(
        "benchmarks", "results",
        f"{datetime.date.today().isoformat()}-{commit}-suite-time.json")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="lite-suite-") as directory:
        clone = os.path.join(directory, "lite_launcher")
        subprocess.run(["git", "clone", "--quiet", args.repo, clone], check=True)
        setup, setup_s, setup_cpu = _timed(SETUP, clone)
        if setup.returncode != 0:
            print(setup.stderr[-3000:], file=sys.stderr)
            return 1
        tests, tests_s, tests_cpu = _timed(TESTS, clone)
        tf_version = subprocess.run(
            [os.path.join(clone, ".venv", "bin", "python"), "-c",
             "import tensorflow as tf; print(tf.__version__)"],
            capture_output=True, text=True, check=False).stdout.strip()
    output = tests.stdout + tests.stderr
    record = {
        "kind": "suite-time", "commit": commit,
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "cpu_model": cpu_model(), "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "tensorflow": tf_version, "setup_command": SETUP, "test_command": TESTS,
        "setup_s": round(setup_s, 1), "tests_s": round(tests_s, 1),
        "total_s": round(setup_s + tests_s, 1), "tests_cpu_s": round(tests_cpu, 1),
        "setup_cpu_s": round(setup_cpu, 1), "returncode": tests.returncode,
        **parse_summary(output),
        "failed_tests": sorted(set(re.findall(r"^FAILED (\S+)", output, re.M))),
        "output_tail": output.splitlines()[-40:],
        # The tracebacks of failed tests: a failure on a clean clone must be diagnosable from
        # the file (the last 20,000 characters of pytest's FAILURES section).
        "failures": failures_section(output)[-20_000:],
        "command": [os.path.relpath(__file__, REPO_ROOT)] + (argv if argv is not None
                                                              else sys.argv[1:]) + (
            [] if args.out else ["--out", out]),
        "file": out,
    }
    with open(os.path.join(REPO_ROOT, out) if not os.path.isabs(out) else out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"{out}: setup {setup_s:.0f} s, tests {tests_s:.0f} s; {record['passed']} passed, "
          f"{record['failed']} failed, {record['skipped']} skipped")
    return 0 if tests.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
