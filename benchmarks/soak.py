"""Soak benchmark: a long `lite-train` run with a continuous evaluator beside it stays healthy.

    python benchmarks/soak.py [--train_steps 20000] [--out benchmarks/results/soak_....json]

Runs `lite-train --experiment mock --mode train` (steps_per_loop 10, a checkpoint every 50
steps, summaries every loop, max_to_keep 5) and `lite-train --mode continuous_eval` on the same
model_dir, and samples both processes from /proc while they run: resident memory (VmRSS),
threads, open file descriptors, plus model_dir's size (checkpoint files and event files apart)
and the trainer's last logged step. Targets, judged from the trainer's loop 100 (step 1000) to
its end: RSS and threads grow at most 5 %, open fds stay constant, model_dir holds at most
max_to_keep (+1 while one is written) checkpoints. The results file records every sample, the
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
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TRAIN_STEP = re.compile(r"train \| step:\s+(\d+) \|")
_EVAL_STEP = re.compile(r" eval \| step:\s+(\d+) \| eval time")

STEPS_PER_LOOP = 10
CHECKPOINT_INTERVAL = 50
MAX_TO_KEEP = 5
WARM_UP_LOOPS = 100
GROWTH_LIMIT = 0.05


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


def last_step(log_path: str, pattern: re.Pattern) -> int:
    try:
        with open(log_path, errors="replace") as f:
            steps = pattern.findall(f.read())
    except OSError:
        return 0
    return int(steps[-1]) if steps else 0


def _command(mode: str, model_dir: str, train_steps: int) -> List[str]:
    override = {
        "runtime": {"distribution_strategy": "off"},
        "trainer": {"train_steps": train_steps, "steps_per_loop": STEPS_PER_LOOP,
                    "summary_interval": STEPS_PER_LOOP,
                    "checkpoint_interval": CHECKPOINT_INTERVAL, "max_to_keep": MAX_TO_KEEP,
                    "validation_steps": 2, "validation_interval": 10 ** 9}}
    return [sys.executable, "-m", "lite_launcher.main", "--experiment", "mock", "--mode", mode,
            "--model_dir", model_dir, "--params_override", json.dumps(override)]


def judged(samples, process: str, from_step: int, end_step: int) -> List[Dict[str, int]]:
    """`process`'s samples while training ran, from `from_step` (after the warm-up) to before
    `end_step` (the last loop: what follows is the processes shutting down)."""
    return [s[process] for s in samples if s.get(process) is not None
            and from_step <= s["train_step"] < end_step]


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
        warm_up_loops: int = WARM_UP_LOOPS) -> Dict[str, object]:
    """Runs the soak; writes and returns the results (see the module docstring).

    The growth verdicts compare the first sample at or after `warm_up_loops` train loops with
    the last sample of each process.
    """
    model_dir = model_dir or tempfile.mkdtemp(prefix="lite_soak_")
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logs = {name: os.path.join(model_dir + "_logs", f"{name}.log")
            for name in ("trainer", "evaluator")}
    os.makedirs(model_dir + "_logs", exist_ok=True)
    processes = {}
    for name, mode in (("trainer", "train"), ("evaluator", "continuous_eval")):
        with open(logs[name], "w") as log:
            processes[name] = subprocess.Popen(_command(mode, model_dir, train_steps),
                                               stdout=log, stderr=subprocess.STDOUT, env=env,
                                               cwd=REPO_ROOT)
    samples = []
    start = time.monotonic()
    try:
        while any(p.poll() is None for p in processes.values()):
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"the soak did not end within {timeout_s} s")
            sample = {"time_s": round(time.monotonic() - start, 2),
                      "train_step": last_step(logs["trainer"], _TRAIN_STEP),
                      "eval_step": last_step(logs["evaluator"], _EVAL_STEP),
                      "model_dir": model_dir_sizes(model_dir)}
            for name, process in processes.items():
                sample[name] = process_sample(process.pid) if process.poll() is None else None
            samples.append(sample)
            time.sleep(sample_interval_s)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
            process.wait()
    codes = {name: p.returncode for name, p in processes.items()}
    results = {
        "benchmark": "soak", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "machine": machine(), "experiment": "mock", "train_steps": train_steps,
        "steps_per_loop": STEPS_PER_LOOP, "checkpoint_interval": CHECKPOINT_INTERVAL,
        "summary_interval": STEPS_PER_LOOP, "max_to_keep": MAX_TO_KEEP,
        "warm_up_step": warm_up_loops * STEPS_PER_LOOP, "exit_codes": codes,
        "final_train_step": last_step(logs["trainer"], _TRAIN_STEP),
        "final_eval_step": last_step(logs["evaluator"], _EVAL_STEP),
        "wall_s": round(time.monotonic() - start, 1),
        "verdicts": verdicts(samples, warm_up_loops * STEPS_PER_LOOP, train_steps),
        "samples": samples}
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_steps", type=int, default=20_000)
    parser.add_argument("--sample_interval_s", type=float, default=1.0)
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--out", default=os.path.join(
        REPO_ROOT, "benchmarks", "results",
        f"soak_{datetime.datetime.now(datetime.timezone.utc):%Y%m%d_%H%M}.json"))
    args = parser.parse_args(argv)
    results = run(args.train_steps, args.out, args.model_dir, args.sample_interval_s)
    print(json.dumps({k: v for k, v in results.items() if k != "samples"}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
