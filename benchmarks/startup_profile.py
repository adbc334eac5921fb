"""Where lite's time to first step and peak memory go (issue 55): one `lite-train` process of a
first_step.py row, with a mark at each phase boundary: the time since process start and the
resident memory (VmRSS, and its high-water mark VmHWM) at that moment.

Phases: Python up -> TensorFlow's import starts (lite's flags, config and input checks before
it) -> TensorFlow and Keras imported -> the experiment runner: the task's model, the optimizer's
variables, the task's dataset -> "training until" -> the train loop traced (Python: Keras layer
calls, gradients, optimizer update) -> the first loop's graph optimisation and run (step 1).
A sampler thread adds a mark whenever the high-water mark has grown by 50 MB, so the peak is
placed in its phase. The driver is lite's own `run()`, with the same flags first_step.py gives
it; the marks wrap lite_launcher's functions, not TensorFlow's (the trace marks wrap
`func_graph_from_py_func`, the one function every trace goes through).

    .venv/bin/python benchmarks/startup_profile.py --models resnet50 retinanet_resnet50_fpn
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)

import first_step  # noqa: E402

MARK = re.compile(r"^MARK (\S+) (\d+) (\d+) (.*)$")

# The child: lite's driver with marks. Runs in the side's interpreter, lite first on the path.
_CHILD = r'''
import functools, os, sys, threading, time

def _start():
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))

T0 = _start()

def _memory():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) // 1024
    return out

_LOCK = threading.Lock()

def mark(what):
    m = _memory()
    # One write per line, under a lock: the sampler thread marks too.
    with _LOCK:
        sys.stdout.write(f"MARK {time.time() - T0:.3f} {m['VmRSS']} {m['VmHWM']} {what}\n")
        sys.stdout.flush()

def _sample():
    last = 0
    while True:
        time.sleep(0.5)
        hwm = _memory()["VmHWM"]
        if hwm > last + 50:
            last = hwm
            mark("sample")

threading.Thread(target=_sample, daemon=True).start()
mark("python up")

def marked(fn, label):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        mark(label + " begin")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(label + " end")
    return wrapped

def wrap(owner, name, label):
    setattr(owner, name, marked(getattr(owner, name), label))

from lite_launcher.commands import train
_run_experiment = train.run_with_preemption_recovery

def run_with_marks(*args, **kwargs):
    mark("tensorflow imported")
    from tensorflow.python.framework import func_graph
    from lite_launcher.core import registry, train_lib
    from lite_launcher.optimization import optimizer_factory
    from lite_launcher.orbit import controller
    wrap(train_lib.ExperimentRunner, "__init__", "runner")
    wrap(optimizer_factory, "create_optimizer_variables", "optimizer variables")
    get_task = registry.get_task
    def get_task_with_marks(*a, **k):
        task = get_task(*a, **k)
        for method in ("build_model", "build_inputs"):
            setattr(task, method, marked(getattr(task, method), method))
        return task
    registry.get_task = get_task_with_marks
    first_loop = {"done": False}
    train_loop = controller.Controller._train_loop
    def train_loop_with_marks(self, *a, **k):
        if first_loop["done"]:
            return train_loop(self, *a, **k)
        mark("first loop begin")
        try:
            return train_loop(self, *a, **k)
        finally:
            first_loop["done"] = True
            mark("first loop end")
    controller.Controller._train_loop = train_loop_with_marks
    trace = func_graph.func_graph_from_py_func
    def trace_with_marks(name, *a, **k):
        if not str(name).startswith(("loop", "train")):
            return trace(name, *a, **k)
        mark(f"trace {name} begin")
        try:
            return trace(name, *a, **k)
        finally:
            mark(f"trace {name} end")
    func_graph.func_graph_from_py_func = trace_with_marks
    return _run_experiment(*args, **kwargs)

train.run_with_preemption_recovery = run_with_marks

class _ImportMark:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            mark("tensorflow import begins")
            sys.meta_path.remove(self)
        return None

_define_flags = train.define_lite_train_flags

def define_flags_with_marks():
    # run() has installed its import hooks by now: the mark goes in front of them.
    sys.meta_path.insert(0, _ImportMark())
    return _define_flags()

train.define_lite_train_flags = define_flags_with_marks
sys.argv = ["lite-train"] + sys.argv[1:]
try:
    train.run()
finally:
    mark("exit")
'''


def parse_marks(lines):
    """[(t, text)] of a child's output -> the MARK lines as dicts (t_s, rss_mb, hwm_mb, what)."""
    marks = []
    for _, text in lines:
        match = MARK.match(text)
        if match:
            marks.append({"t_s": float(match.group(1)), "rss_mb": int(match.group(2)),
                          "hwm_mb": int(match.group(3)), "what": match.group(4)})
    return marks


def phases(marks):
    """Seconds of each phase from the marks (None where a mark is missing): `imports`
    (tensorflow import begins -> tensorflow imported), `before_tensorflow`, `build_model`,
    `optimizer_variables`, `build_inputs`, `runner_rest` (the runner's other work),
    `to_first_loop` (runner built -> first loop), `trace` (the loop's trace),
    `first_run` (trace end -> first loop end: graph optimisation and the first run), and
    `peak_phase`: the phase in which the high-water mark reached its peak (the phase before
    the first mark that reads it)."""
    at = {}
    for m in marks:
        at.setdefault(m["what"], m["t_s"])
    trace_begin = next((m["t_s"] for m in marks if m["what"].startswith("trace loop")
                        and m["what"].endswith("begin")), None)
    trace_end = next((m["t_s"] for m in marks if m["what"].startswith("trace loop")
                      and m["what"].endswith("end")), None)

    def span(a, b):
        return at[b] - at[a] if a in at and b in at else None

    out = {"before_tensorflow": at.get("tensorflow import begins"),
           "imports": span("tensorflow import begins", "tensorflow imported"),
           "build_model": span("build_model begin", "build_model end"),
           "optimizer_variables": span("optimizer variables begin", "optimizer variables end"),
           "build_inputs": span("build_inputs begin", "build_inputs end"),
           "to_first_loop": span("runner end", "first loop begin"),
           "trace": trace_end - trace_begin if None not in (trace_begin, trace_end) else None,
           "first_run": (at["first loop end"] - trace_end
                         if trace_end is not None and "first loop end" in at else None),
           "first_step": at.get("first loop end")}
    parts = [out[k] for k in ("build_model", "optimizer_variables", "build_inputs")]
    runner = span("runner begin", "runner end")
    out["runner_rest"] = runner - sum(parts) if runner is not None and None not in parts else None
    peak = max(marks, key=lambda m: (m["hwm_mb"], -m["t_s"]), default=None)
    out["peak_hwm_mb"] = peak["hwm_mb"] if peak else None
    out["peak_phase"] = phase_at(marks, peak["t_s"]) if peak else None
    return out


def phase_at(marks, t):
    """The phase a mark at time `t` closes: named by the last begin/boundary mark before `t`
    (what a mark reads at `t` grew since the mark before it)."""
    name = "start"
    for m in marks:
        if m["t_s"] >= t:
            break
        if m["what"] != "sample":
            name = m["what"]
    return name


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50"],
                        choices=list(first_step.MODELS))
    parser.add_argument("--python", default=first_step.DEFAULT_TFM_PYTHON,
                        help="the interpreter (default TFM's venv, as first_step.py's lite side)")
    parser.add_argument("--lite", default=_ROOT, help="the lite checkout (put first on the path)")
    parser.add_argument("--data_dir", default="/tmp/lite_first_step_data")
    parser.add_argument("--work_dir", default="/tmp/lite_startup_profile")
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "-C", _ROOT, "rev-parse", "--short=7", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    started = datetime.datetime.now(datetime.timezone.utc)
    out = args.out or os.path.join(first_step.RESULTS_DIR,
                                   f"{started:%Y-%m-%d}-{commit}-startup-profile.json")
    os.makedirs(args.work_dir, exist_ok=True)
    env = first_step.side_env("lite", {"lite": os.path.abspath(args.lite)})
    results = {"file": os.path.relpath(out, _ROOT), "started": f"{started:%Y-%m-%d %H:%M} UTC",
               "commit": commit, "command": ["benchmarks/startup_profile.py"] + list(
                   sys.argv[1:] if argv is None else argv),
               "machine": {"cpu_model": first_step.cpu_model(), "cores": os.cpu_count()},
               "records": []}
    for model in args.models:
        for command in {tuple(first_step.write_data_command(args.python, model, args.data_dir))}:
            subprocess.run(list(command), check=True, env=env, capture_output=True)
        model_dir = os.path.join(args.work_dir, f"{model}-{os.getpid()}")
        subprocess.run(["rm", "-rf", model_dir], check=False)
        flags = first_step.side_command("lite", args.python, model,
                                        first_step.input_glob_for(model, args.data_dir),
                                        model_dir)[3:]
        load = os.getloadavg()[0]
        rc, lines, wall, cpu, rss = first_step.run_process(
            [args.python, "-c", _CHILD] + flags, env, args.timeout, cwd=args.work_dir)
        marks = parse_marks(lines)
        results["records"].append({
            "model": model, "rc": rc, "exit_s": wall, "cpu_s": cpu, "peak_rss_mb": rss,
            "loadavg_1m_before": load, "log": first_step.parse_log(lines),
            "phases": phases(marks), "marks": marks})
        subprocess.run(["rm", "-rf", model_dir], check=False)
        print(json.dumps({"model": model, "rc": rc, **phases(marks)}), flush=True)
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["rc"] == 0 for r in results["records"]) else 1


if __name__ == "__main__":
    sys.exit(main())
