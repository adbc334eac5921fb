"""Timing, peak RSS and result output shared by every measurement process.

Standard library only: it runs in the project's environment and in TFM's venv alike.
"""

import json
import os
import resource
import sys
import time

RESULT_PREFIX = "BENCH_RESULT "


def process_age_s():
    """Seconds since this process was started by the kernel (Linux), else since import.

    Read from /proc so that interpreter start-up and imports count, as a user waiting for
    the first step sees them. Resolution is one clock tick (10 ms).
    """
    try:
        with open("/proc/self/stat") as f:
            # Field 22 (starttime, in clock ticks since boot); the command name in field 2 may
            # hold spaces, so split after its closing parenthesis.
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return time.perf_counter() - _IMPORT_TIME


_IMPORT_TIME = time.perf_counter()


def peak_rss_mib():
    """Peak resident set size of this process so far, in MiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class LoopClock:
    """Timestamps the end of each outer loop through train / eval actions.

    `train_action` and `eval_action` are callables taking the loop's output dict, the contract
    of Orbit's and lite_launcher's actions. Both frameworks call them after each inner loop has
    run, so timing between two calls covers whole outer loops with all controller overhead.
    """

    def __init__(self):
        self.train_times = []
        self.eval_times = []
        self.first_loop_age_s = None

    def train_action(self, output):
        del output
        now = time.perf_counter()
        if self.first_loop_age_s is None:
            self.first_loop_age_s = process_age_s()
        self.train_times.append(now)

    def eval_action(self, output):
        del output
        self.eval_times.append(time.perf_counter())


def steady_rate(times, steps_per_loop, skip=1):
    """Steps/sec over the loops after the first `skip` (tracing) ones.

    `times[i]` is when loop i ended; loop i+1 runs from times[i] to times[i+1].
    """
    if len(times) < skip + 1:
        raise ValueError(f"need more than {skip} timed loops, got {len(times)}")
    loops = len(times) - skip
    return loops * steps_per_loop / (times[-1] - times[skip - 1])


def loop_ms(times, skip=1):
    """Duration of each timed loop (after the first `skip`), in ms: median, max and the first
    few, to show whether warm-up lasted beyond the excluded loop."""
    durations = [1000.0 * (b - a) for a, b in zip(times[skip - 1:], times[skip:])]
    if not durations:
        return None
    ordered = sorted(durations)
    return {"median": ordered[len(ordered) // 2], "max": ordered[-1],
            "first": [round(d, 3) for d in durations[:3]]}


def eval_rate(train_times, eval_times, eval_steps, skip=1):
    """Eval steps/sec from mode train_and_eval: evaluation k runs from train loop k's end to
    evaluation k's end. The first `skip` evaluations (tracing) are excluded."""
    if len(eval_times) < skip + 1 or len(train_times) < len(eval_times):
        raise ValueError(
            f"need more than {skip} evaluations, each after a train loop; got "
            f"{len(eval_times)} evaluations and {len(train_times)} train loops")
    durations = [eval_times[k] - train_times[k] for k in range(skip, len(eval_times))]
    return len(durations) * eval_steps / sum(durations)


def eval_wall_rate(train_times, eval_steps, skip=1):
    """Eval steps/sec over whole cycles of mode train_and_eval with 1-step train loops: cycle
    k runs from train loop k's end to train loop k+1's end, so it holds evaluation k with
    everything done after it (its summaries, destroying its iterator wherever that happens)
    and one 1-step train loop. The first `skip` cycles (tracing) are excluded."""
    durations = [b - a for a, b in zip(train_times[skip:], train_times[skip + 1:])]
    if not durations:
        raise ValueError(f"need more than {skip + 1} train loops, got {len(train_times)}")
    return len(durations) * eval_steps / sum(durations)


def eval_ms(train_times, eval_times):
    """Duration of every evaluation (including the first), in ms."""
    return [round(1000.0 * (e - t), 3) for t, e in zip(train_times, eval_times)]


def emit(result):
    """Prints `result` as one JSON line with RESULT_PREFIX (logs go to stderr and other
    stdout lines are ignored by the runner)."""
    result = dict(result)
    result.setdefault("peak_rss_mib", peak_rss_mib())
    result.setdefault("process_s", process_age_s())
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def parse_results(stdout):
    """Every result line of a measurement's stdout, as dicts, in order."""
    return [json.loads(line[len(RESULT_PREFIX):]) for line in stdout.splitlines()
            if line.startswith(RESULT_PREFIX)]


def parse_result(stdout):
    """The last result line of a measurement's stdout, as a dict; None if there is none."""
    results = parse_results(stdout)
    return results[-1] if results else None
