"""Soak benchmark: a long `lite-train` run with a continuous evaluator beside it stays healthy.

    python benchmarks/soak.py [--train_steps 20000] [--out benchmarks/results/soak_....json]
    nice -n 19 python benchmarks/soak.py --experiment resnet18 --duration_s 1800

Runs `lite-train --mode train` (steps_per_loop 10, a checkpoint every 50 steps -- 100 for
ResNet-18 --, summaries every loop, max_to_keep 5) and `lite-train --mode continuous_eval` on
the same model_dir, and samples both processes from /proc while they run: resident memory
(VmRSS), threads, open file descriptors, plus model_dir's size (checkpoint files and event
files apart) and the trainer's last logged step. Two experiments: `mock` (MockTask's tiny model
on one fixed batch) and `resnet18` (`resnet_imagenet` with ResNet-18 at 64x64, batch 16, on
synthetic JPEG TFRecords in TFM's format, the vision benchmarks' files). With `--duration_s`
the trainer gets SIGTERM once that time has passed (it saves a checkpoint and exits 143, the
preemption path) and the evaluator, once it has evaluated that checkpoint or 10 minutes later.
Targets, judged from the trainer's warm-up step (loop 100 of `mock`, loop 20 of ResNet-18) to
the last sample before the trainer stops: RSS and threads grow at most 5 %, open fds stay
constant, model_dir holds at most max_to_keep (+1 while one is written) checkpoints. The results file records every sample, the
verdicts and the machine (CPU model, cores, TensorFlow version). Not a unit test: the test of
this harness (tests/test_soak_harness.py) runs it for a few hundred steps and checks its
bookkeeping, not its numbers.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import importlib.metadata
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TRAIN_STEP = re.compile(r"train \| step:\s+(\d+) \|")
_EVAL_STEP = re.compile(r" eval \| step:\s+(\d+) \| eval time")
# The evaluator's memory is judged after this many evaluations: the first ones build the eval
# graph, the input pipeline and the metric state, which is growth by design.
EVALUATOR_WARM_UP_EVALS = 3
# A plateau: over the second half of the judged window RSS grows at most this much.
PLATEAU_LIMIT = 0.01

STEPS_PER_LOOP = 10
CHECKPOINT_INTERVAL = 50
MAX_TO_KEEP = 5
WARM_UP_LOOPS = 100
GROWTH_LIMIT = 0.05
# Per experiment: (checkpoint interval, warm-up loops). A ResNet-18 checkpoint with its
# momentum slots is ~90 MB, and its steps are ~1000x slower than mock's.
EXPERIMENTS = {"mock": (CHECKPOINT_INTERVAL, WARM_UP_LOOPS), "resnet18": (100, 20)}
# How long the evaluator may take to reach the stopped trainer's last checkpoint.
EVALUATOR_GRACE_S = 600


def machine() -> Dict[str, object]:
    """CPU model, logical cores, Python and TensorFlow versions of this machine."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f
                     if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {"cpu_model": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(),
            "tensorflow": importlib.metadata.version("tensorflow"),
            "keras": importlib.metadata.version("keras")}


def process_sample(pid: int) -> Optional[Dict[str, int]]:
    """RSS (KiB), threads and open fds of a running process from /proc; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError):
        return None
    if status.get("State", "").strip().startswith("Z"):
        return None  # exited, not yet reaped
    return {"rss_kib": int(status["VmRSS"].split()[0]), "threads": int(status["Threads"]),
            "fds": fds}


def model_dir_sizes(model_dir: str) -> Dict[str, int]:
    """Bytes of checkpoint files and of event files, and the number of checkpoints."""
    checkpoint_bytes = event_bytes = other_bytes = 0
    for root, _, files in os.walk(model_dir):
        for name in files:
            try:
                size = os.path.getsize(os.path.join(root, name))
            except OSError:
                continue  # removed by max_to_keep while we walked
            if name.startswith("ckpt-"):
                checkpoint_bytes += size
            elif name.startswith("events.out.tfevents."):
                event_bytes += size
            else:
                other_bytes += size
    return {"checkpoint_bytes": checkpoint_bytes, "event_bytes": event_bytes,
            "other_bytes": other_bytes,
            "checkpoints": len(glob.glob(os.path.join(model_dir, "ckpt-*.index")))}


def logged_steps(log_path: str, pattern: re.Pattern) -> List[int]:
    """Every step `pattern` finds in a process's log, in order."""
    try:
        with open(log_path, errors="replace") as f:
            return [int(step) for step in pattern.findall(f.read())]
    except OSError:
        return []


def last_step(log_path: str, pattern: re.Pattern) -> int:
    steps = logged_steps(log_path, pattern)
    return steps[-1] if steps else 0


def _resnet18_task(data_dir: str) -> Dict[str, object]:
    """ResNet-18 at 64x64 on the vision benchmarks' synthetic TFRecords (written once)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import vision_rows  # the benchmarks' own module: TensorFlow, so imported only here

    pattern = vision_rows.write_synthetic_tfrecords(data_dir)
    return vision_rows.overrides("resnet18", pattern, STEPS_PER_LOOP, 1, None,
                                 eval_steps=2)["task"]


def _command(experiment: str, mode: str, model_dir: str, train_steps: int,
             task: Optional[Dict[str, object]] = None) -> List[str]:
    override = {
        "runtime": {"distribution_strategy": "off"},
        "trainer": {"train_steps": train_steps, "steps_per_loop": STEPS_PER_LOOP,
                    "summary_interval": STEPS_PER_LOOP,
                    "checkpoint_interval": EXPERIMENTS[experiment][0],
                    "max_to_keep": MAX_TO_KEEP,
                    "validation_steps": 2, "validation_interval": 10 ** 9}}
    name = "mock"
    if task is not None:
        override["task"] = task
        name = "resnet_imagenet"
    return [sys.executable, "-m", "lite_launcher.commands.train", "--experiment", name, "--mode", mode,
            "--model_dir", model_dir, "--params_override", json.dumps(override)]


def judged(samples, process: str, from_step: int, end_step: int) -> List[Dict[str, int]]:
    """`process`'s samples while training ran, from `from_step` (after the warm-up) to before
    `end_step` (the last loop: what follows is the processes shutting down). The evaluator's
    window starts once it has finished `EVALUATOR_WARM_UP_EVALS` evaluations."""
    return [s[process] for s in samples if s.get(process) is not None
            and from_step <= s["train_step"] < end_step
            and (process != "evaluator"
                 or s.get("evaluations", EVALUATOR_WARM_UP_EVALS) >= EVALUATOR_WARM_UP_EVALS)]


def second_half_trend(values: List[int]):
    """Plateau or leak: the growth over the second half of the window and its least-squares
    slope per sample. A leak keeps growing there; a plateau does not."""
    half = values[len(values) // 2:]
    if len(half) < 2:
        return None
    n = len(half)
    mean_x, mean_y = (n - 1) / 2, sum(half) / n
    slope = (sum((i - mean_x) * (y - mean_y) for i, y in enumerate(half))
             / sum((i - mean_x) ** 2 for i in range(n)))
    fitted_growth = slope * (n - 1) / half[0]
    return {"start": half[0], "end": half[-1], "fitted_growth": fitted_growth,
            "plateau": fitted_growth <= PLATEAU_LIMIT}


def growth(values: List[int]):
    """First, last and largest value and the growth from first to last (None: < 2 values)."""
    if len(values) < 2:
        return None
    return {"start": values[0], "end": values[-1], "max": max(values),
            "growth": (values[-1] - values[0]) / values[0]}


def verdicts(samples, from_step: int, end_step: int) -> Dict[str, object]:
    """The targets, judged on the samples from `from_step` to before `end_step`.

    Open fds: the number of descriptors held between writes (the smallest in each half of the
    window) must not change; a checkpoint or summary being written holds a few more for a
    moment, reported as `fds_max`.
    """
    result = {}
    for process in ("trainer", "evaluator"):
        window = judged(samples, process, from_step, end_step)
        rss = growth([s["rss_kib"] for s in window])
        threads = growth([s["threads"] for s in window])
        fds = [s["fds"] for s in window]
        half = len(fds) // 2
        baseline = (min(fds[:half]), min(fds[half:])) if half else None
        result[process] = {
            "samples": len(window), "rss": rss, "threads": threads,
            "rss_second_half": second_half_trend([s["rss_kib"] for s in window]),
            "fds_baseline": baseline, "fds_max": max(fds) if fds else None,
            "rss_ok": rss is not None and rss["growth"] <= GROWTH_LIMIT,
            "threads_ok": threads is not None and threads["growth"] <= GROWTH_LIMIT,
            "fds_ok": baseline is not None and baseline[0] == baseline[1]}
    most = max((s["model_dir"]["checkpoints"] for s in samples), default=0)
    result["model_dir"] = {"max_checkpoints": most, "max_to_keep": MAX_TO_KEEP,
                           "checkpoints_ok": most <= MAX_TO_KEEP + 1,
                           "final": samples[-1]["model_dir"] if samples else None}
    return result


def run(train_steps: int, out_path: str, model_dir: Optional[str] = None,
        sample_interval_s: float = 1.0, timeout_s: float = 6 * 3600,
        warm_up_loops: Optional[int] = None, experiment: str = "mock",
        duration_s: Optional[float] = None, data_dir: Optional[str] = None,
        command: Optional[List[str]] = None) -> Dict[str, object]:
    """Runs the soak; writes and returns the results (see the module docstring).

    The growth verdicts compare the first sample at or after `warm_up_loops` train loops
    (default: the experiment's) with the last sample of each process before the end: step
    `train_steps`, or the step logged when the trainer got SIGTERM after `duration_s`.
    """
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment {experiment!r}: use one of {sorted(EXPERIMENTS)}")
    if warm_up_loops is None:
        warm_up_loops = EXPERIMENTS[experiment][1]
    model_dir = model_dir or tempfile.mkdtemp(prefix="lite_soak_")
    task = None
    if experiment == "resnet18":
        task = _resnet18_task(data_dir or model_dir + "_data")
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logs = {name: os.path.join(model_dir + "_logs", f"{name}.log")
            for name in ("trainer", "evaluator")}
    os.makedirs(model_dir + "_logs", exist_ok=True)
    processes = {}
    for name, mode in (("trainer", "train"), ("evaluator", "continuous_eval")):
        with open(logs[name], "w") as log:
            processes[name] = subprocess.Popen(
                _command(experiment, mode, model_dir, train_steps, task),
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    samples = []
    stop = None  # {"time_s", "train_step"} when the trainer got SIGTERM
    evaluator_stop_s = None
    start = time.monotonic()
    try:
        while any(p.poll() is None for p in processes.values()):
            elapsed = time.monotonic() - start
            if elapsed > timeout_s:
                raise TimeoutError(f"the soak did not end within {timeout_s} s")
            evaluated = logged_steps(logs["evaluator"], _EVAL_STEP)  # the log read once
            sample = {"time_s": round(elapsed, 2),
                      "train_step": last_step(logs["trainer"], _TRAIN_STEP),
                      "eval_step": evaluated[-1] if evaluated else 0,
                      "evaluations": len(evaluated),
                      "model_dir": model_dir_sizes(model_dir)}
            for name, process in processes.items():
                sample[name] = process_sample(process.pid) if process.poll() is None else None
            samples.append(sample)
            trainer, evaluator = processes["trainer"], processes["evaluator"]
            if duration_s is not None and stop is None and elapsed > duration_s \
                    and trainer.poll() is None:
                trainer.send_signal(signal.SIGTERM)  # the preemption path: save, exit 143
                stop = {"time_s": sample["time_s"], "train_step": sample["train_step"]}
            if stop is not None and trainer.poll() is not None and evaluator.poll() is None:
                evaluator_stop_s = evaluator_stop_s or elapsed + EVALUATOR_GRACE_S
                if (sample["eval_step"] >= last_step(logs["trainer"], _TRAIN_STEP)
                        or elapsed > evaluator_stop_s):
                    evaluator.send_signal(signal.SIGTERM)
                    evaluator_stop_s = float("inf")
            time.sleep(sample_interval_s)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
            process.wait()
    codes = {name: p.returncode for name, p in processes.items()}
    end_step = train_steps if stop is None else stop["train_step"]
    results = {
        "benchmark": "soak", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "command": command, "file": os.path.relpath(os.path.abspath(out_path), REPO_ROOT),
        "evaluator_warm_up_evaluations": EVALUATOR_WARM_UP_EVALS,
        "machine": machine(), "experiment": experiment, "train_steps": train_steps,
        "steps_per_loop": STEPS_PER_LOOP,
        "checkpoint_interval": EXPERIMENTS[experiment][0],
        "summary_interval": STEPS_PER_LOOP, "max_to_keep": MAX_TO_KEEP,
        "warm_up_step": warm_up_loops * STEPS_PER_LOOP, "exit_codes": codes,
        "duration_s": duration_s, "stopped": stop, "nice": os.nice(0),
        "final_train_step": last_step(logs["trainer"], _TRAIN_STEP),
        "final_eval_step": last_step(logs["evaluator"], _EVAL_STEP),
        "final_checkpoint_step": max(
            (int(name[5:-6]) for name in os.listdir(model_dir)
             if name.startswith("ckpt-") and name.endswith(".index")), default=0),
        "wall_s": round(time.monotonic() - start, 1),
        "verdicts": verdicts(samples, warm_up_loops * STEPS_PER_LOOP, end_step),
        "samples": samples}
    if task is not None:
        results["task"] = task
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", choices=sorted(EXPERIMENTS), default="mock")
    parser.add_argument("--train_steps", type=int, default=20_000)
    parser.add_argument("--duration_s", type=float, default=None,
                        help="SIGTERM the trainer after this many seconds")
    parser.add_argument("--data_dir", default=None,
                        help="resnet18: where the synthetic TFRecords are (written once)")
    parser.add_argument("--sample_interval_s", type=float, default=1.0)
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--out", default=os.path.join(
        REPO_ROOT, "benchmarks", "results",
        f"soak_{datetime.datetime.now(datetime.timezone.utc):%Y%m%d_%H%M}.json"))
    args = parser.parse_args(argv)
    results = run(args.train_steps, args.out, args.model_dir, args.sample_interval_s,
                  experiment=args.experiment, duration_s=args.duration_s,
                  data_dir=args.data_dir,
                  command=["python", "benchmarks/soak.py"] + list(
                      sys.argv[1:] if argv is None else argv))
    print(json.dumps({k: v for k, v in results.items() if k != "samples"}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
