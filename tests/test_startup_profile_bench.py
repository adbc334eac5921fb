"""The start-up profile (benchmarks/startup_profile.py): its reading of a driver's marks into
phases and the phase of the memory peak, on hand-made marks; and its child's marks on a real
`lite-train --help` (no training)."""

import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import startup_profile  # noqa: E402

LINES = [(0.1, "MARK 0.100 9 9 python up"), (0.5, "some log line"),
         (1.0, "MARK 1.000 20 20 tensorflow import begins"),
         (2.0, "MARK 2.000 300 300 sample"),
         (4.0, "MARK 4.000 500 500 tensorflow imported"),
         (4.0, "MARK 4.000 500 500 runner begin"),
         (4.0, "MARK 4.000 500 500 build_model begin"),
         (5.5, "MARK 5.500 700 700 build_model end"),
         (5.5, "MARK 5.500 700 700 optimizer variables begin"),
         (6.0, "MARK 6.000 760 760 optimizer variables end"),
         (6.0, "MARK 6.000 760 760 build_inputs begin"),
         (6.25, "MARK 6.250 770 770 build_inputs end"),
         (6.5, "MARK 6.500 770 770 runner end"),
         (6.75, "MARK 6.750 770 770 first loop begin"),
         (7.0, "MARK 7.000 780 780 trace loop_then_end begin"),
         (9.0, "MARK 9.000 800 800 trace loop_then_end end"),
         (10.0, "MARK 10.000 1200 1200 sample"),
         (11.0, "MARK 11.000 1100 1200 first loop end"),
         (12.0, "MARK 12.000 900 1200 exit")]


def test_marks_become_phases_and_the_peak_is_placed():
    marks = startup_profile.parse_marks(LINES)
    assert len(marks) == 18 and marks[1] == {"t_s": 1.0, "rss_mb": 20, "hwm_mb": 20,
                                             "what": "tensorflow import begins"}
    phases = startup_profile.phases(marks)
    assert {k: v for k, v in phases.items() if k != "peak_phase"} == pytest.approx({
        "before_tensorflow": 1.0, "imports": 3.0, "build_model": 1.5,
        "optimizer_variables": 0.5, "build_inputs": 0.25, "runner_rest": 0.25,
        "to_first_loop": 0.25, "trace": 2.0, "first_run": 2.0, "first_step": 11.0,
        "peak_hwm_mb": 1200})
    # The high-water mark last grew at 10.0 s: after the trace, in the first run.
    assert phases["peak_phase"] == "trace loop_then_end end"


def test_a_run_without_its_loop_has_no_trace_phase():
    phases = startup_profile.phases(startup_profile.parse_marks(LINES[:8]))
    assert phases["trace"] is None and phases["first_run"] is None
    assert phases["runner_rest"] is None and phases["imports"] == pytest.approx(3.0)
    assert startup_profile.phases([])["peak_phase"] is None


def test_the_child_marks_a_real_driver():
    # `lite-train --help` exits before TensorFlow loads: the child's marks up to there.
    root = os.path.dirname(BENCH)
    out = subprocess.run([sys.executable, "-c", startup_profile._CHILD, "--help"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=root),
                         cwd=root)
    marks = startup_profile.parse_marks([(0, line) for line in out.stdout.splitlines()])
    assert [m["what"] for m in marks if m["what"] != "sample"] == ["python up", "exit"]
    assert marks[0]["rss_mb"] > 0 and marks[-1]["t_s"] >= marks[0]["t_s"]


def test_a_peak_read_at_a_phase_boundary_belongs_to_the_phase_it_closes():
    # No sample caught the growth: "first loop end" reads it first; it grew in the first run.
    lines = [line for line in LINES if "10.000" not in line[1]]
    phases = startup_profile.phases(startup_profile.parse_marks(lines))
    assert phases["peak_hwm_mb"] == 1200
    assert phases["peak_phase"] == "trace loop_then_end end"
