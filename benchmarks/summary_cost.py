"""Per-outer-loop cost of the training summaries on `mlp_tiny` at steps_per_loop=1.

Two runs of the same experiment in one process, one with summaries (save_summary=True) and one
without, alternate blocks of LOOPS outer loops; the cost is the difference of the median
per-loop times, in wall time and in this process's CPU time (less disturbed by other processes
on a shared machine). Also times `SummaryManager.write_summaries` alone on a loop's output:
queued (the default; its batch writes included) and eager (every value through
`summaries.scalar`, then a flush: the path before the queue, as Orbit writes).

    .venv/bin/python benchmarks/summary_cost.py [--rounds 15] [--loops 300]

Numbers from a shared or loaded machine are noisy: compare medians, not single blocks.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import lite_launcher as ll  # noqa: E402
from lite_launcher import summaries  # noqa: E402


def make_runner(model_dir, save_summary):
    params = ll.get_exp_config("mlp_tiny")
    params.override({"trainer": {"steps_per_loop": 1, "train_steps": 10 ** 9}})
    task = ll.get_task(params.task)
    return ll.ExperimentRunner(distribution_strategy=tf.distribute.get_strategy(), task=task,
                               mode="train", params=params, model_dir=model_dir,
                               save_summary=save_summary)


def per_loop_us(runner, loops):
    """(wall, process CPU) microseconds per outer loop over `loops` loops."""
    controller = runner.controller
    start_step = int(controller.global_step.numpy())
    wall, cpu = time.perf_counter(), time.process_time()
    controller.train(start_step + loops, checkpoint_at_completion=False)
    return ((time.perf_counter() - wall) / loops * 1e6,
            (time.process_time() - cpu) / loops * 1e6)


def per_call_us(fn, calls):
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return ((time.perf_counter() - wall) / calls * 1e6,
            (time.process_time() - cpu) / calls * 1e6)


def medians(pairs):
    return tuple(statistics.median(values) for values in zip(*pairs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--loops", type=int, default=300)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="summary_cost_")
    runners = {"summaries": make_runner(os.path.join(base, "on"), True),
               "no summaries": make_runner(os.path.join(base, "off"), False)}
    for runner in runners.values():
        per_loop_us(runner, 50)  # traces, first checkpoint
    times = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, runner in runners.items():
            times[name].append(per_loop_us(runner, args.loops))
    loop = {name: medians(values) for name, values in times.items()}
    print(f"medians of {args.rounds} blocks of {args.loops} loops; us: wall / process CPU")
    for name, (wall, cpu) in loop.items():
        print(f"outer loop, {name:13s}: {wall:8.1f} / {cpu:8.1f}")
    print(f"summary cost per loop       : "
          f"{loop['summaries'][0] - loop['no summaries'][0]:8.1f} / "
          f"{loop['summaries'][1] - loop['no summaries'][1]:8.1f}")

    # write_summaries alone on a loop's output.
    step = tf.Variable(0, dtype=tf.int64)
    output = {"accuracy": np.float32(0.5), "training_loss": np.float32(0.7),
              "learning_rate": np.float32(0.01), "steps_per_second": 1234.5}
    queued = summaries.SummaryManager(os.path.join(base, "queued"), global_step=step)
    eager = summaries.SummaryManager(
        os.path.join(base, "eager"), lambda n, v, step: summaries.scalar(n, v, step=step),
        global_step=step)

    def eager_and_flush():
        eager.write_summaries(output)
        eager.flush()

    for name, fn in (("queued write_summaries", lambda: queued.write_summaries(output, step=1)),
                     ("eager scalar x4 + flush", eager_and_flush),
                     ("flush", queued.flush)):
        fn()
        wall, cpu = medians([per_call_us(fn, 200) for _ in range(args.rounds)])
        print(f"{name:26s}: {wall:8.1f} / {cpu:8.1f} per call")


if __name__ == "__main__":
    main()
