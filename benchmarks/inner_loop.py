"""The inner loop (issue 55): lite's `steps_per_loop=100` loop against the raw loop, in one process.

run.py's `train100` and `raw` rows time each side in its own process; on a shared 2-core VM
two processes differ by more than the two loops do (2x swings between processes, see
docs/benchmarks.md). Here both run in one process, one loop of each in turn, so the load falls
on both alike:

- **lite**: `mlp_tiny` through `ExperimentRunner` as `lite_workloads.py` runs it (mode `train`,
  `steps_per_loop=100`, summaries every loop, the default train actions). A loop is timed as
  run.py times it, from one train action to the next: the Controller's whole cycle (the
  `trainer.train` graph call, global-step reads, actions, log line, summaries, checkpoint
  check).
- **raw**: `raw_loop.build_train_loop` (one `tf.function` over `tf.range(100)`, the same model,
  batch, loss, SGD update and `accuracy` / `loss` metric updates), timed as raw_loop.py does:
  the call and a read of the optimizer's step count.

The measurement train action runs one raw call after each lite loop, and one of the raw
graph called as lite calls its own (`raw_direct`, below), the two in turn-about order. Per round (a new runner
and raw loop each, warm-up loops excluded): the median ms of each side's 100-step loop and
their ratio (lite steps/s over raw steps/s), and two ratios less moved by a load that changes
within the round (`paired_ratios`: each lite loop against the raw calls on either side of it;
each side's 10th-percentile loop). Then the profile of where lite's time goes:

- the op types of each side's `tf.while_loop` body (what one step runs) and of the graph call
  around it (lite's loop end: metric reads and resets, the learning rate);
- the per-step cost of each graph, (t(300 steps) - t(100 steps)) / 200 in alternating calls,
  which leaves out everything paid once per call, and each call's fixed cost (t(100 steps) -
  100 x that): lite's `trainer.train`, the raw `tf.function` call, and the raw graph called
  as lite calls its own (`loops.DirectCall`, no per-call argument binding);
- lite's per-loop host work: the Controller's cycle minus its `trainer.train` call, and the
  main pieces of it (global-step reads, output conversion, summaries, checkpoint check).

    .venv/bin/python benchmarks/inner_loop.py --rounds 8

writes benchmarks/results/<UTC date>-<commit>-inner-loop.json and prints its summary.
"""

import argparse
import collections
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(1, os.path.dirname(_HERE))

import rounds as rounds_lib  # noqa: E402
import workloads  # noqa: E402

WORKLOAD = "mlp_tiny"
STEPS = 100  # steps per loop, both sides (workloads.LONG_LOOP)
WARMUP = 5  # loops of each side left out at the start of a round
SPLIT_STEPS = (100, 300)  # the two call lengths whose difference gives the per-step cost


def while_body_ops(concrete) -> dict:
    """{"body": op type counts of the `tf.while_loop` body (nested functions included),
    "outside": of the function around it}, for a concrete function holding one while loop."""
    graph_def = concrete.graph.as_graph_def()
    functions = {f.signature.name: f for f in graph_def.library.function}

    def count(nodes):
        ops = collections.Counter()
        for node in nodes:
            ops[node.op] += 1
            for attr in node.attr.values():
                if attr.func.name in functions and node.op not in ("While", "StatelessWhile"):
                    ops.update(count(functions[attr.func.name].node_def))
        return ops

    loops = [n for n in graph_def.node if n.op in ("While", "StatelessWhile")]
    if len(loops) != 1:
        raise ValueError(f"expected one while loop, found {len(loops)}")
    body = count(functions[loops[0].attr["body"].func.name].node_def)
    return {"body": dict(sorted(body.items())),
            "outside": dict(sorted(count(graph_def.node).items()))}


def _experiment(loops):
    import lite_launcher as ll

    workload = workloads.get(WORKLOAD)
    _, trainer_overrides, save_summary = workloads.run_plan(workload, "train100", loops,
                                                            "lite")
    params = ll.get_exp_config(WORKLOAD)
    params.override({"trainer": trainer_overrides})
    params.validate()
    return params, save_summary


class PairedClock:
    """A train action: times the Controller's cycle since the previous action, then runs and
    times one call of each raw side (`raw_calls`: {name: call}), in turn-about order."""

    def __init__(self, raw_calls):
        self.raw_calls = raw_calls
        self.lite_s = []
        self.raw_s = {name: [] for name in raw_calls}
        self._left = None

    def __call__(self, output):
        del output
        now = time.perf_counter()
        if self._left is not None:
            self.lite_s.append(now - self._left)
        for name in rounds_lib.round_order(tuple(self.raw_calls), len(self.lite_s)):
            self.raw_s[name].append(self.raw_calls[name]())
        self._left = time.perf_counter()


def _raw_side():
    import tensorflow as tf
    import raw_loop

    loop, iterator, optimizer = raw_loop.build_train_loop(workloads.get(WORKLOAD))
    one = tf.constant(1, tf.int32)
    loop(iterator, one)

    def call(num_steps):
        start = time.perf_counter()
        loop(iterator, num_steps)
        int(optimizer.iterations.numpy())
        return time.perf_counter() - start

    # The same graph called as lite calls its loop (loops.DirectCall: the traced graph with
    # flat tensors, without the tf.function's per-call argument binding): what is left
    # between this and lite is lite's own work.
    from lite_launcher.orbit import loops

    direct = loops.DirectCall(loop)

    def direct_call(num_steps):
        start = time.perf_counter()
        direct(iterator, num_steps)
        int(optimizer.iterations.numpy())
        return time.perf_counter() - start

    return loop, iterator, call, direct_call


class _Pieces:
    """Wraps methods to time each call (installed only for the profile pass)."""

    def __init__(self):
        self.seconds = collections.defaultdict(list)
        self._undo = []

    def wrap(self, owner, name, key):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[key].append(time.perf_counter() - start)

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def undo(self):
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo = []


def paired_ratios(record, raw_key="raw_loop_ms") -> dict:
    """A round's lite/raw speed ratios from its per-loop times (ms, warm-up included; `raw_key`
    names the raw side's): "paired", the median over lite loops of (mean of the raw calls just
    before and just after it) / the lite loop, which cancels load that drifts slower than a
    loop; "p10", the ratio of each side's 10th-percentile loop, the loops least disturbed by
    other processes."""
    lite, raw = record["lite_loop_ms"], record[raw_key]
    # lite[j] ran between raw[j] and raw[j + 1]; the first WARMUP - 1 of lite are warm-up.
    pairs = [((raw[j] + raw[j + 1]) / 2) / lite[j]
             for j in range(WARMUP - 1, min(len(lite), len(raw) - 1))]
    timed_lite, timed_raw = sorted(lite[WARMUP - 1:]), sorted(raw[WARMUP:])
    p10 = (timed_raw[len(timed_raw) // 10] / timed_lite[len(timed_lite) // 10])
    return {"paired": statistics.median(pairs), "p10": p10}


def _median_us(values, skip=0):
    values = values[skip:]
    return 1e6 * statistics.median(values) if values else None


def measure_round(index, loops, split_reps, profile_loops):
    """One round: the paired loops, the per-step split and lite's host pieces."""
    import tensorflow as tf
    import lite_launcher as ll
    from lite_launcher.core.base_trainer import Trainer
    from lite_launcher.core.train_lib import ExperimentRunner
    from lite_launcher.orbit import controller as controller_lib
    from lite_launcher.orbit import summaries

    loop, iterator, raw_call_n, raw_direct_n = _raw_side()
    steps = tf.constant(STEPS, tf.int32)
    clock = PairedClock({"raw": lambda: raw_call_n(steps),
                         "raw_direct": lambda: raw_direct_n(steps)})
    params, save_summary = _experiment(WARMUP + loops)
    model_dir = tempfile.mkdtemp(prefix="lite_inner_loop_")
    task = ll.get_task(params.task, logging_dir=model_dir)
    runner = ExperimentRunner(None, task, "train", params, model_dir,
                              save_summary=save_summary, train_actions=[clock])
    runner.run()
    lite_ms = 1e3 * statistics.median(clock.lite_s[WARMUP - 1:])
    raw_ms = 1e3 * statistics.median(clock.raw_s["raw"][WARMUP:])
    raw_direct_ms = 1e3 * statistics.median(clock.raw_s["raw_direct"][WARMUP:])
    trainer = runner.trainer

    # Per-step cost: calls of 100 and 300 steps, sides alternating, order reversed each rep.
    lengths = [tf.constant(n, tf.int32) for n in SPLIT_STEPS]

    def lite_call(num_steps):
        start = time.perf_counter()
        trainer.train(num_steps)
        int(trainer.global_step.value().numpy())
        return time.perf_counter() - start

    calls = {"lite": lite_call, "raw": raw_call_n, "raw_direct": raw_direct_n}
    split = {side: {n: [] for n in SPLIT_STEPS} for side in calls}
    for rep in range(split_reps):
        for n, length in zip(SPLIT_STEPS, lengths):
            for side in rounds_lib.round_order(tuple(calls), rep):
                split[side][n].append(calls[side](length))
    per_step_us = {side: [1e6 * (b - a) / (SPLIT_STEPS[1] - SPLIT_STEPS[0])
                          for a, b in zip(split[side][SPLIT_STEPS[0]],
                                          split[side][SPLIT_STEPS[1]])]
                   for side in calls}

    # Lite's host work per loop: the Controller's cycle with its pieces timed (more loops of
    # the same controller; the wrappers add ~1 us each, so this pass is not the ratio's).
    pieces = _Pieces()
    pieces.wrap(Trainer, "train", "trainer.train")
    pieces.wrap(controller_lib.Controller, "_read_step", "global-step read")
    pieces.wrap(controller_lib, "to_values", "outputs to NumPy")
    pieces.wrap(summaries.SummaryManager, "write_summaries", "summaries")
    pieces.wrap(summaries.SummaryManager, "_write_pending", "summaries: batch write")
    pieces.wrap(controller_lib.Controller, "_checkpoint_due", "checkpoint check")
    profile = PairedClock({"raw": lambda: raw_call_n(steps)})
    controller = runner.controller
    controller.train_actions = tuple(a for a in controller.train_actions
                                     if a is not clock) + (profile,)
    try:
        start_step = int(trainer.global_step.numpy())
        controller.train(start_step + STEPS * (WARMUP + profile_loops),
                         checkpoint_at_completion=False)
    finally:
        pieces.undo()
    n_train = len(pieces.seconds["trainer.train"])
    host_us = [1e6 * (cycle - train) for cycle, train in
               zip(profile.lite_s[WARMUP - 1:], pieces.seconds["trainer.train"][WARMUP:])]
    reads = pieces.seconds["global-step read"]
    host = {"cycle_minus_trainer_train": statistics.median(host_us),
            "global_step_reads_per_loop": len(reads) / n_train}
    for key, values in pieces.seconds.items():
        # Every call of a piece that runs now and then (the batch write); else after warm-up.
        skip = WARMUP if len(values) >= n_train else 0
        host[key] = {"median_us": _median_us(values, skip),
                     "calls_per_loop": len(values) / n_train,
                     "mean_us_per_loop": 1e6 * sum(values[skip:]) / (n_train - WARMUP)}
    record = {
        "round": index, "loops": loops, "steps_per_loop": STEPS,
        "lite_ms": lite_ms, "raw_ms": raw_ms, "lite_over_raw": raw_ms / lite_ms,
        "lite_loop_ms": [round(1e3 * s, 3) for s in clock.lite_s],
        "raw_loop_ms": [round(1e3 * s, 3) for s in clock.raw_s["raw"]],
        "raw_direct_ms": raw_direct_ms, "lite_over_raw_direct": raw_direct_ms / lite_ms,
        "raw_direct_loop_ms": [round(1e3 * s, 3) for s in clock.raw_s["raw_direct"]],
        "per_step_us": {side: statistics.median(v) for side, v in per_step_us.items()},
        "per_step_lite_over_raw": statistics.median(
            [r / l for l, r in zip(per_step_us["lite"], per_step_us["raw"])]),
        # A call's fixed cost: t(100 steps) - 100 x the per-step cost, medians of the reps.
        "call_us": {side: statistics.median(
            [1e6 * a - SPLIT_STEPS[0] * p for a, p in zip(split[side][SPLIT_STEPS[0]],
                                                          per_step_us[side])])
            for side in calls},
        "split_reps": split_reps, "host_us": host, "loadavg": list(os.getloadavg())}
    print(f"round {index}: lite {lite_ms:.3f} ms  raw {raw_ms:.3f} ms  lite/raw "
          f"{record['lite_over_raw']:.3f} (paired {paired_ratios(record)['paired']:.3f}, "
          f"against raw_direct {paired_ratios(record, 'raw_direct_loop_ms')['paired']:.3f})"
          f"  per step lite {record['per_step_us']['lite']:.1f} "
          f"raw {record['per_step_us']['raw']:.1f} us  call lite "
          f"{record['call_us']['lite']:.0f} raw {record['call_us']['raw']:.0f} raw_direct "
          f"{record['call_us']['raw_direct']:.0f} us  host "
          f"{host['cycle_minus_trainer_train']:.0f} us  load {os.getloadavg()[0]:.2f}",
          file=sys.stderr, flush=True)
    return record, runner, loop, iterator


def graph_profile(runner, loop, iterator):
    """Op types of both sides' loop graphs (the traces the rounds ran)."""
    import tensorflow as tf

    trainer = runner.trainer
    steps = tf.constant(STEPS, tf.int32)
    lite_fn = trainer._train_loop.loop_fn  # pylint: disable=protected-access
    lite = while_body_ops(lite_fn.get_concrete_function(trainer._train_loop.iterator, steps))
    raw = while_body_ops(loop.get_concrete_function(iterator, steps))
    return {"lite": lite, "raw": raw,
            "body_ops": {"lite": sum(lite["body"].values()), "raw": sum(raw["body"].values())}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--loops", type=int, default=100, help="timed loops of each side a round")
    parser.add_argument("--split_reps", type=int, default=20,
                        help="alternating calls of 100 and 300 steps for the per-step cost")
    parser.add_argument("--profile_loops", type=int, default=40,
                        help="Controller loops timed piece by piece a round")
    parser.add_argument("--out", default=None, help="results JSON (default benchmarks/results/"
                        "<UTC date>-<commit>-inner-loop.json)")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "-C", _HERE, "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", _HERE, "status", "--porcelain", "--", "."],
                                capture_output=True, text=True, check=False).stdout.strip())
    started = datetime.datetime.now(datetime.timezone.utc)
    import vision_rows  # imports TensorFlow: after the arguments are checked

    state_before = vision_rows.machine_state()
    records, last = [], None
    for index in range(args.rounds):
        record, *last = measure_round(index, args.loops, args.split_reps, args.profile_loops)
        records.append(record)
    graphs = graph_profile(*last)
    ratios = [paired_ratios(r) for r in records]
    direct = [paired_ratios(r, "raw_direct_loop_ms") for r in records]
    summary = {
        "lite_over_raw": rounds_lib.spread([r["lite_over_raw"] for r in records]),
        "lite_over_raw_paired": rounds_lib.spread([r["paired"] for r in ratios]),
        "lite_over_raw_p10": rounds_lib.spread([r["p10"] for r in ratios]),
        "lite_over_raw_direct_paired": rounds_lib.spread([r["paired"] for r in direct]),
        "lite_over_raw_direct_p10": rounds_lib.spread([r["p10"] for r in direct]),
        "lite_ms": rounds_lib.spread([r["lite_ms"] for r in records]),
        "raw_ms": rounds_lib.spread([r["raw_ms"] for r in records]),
        "per_step_us_lite": rounds_lib.spread([r["per_step_us"]["lite"] for r in records]),
        "per_step_us_raw": rounds_lib.spread([r["per_step_us"]["raw"] for r in records]),
        "per_step_lite_over_raw": rounds_lib.spread(
            [r["per_step_lite_over_raw"] for r in records]),
        **{f"call_us_{side}": rounds_lib.spread([r["call_us"][side] for r in records])
           for side in ("lite", "raw", "raw_direct")},
        "host_us": rounds_lib.spread([r["host_us"]["cycle_minus_trainer_train"]
                                      for r in records]),
        "body_ops": graphs["body_ops"],
    }
    out = args.out or os.path.join(
        _HERE, "results", f"{started:%Y-%m-%d}-{commit or 'nocommit'}-inner-loop.json")
    result = {"kind": "inner_loop", "file": os.path.relpath(out, os.path.dirname(_HERE)),
              "commit": commit, "dirty": dirty, "started": f"{started:%Y-%m-%d %H:%M} UTC",
              "command": ["benchmarks/inner_loop.py"] + list(sys.argv[1:] if argv is None
                                                              else argv),
              "workload": WORKLOAD, "warmup_loops": WARMUP,
              "versions": vision_rows._versions("lite"),  # pylint: disable=protected-access
              "machine_before": state_before, "machine_after": vision_rows.machine_state(),
              "summary": summary, "graphs": graphs, "records": records}
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"file": result["file"], **summary}, indent=1))


if __name__ == "__main__":
    main()
