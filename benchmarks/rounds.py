"""Alternating rounds: the one way every harness here orders its sides (run.py, first_step.py,
step_vs_tfm.py, vision_suite.py).

On a machine shared with other work the load changes within seconds, so two sides measured one
after the other differ by the load as much as by their code. Each harness therefore measures
in rounds, runs every side once per round, reverses the order every other round, and takes
each ratio within a round: the load falls on both sides alike, and the spread over rounds
(median [min-max]) says how much is left.
"""

import os
import statistics
import sys
import time


def round_order(items, round_index):
    """`items` as given in even rounds (0-based), reversed in odd ones (same type back)."""
    return items if round_index % 2 == 0 else items[::-1]


def spread(values):
    """{'median', 'min', 'max'} of per-round values (ratios, ms)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def timed(call):
    """Seconds of one call, its outputs read back to NumPy (the work has finished)."""
    import numpy as np
    import tensorflow as tf

    start = time.perf_counter()
    tf.nest.map_structure(np.asarray, call())
    return time.perf_counter() - start


def alternate_calls(calls, sides, rounds, units, label=""):
    """Calls each side's functions in turn, in `rounds` rounds, sides in `round_order`.

    Args:
      calls: {side: {kind: zero-argument callable}}, every side with the same kinds.
      sides: the sides in round 0's order.
      rounds: how many rounds.
      units: {kind: how many steps one call runs} (ms per step = call time / units).
      label: printed before each round's line on stderr.

    Returns:
      One dict per round: {'order', 'ms_per_step': {side: {kind: ms}}, 'loadavg'}.
    """
    per_round = []
    for r in range(rounds):
        order = round_order(tuple(sides), r)
        ms = {side: {} for side in sides}
        for kind in calls[sides[0]]:
            for side in order:
                ms[side][kind] = 1000.0 * timed(calls[side][kind]) / units[kind]
        per_round.append({"order": list(order), "ms_per_step": ms,
                          "loadavg": list(os.getloadavg())})
        print(f"{label} round {r}: " + "  ".join(
            f"{side} {kind} {ms[side][kind]:.0f} ms" for side in sides for kind in ms[side]),
            file=sys.stderr, flush=True)
    return per_round


def write_results(kind, suffix, records, started, out=None):
    """Writes an in-process A/B's results file: `benchmarks/results/<UTC date>-<commit>-
    <suffix>.json` unless `out` is given, holding the kind, commit, start time, the command
    line, the file's own path and the records. Returns the path."""
    import datetime  # pylint: disable=import-outside-toplevel
    import json  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel

    here = os.path.dirname(os.path.abspath(__file__))
    commit = subprocess.run(["git", "-C", here, "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    started = started or datetime.datetime.now(datetime.timezone.utc)
    out = out or os.path.join(here, "results",
                              f"{started:%Y-%m-%d}-{commit or 'nocommit'}-{suffix}.json")
    with open(out, "w") as f:
        json.dump({"kind": kind, "commit": commit, "started": f"{started:%Y-%m-%d %H:%M} UTC",
                   "command": sys.argv, "file": os.path.relpath(out, os.path.dirname(here)),
                   "records": records}, f, indent=1)
    return out
