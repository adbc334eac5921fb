"""Faults in clusters of local `lite-train` processes (TF_CONFIG on 127.0.0.1, free ports
picked at test time): MultiWorkerMirrored with 2 workers, a sidecar evaluator beside them, and
a parameter-server cluster.

- SIGTERM to one worker (a preemption notice): TF's PreemptionCheckpointHandler makes every
  worker save at the same step and exit 143; a restart of both resumes there and ends with the
  weights of an uninterrupted run.
- SIGKILL of one worker: the survivor stops with one line naming the lost task (exit 1) instead
  of retrying forever; the chief's last checkpoint reads, and a restart resumes from it.
- A worker that never starts (a wrong port in TF_CONFIG): one line naming it after
  `runtime.cluster_failure_timeout_s`; a worker that hangs (SIGSTOP): the same line once its
  heartbeats are missed for that long.
- Parameter servers: a killed worker's closures run on the other one; killed workers started
  again rejoin; every step runs once; a killed ps stops the chief with one line and a restart
  resumes from the last checkpoint.

The workload is `mlp_tiny` (one fixed batch served forever, plain SGD, deterministic ops), so
the weights after N steps do not depend on where a run was interrupted, and an uninterrupted
in-process run of N steps on one device (the same batch: each worker's half of the global batch
is the same 32 examples) gives the reference weights. Every wait is for a log line or a file,
bounded; no test relies on one process being faster than another.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.core import registry
from reliability_utils import (ERROR_PREFIX, REPO_ROOT, checkpoint_global_step,
                               checkpoint_numbers, logged_train_steps, override_json,
                               read_checkpoint, read_text,
                               restored_checkpoints, stop_if_running, subprocess_env, wait_for)
from test_distribution import free_ports
from cli import lite_train_command, run_lite_train_in_process

PREEMPTION_EXIT_CODE = 143
WAIT_S = 180  # bound on every wait for a cluster of two processes on a loaded machine
FAILURE_TIMEOUT_S = 10  # runtime.cluster_failure_timeout_s in these tests (default 120)
_SAVED = re.compile(r"Saved checkpoint (\S+)ckpt-(\d+)\.")
_PREEMPTED = re.compile(r"this worker saved its checkpoint at step (\d+); exiting with code 143")


def cluster_flags(model_dir, train_steps, **extra):
    flat = {"runtime.distribution_strategy": "multi_worker_mirrored",
            "runtime.deterministic_ops": True,
            "runtime.cluster_failure_timeout_s": FAILURE_TIMEOUT_S,
            "trainer.train_steps": train_steps, "trainer.steps_per_loop": 10,
            "trainer.summary_interval": 10, "trainer.checkpoint_interval": 10,
            "trainer.max_to_keep": 3, **extra}
    return ["--experiment", "mlp_tiny", "--mode", "train", "--model_dir", str(model_dir),
            "--params_override", override_json(flat)]


def start_worker(hosts, index, flags, log_path, scratch):
    env = subprocess_env()
    env["TF_CONFIG"] = json.dumps({"cluster": {"worker": hosts},
                                   "task": {"type": "worker", "index": index}})
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["TMPDIR"] = str(scratch)  # where the non-chief's throwaway checkpoints go
    os.makedirs(scratch, exist_ok=True)
    with open(log_path, "w") as log:
        return subprocess.Popen(lite_train_command(*flags),
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)


def start_cluster(tmp_path, name, flags, hosts=None):
    """Starts workers 0 (the chief) and 1; returns (processes, log paths)."""
    hosts = hosts or [f"127.0.0.1:{port}" for port in free_ports(2)]
    logs = [str(tmp_path / f"{name}_worker{i}.log") for i in range(2)]
    processes = [start_worker(hosts, i, flags, logs[i], tmp_path / f"{name}_tmp{i}")
                 for i in range(2)]
    return processes, logs


def wait_all(processes, logs):
    codes = []
    for process, log in zip(processes, logs):
        try:
            codes.append(process.wait(timeout=WAIT_S))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{log} did not exit within {WAIT_S} s:\n"
                                 f"{read_text(log)[-3000:]}") from None
    return codes


def run_cluster(tmp_path, name, flags):
    """Runs a cluster to its end; asserts both workers exit 0; returns the log paths."""
    processes, logs = start_cluster(tmp_path, name, flags)
    try:
        codes = wait_all(processes, logs)
    finally:
        for process in processes:
            stop_if_running(process)
    assert codes == [0, 0], [read_text(log)[-2000:] for log in logs]
    return logs


def fault_after_first_checkpoint(tmp_path, name, flags, fault):
    """Starts a cluster, calls `fault(processes)` once the chief has saved a checkpoint (both
    workers are then training), and waits for both; returns (exit codes, log paths)."""
    processes, logs = start_cluster(tmp_path, name, flags)
    try:
        wait_for(lambda: saved_steps(logs[0]) or any(p.poll() is not None for p in processes),
                 timeout=WAIT_S, interval=0.05, what="the chief's first checkpoint")
        assert all(p.poll() is None for p in processes), read_text(logs[0])[-3000:]
        fault(processes)
        return wait_all(processes, logs), logs
    finally:
        for process in processes:
            stop_if_running(process)


def saved_steps(log_path):
    return [int(step) for _, step in _SAVED.findall(read_text(log_path))]


def last_line(log_path):
    return read_text(log_path).strip().splitlines()[-1]


def uninterrupted_weights(train_steps):
    """mlp_tiny trained `train_steps` steps in this process on one device, on the batch each
    worker sees (32 examples), straight through."""
    params = registry.get_exp_config("mlp_tiny")
    params.task.train_data.global_batch_size = 32
    task = registry.get_task(params.task)
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    inputs, labels = next(iter(task.build_inputs(params.task.train_data)))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = task.build_losses(labels, model(inputs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    for _ in range(train_steps):
        step()
    return [w.numpy() for w in model.weights]


def checkpoint_weights(prefix):
    """The model's trainable variables in a checkpoint (Keras 3 saves them, in the model's
    order, under the optimizer's `_trainable_variables`), read with every other tensor."""
    values = read_checkpoint(prefix)
    names = sorted((k for k in values if k.startswith("optimizer/_trainable_variables/")),
                   key=lambda k: int(k.split("/")[2]))
    return names, [values[k] for k in names]


def preempt_worker_1_after_the_first_checkpoint(tmp_path, model_dir):
    """SIGTERMs worker 1 of a running 2-worker cluster once; asserts every worker saved at one
    step agreed through the cluster and exited 143; returns (that step, its checkpoint)."""
    # The notice reaches one worker only.
    codes, logs = fault_after_first_checkpoint(
        tmp_path, "preempted", cluster_flags(model_dir, 10 ** 7),
        lambda processes: processes[1].send_signal(signal.SIGTERM))
    assert codes == [PREEMPTION_EXIT_CODE] * 2, [read_text(log)[-2000:] for log in logs]
    # Both saved at the same step, agreed through the cluster.
    steps = [[int(s) for s in _PREEMPTED.findall(read_text(log))] for log in logs]
    assert len(steps[0]) == 1 and steps[0] == steps[1], steps
    step = steps[0][0]
    assert "Member 1 has received termination notice" in read_text(logs[1])
    latest = tf.train.latest_checkpoint(str(model_dir))
    assert latest == str(model_dir / f"ckpt-{step}")
    assert checkpoint_global_step(latest) == step
    assert step > max(saved_steps(logs[0])[:-1] or [0])  # newer than every periodic save
    return step, latest


@pytest.mark.slow
def test_sigterm_to_one_worker_saves_every_worker_at_one_step(tmp_path):
    """The release SIGTERM test without its restart: two real processes, worker 1 alone told
    to stop after the chief's first checkpoint; both save at the same step and exit 143."""
    model_dir = tmp_path / "model"
    step, latest = preempt_worker_1_after_the_first_checkpoint(tmp_path, model_dir)
    assert checkpoint_numbers(str(model_dir))[-1] == step  # nothing written after it
    names, _ = checkpoint_weights(latest)
    assert len(names) == 4  # the whole model: both Dense layers' kernels and biases


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_multi_worker_faults.py::"
                             "test_sigterm_to_one_worker_saves_every_worker_at_one_step")
def test_sigterm_to_one_worker_saves_every_worker_at_one_step_and_resume_matches(tmp_path):
    model_dir = tmp_path / "model"
    step, latest = preempt_worker_1_after_the_first_checkpoint(tmp_path, model_dir)
    preempted_names, preempted = checkpoint_weights(latest)

    # A restart of both resumes at that step and trains 20 more.
    final_steps = step + 20
    logs = run_cluster(tmp_path, "resumed", cluster_flags(model_dir, final_steps))
    for log in logs:
        assert restored_checkpoints(read_text(log))[-1] == (latest, step)
    final = str(model_dir / f"ckpt-{final_steps}")
    assert tf.train.latest_checkpoint(str(model_dir)) == final
    assert checkpoint_global_step(final) == final_steps
    names, resumed = checkpoint_weights(final)
    assert names == preempted_names and len(names) == 4
    reference = uninterrupted_weights(final_steps)
    assert [w.shape for w in reference] == [w.shape for w in resumed]
    for name, value, expected, before in zip(names, resumed, reference, preempted):
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=name)
        assert np.abs(value - before).max() > 0, name  # the resumed run trained on
    # One step fewer is outside the tolerance: the comparison sees a lost or repeated step.
    one_short = uninterrupted_weights(final_steps - 1)
    assert max(np.abs(a - b).max() for a, b in zip(one_short, resumed)) > 1e-5


def kill_worker_1_after_the_first_checkpoint(tmp_path, model_dir):
    """Kills worker 1 of a running 2-worker cluster once; asserts the chief stopped with one
    line naming it (exit 1, no in-process retry); returns the log paths."""
    codes, logs = fault_after_first_checkpoint(
        tmp_path, "killed", cluster_flags(model_dir, 10 ** 7),
        lambda processes: processes[1].kill())
    assert codes == [1, -signal.SIGKILL], read_text(logs[0])[-3000:]
    line = last_line(logs[0])
    assert line.startswith(ERROR_PREFIX + "Lost contact with cluster task worker 1 ("), line
    assert f"resumes from the last checkpoint in {model_dir}." in line
    assert "retry" not in read_text(logs[0])  # no in-process restart that would wait forever
    return logs


@pytest.mark.slow
def test_sigkill_of_one_worker_stops_the_survivor_with_one_line(tmp_path):
    """The release SIGKILL test without its restart: two real processes, worker 1 killed once
    after the chief's first checkpoint; the chief stops with one line naming it (exit 1)."""
    model_dir = tmp_path / "model"
    logs = kill_worker_1_after_the_first_checkpoint(tmp_path, model_dir)
    assert checkpoint_global_step(tf.train.latest_checkpoint(str(model_dir))) == \
        saved_steps(logs[0])[-1]


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_multi_worker_faults.py::"
                             "test_sigkill_of_one_worker_stops_the_survivor_with_one_line")
def test_sigkill_of_one_worker_stops_the_survivor_with_one_line_and_restart_resumes(tmp_path):
    model_dir = tmp_path / "model"
    logs = kill_worker_1_after_the_first_checkpoint(tmp_path, model_dir)

    # The chief's last checkpoint is whole and is the newest it logged.
    latest = tf.train.latest_checkpoint(str(model_dir))
    step = saved_steps(logs[0])[-1]
    assert latest == str(model_dir / f"ckpt-{step}")
    assert checkpoint_global_step(latest) == step
    read_checkpoint(latest)

    logs = run_cluster(tmp_path, "restarted", cluster_flags(model_dir, step + 20))
    for log in logs:
        assert restored_checkpoints(read_text(log))[-1] == (latest, step)
    assert checkpoint_numbers(str(model_dir))[-1] == step + 20
    assert checkpoint_global_step(str(model_dir / f"ckpt-{step + 20}")) == step + 20


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_multi_worker_faults.py::"
                             "test_worker_whose_peer_never_starts_stops_with_one_line")
def test_hung_worker_stops_the_survivor_with_one_line_after_the_failure_timeout(tmp_path):
    """Worker 1 hangs (SIGSTOP: alive, its connections open, no heartbeats): the chief, blocked
    in a collective, stops once TF's coordination service misses worker 1's heartbeats for
    runtime.cluster_failure_timeout_s (24 s here), with one line naming worker 1; its
    checkpoint reads."""
    model_dir = tmp_path / "model"
    # Longer than TF's own heartbeat timeout (10 s), so that the wait shows this one applies.
    timeout_s = 24
    processes, logs = start_cluster(tmp_path, "hung", cluster_flags(
        model_dir, 10 ** 7, **{"runtime.cluster_failure_timeout_s": timeout_s}))
    try:
        wait_for(lambda: saved_steps(logs[0]) or any(p.poll() is not None for p in processes),
                 timeout=WAIT_S, interval=0.05, what="the chief's first checkpoint")
        assert all(p.poll() is None for p in processes), read_text(logs[0])[-3000:]
        processes[1].send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            code = processes[0].wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the survivor still waits after {WAIT_S} s:\n"
                                 f"{read_text(logs[0])[-3000:]}") from None
        waited = time.monotonic() - stopped_at
        assert processes[1].poll() is None  # still hung, not dead
    finally:
        for process in processes:
            stop_if_running(process)  # SIGKILL ends a stopped process too
    assert code == 1, read_text(logs[0])[-3000:]
    line = last_line(logs[0])
    assert line.startswith(ERROR_PREFIX + "Lost contact with cluster task worker 1 ("), line
    assert "stopped sending heartbeats" in line, line
    # Not at once: the hung worker looks alive until its heartbeats are missed for the timeout
    # (they go every timeout / 2, so the last can be that old when it stops).
    assert waited >= timeout_s / 2, waited
    latest = tf.train.latest_checkpoint(str(model_dir))
    step = saved_steps(logs[0])[-1]
    assert latest == str(model_dir / f"ckpt-{step}")
    assert checkpoint_global_step(latest) == step
    read_checkpoint(latest)


def test_worker_whose_peer_never_starts_stops_with_one_line(tmp_path, monkeypatch):
    """In this process (the wait is lite's own, before TensorFlow's server starts: nothing of
    the cluster is set up in the process when it gives up)."""
    own, absent = free_ports(2)  # nothing will listen on `absent`
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{own}", f"127.0.0.1:{absent}"]},
        "task": {"type": "worker", "index": 0}}))
    model_dir = tmp_path / "model"
    # Nothing will ever listen on `absent`: a short timeout is as sure as a long one.
    timeout_s = 2
    # Deterministic ops off: they would stay on in this process for every later test.
    run = run_lite_train_in_process(*cluster_flags(
        model_dir, 100, **{"runtime.cluster_failure_timeout_s": timeout_s,
                           "runtime.deterministic_ops": False}))
    assert run.returncode == 1, run.stderr[-3000:] + run.logged[-3000:]
    assert run.stderr.strip().splitlines()[-1] == (
        f"{ERROR_PREFIX}Cluster task worker 1 at 127.0.0.1:{absent} did not start within "
        f"runtime.cluster_failure_timeout_s={timeout_s} s (nothing accepts connections "
        f"there): check its address in TF_CONFIG and that it runs.")
    assert checkpoint_numbers(str(model_dir)) == []  # it trained nothing


def test_lost_task_line_names_the_peer_from_tensorflows_error(monkeypatch):
    from lite_launcher.commands import train as driver

    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}))
    # The shape of TF 2.21's message after a SIGKILL of worker 1 (node traceback shortened).
    message = ("Graph execution error:\n\nDetected at node SGD/CollectiveReduceV2 defined at "
               "(most recent call last):\n  File \"<frozen runpy>\", line 198, in _run\n\n"
               "  File \"trainer.py\", line 9, in step\n\n    apply()\n\n"
               "recvmsg:Connection reset by peer\nAdditional GRPC error information from "
               "remote target /job:worker/replica:0/task:1 while calling RecvBuf:\n")
    error = driver._cluster_task_lost(tf.errors.UnavailableError(None, None, message), "/m")
    assert str(error) == (
        "Lost contact with cluster task worker 1 (UnavailableError: recvmsg:Connection reset "
        "by peer). Restart every task of the cluster: training resumes from the last "
        "checkpoint in /m.")


def test_lost_task_line_names_the_parameter_server_a_worker_relays(monkeypatch):
    from lite_launcher.commands import train as driver

    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"chief": ["c:1"], "worker": ["a:1", "b:1"], "ps": ["p:1"]},
         "task": {"type": "chief", "index": 0}}))
    # The shape of TF 2.21's error on the coordinator after a SIGKILL of the ps (shortened):
    # worker 0 relays it, so the message names worker 0 first.
    relayed = ("Graph execution error:\n\nDetected at node while/body/_1/Add/ReadVariableOp/_34 "
               "defined at (most recent call last):\n<stack traces unavailable>\n2 root error(s) "
               "found.\n  (0) UNAVAILABLE:  failed to connect to all addresses\nAdditional GRPC "
               "error information from remote target /job:worker/replica:0/task:0 while calling "
               "/tensorflow.eager.EagerService/Enqueue:\n")
    from_ps = ("Additional GRPC error information from remote target "
               "/job:ps/replica:0/task:0/device:CPU:0 while calling RunComponentFunction:\n")
    error = tf.errors.UnavailableError(None, None, relayed + from_ps)
    params = registry.get_exp_config("mlp_tiny")
    params.runtime.distribution_strategy = "parameter_server"
    assert driver._lost_parameter_server(params, error)
    assert str(driver._cluster_task_lost(error, "/m")) == (
        "Lost contact with cluster task ps 0 (UnavailableError: failed to connect to all "
        "addresses). Restart every task of the cluster: training resumes from the last "
        "checkpoint in /m.")
    # A worker's failure is TF's to recover (the coordinator reschedules): not a lost ps.
    worker_lost = tf.errors.UnavailableError(None, None, relayed)
    assert not driver._lost_parameter_server(params, worker_lost)


# ------------------------------------------------------------------------------------------
# A sidecar evaluator (TF_CONFIG task type 'evaluator', TFM's pattern) beside the 2 workers.


def summary_values(summary_dir, tag):
    """{step: value} of every scalar summary `tag` in the event files of `summary_dir`."""
    values = {}
    for path in sorted(glob.glob(os.path.join(summary_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    assert event.step not in values, f"step {event.step} written twice"
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


def numpy_validation_loss(prefix):
    """mlp_tiny's mean cross-entropy on its validation batch (64 examples, seed 0) with the
    weights of checkpoint `prefix`, in numpy (float64)."""
    from lite_launcher.experiments.workloads import make_workload_batch

    _, (kernel_0, bias_0, kernel_1, bias_1) = checkpoint_weights(prefix)
    inputs, labels = make_workload_batch("mlp_tiny", 64, seed=0)
    hidden = np.maximum(inputs.astype(np.float64) @ kernel_0 + bias_0, 0.0)
    logits = hidden @ kernel_1 + bias_1
    logits -= logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-log_probs[np.arange(len(labels)), labels].mean())


def evaluated_steps(log_path):
    return [int(step) for step in re.findall(r" eval \| step:\s+(\d+) \| eval time", read_text(
        log_path))]


def start_evaluator(hosts, model_dir, train_steps, log_path, scratch):
    env = subprocess_env()
    env["TF_CONFIG"] = json.dumps({"cluster": {"worker": hosts[:2], "evaluator": hosts[2:]},
                                   "task": {"type": "evaluator", "index": 0}})
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["TMPDIR"] = str(scratch)
    os.makedirs(scratch, exist_ok=True)
    flags = cluster_flags(model_dir, train_steps, **{
        "trainer.continuous_eval_all_checkpoints": True, "trainer.validation_steps": 2})
    flags[flags.index("train")] = "continuous_eval"
    with open(log_path, "w") as log:
        return subprocess.Popen(lite_train_command(*flags),
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_side_by_side_eval.py::test_evaluate_all_"
                             "checkpoints_in_order_and_a_restarted_evaluator_skips_evaluated_ones")
def test_sidecar_evaluator_evaluates_every_chief_checkpoint_once_across_its_restart(tmp_path):
    model_dir = tmp_path / "model"
    hosts = [f"127.0.0.1:{port}" for port in free_ports(3)]
    # The evaluator's first run stops after step 30 (its train_steps), as a restarted
    # evaluator's predecessor would; the second goes on to the end of training (60).
    first_log, second_log = str(tmp_path / "evaluator_1.log"), str(tmp_path / "evaluator_2.log")
    evaluator = start_evaluator(hosts, model_dir, 30, first_log, tmp_path / "eval_tmp")
    trainer_flags = cluster_flags(model_dir, 60, **{"trainer.max_to_keep": 100})
    workers, logs = start_cluster(tmp_path, "trained", trainer_flags, hosts=hosts[:2])
    try:
        assert evaluator.wait(timeout=WAIT_S) == 0, read_text(first_log)[-3000:]
        evaluator = start_evaluator(hosts, model_dir, 60, second_log, tmp_path / "eval_tmp")
        assert evaluator.wait(timeout=WAIT_S) == 0, read_text(second_log)[-3000:]
        assert wait_all(workers, logs) == [0, 0], [read_text(log)[-2000:] for log in logs]
    finally:
        for process in workers + [evaluator]:
            stop_if_running(process)
    all_steps = list(range(10, 70, 10))
    assert checkpoint_numbers(str(model_dir)) == all_steps
    first, second = evaluated_steps(first_log), evaluated_steps(second_log)
    # Every checkpoint evaluated once, in order; the restarted one skipped the recorded ones.
    assert first == [10, 20, 30], first
    assert second == [40, 50, 60], second
    assert "3 checkpoint steps already evaluated" in read_text(second_log)
    # Each evaluation is of the whole checkpoint of its step: the summary the evaluator wrote
    # into model_dir/validation equals numpy's loss with that checkpoint's weights.
    losses = summary_values(str(model_dir / "validation"), "validation_loss")
    assert sorted(losses) == all_steps
    for step in all_steps:
        assert losses[step] == pytest.approx(
            numpy_validation_loss(str(model_dir / f"ckpt-{step}")), rel=1e-5), step
    assert len(set(round(v, 6) for v in losses.values())) == len(all_steps)  # weights moved
    # The evaluator writes only its own files: one event file per run and its record.
    validation = sorted(os.listdir(model_dir / "validation"))
    assert validation[0] == "evaluated_checkpoints.json" and len(validation) == 3, validation
    assert [p.endswith(f".{evaluator.pid}.0.v2") for p in validation[1:]] == [False, True]
    assert not os.path.exists(model_dir / "operative_config.continuous_eval.gin")


# ------------------------------------------------------------------------------------------
# ParameterServer: a chief (the coordinator), 2 workers and 1 ps. The experiment is
# `mlp_tiny_printed` (ps_step_printing.py): each train step prints a line on the worker that
# runs it, so the worker logs count who trained what.

_PS_TASKS = [("worker", 0), ("worker", 1), ("ps", 0), ("chief", 0)]


def ps_cluster():
    ports = free_ports(4)
    return {"chief": [f"127.0.0.1:{ports[0]}"],
            "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"],
            "ps": [f"127.0.0.1:{ports[3]}"]}


def ps_flags(model_dir, train_steps, mode="train"):
    return ["--experiment", "mlp_tiny_printed", "--registry_imports", "ps_step_printing",
            "--mode", mode, "--model_dir", str(model_dir), "--params_override",
            override_json({"runtime.distribution_strategy": "parameter_server",
                           "trainer.train_steps": train_steps, "trainer.steps_per_loop": 10,
                           "trainer.summary_interval": 10, "trainer.checkpoint_interval": 10,
                           "trainer.max_to_keep": 100, "trainer.validation_steps": 2})]


def start_ps_task(cluster, task, flags, log_path):
    env = subprocess_env()
    env["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__)) + os.pathsep + \
        env["PYTHONPATH"]  # ps_step_printing
    env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                   "task": {"type": task[0], "index": task[1]}})
    env["CUDA_VISIBLE_DEVICES"] = ""
    with open(log_path, "w") as log:
        return subprocess.Popen(lite_train_command(*flags),
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)


def start_ps_cluster(tmp_path, name, flags):
    """Starts the 4 tasks of a fresh cluster; returns ({task: process}, {task: log path})."""
    cluster = ps_cluster()
    logs = {task: str(tmp_path / f"{name}_{task[0]}{task[1]}.log") for task in _PS_TASKS}
    return {task: start_ps_task(cluster, task, flags, logs[task]) for task in _PS_TASKS}, logs


@contextlib.contextmanager
def stopped_at_exit(processes):
    """Stops every task of the cluster still running when the block ends (also on failure)."""
    try:
        yield
    finally:
        for process in processes.values():
            stop_if_running(process)


def wait_chief(processes, logs):
    try:
        return processes["chief", 0].wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the chief did not exit within {WAIT_S} s:\n"
                             f"{read_text(logs['chief', 0])[-3000:]}") from None


# ps_step_printing.PRINTED_STEP; not imported, which would register its experiment here too.
PRINTED_STEP = "lite-test: ran a train step"


def printed_steps(log_path):
    return read_text(log_path).count(PRINTED_STEP)


def optimizer_iterations(prefix):
    return int(tf.train.load_checkpoint(prefix).get_tensor(
        "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"))


def recorded_checkpoint_number(model_dir):
    """The step of the checkpoint the state file names as latest (0 when none): a `ckpt-N`
    index file is on disk before the chief records it, and a kill between the two (seen in a
    release run: ckpt-52 on disk, the state still at 42) leaves the earlier one latest."""
    latest = tf.train.latest_checkpoint(str(model_dir))
    return int(re.search(r"ckpt-(\d+)$", latest).group(1)) if latest else 0


def wait_first_checkpoint(model_dir, chief, log, at_least=10):
    wait_for(lambda: recorded_checkpoint_number(model_dir) >= at_least
             or chief.poll() is not None, timeout=WAIT_S, interval=0.05,
             what=f"a recorded checkpoint at step >= {at_least}")
    assert chief.poll() is None, read_text(log)[-3000:]


@pytest.mark.slow
def test_parameter_server_trains_on_without_a_killed_worker_and_counts_every_step(tmp_path):
    """The release parameter-server tests' path, small: four real `lite-train` processes
    (chief, 2 workers, ps), the Trainer's step under ParameterServerStrategy with its atomic
    step counters, worker 1 killed once after both workers trained side by side for 40 steps.
    Worker 0 trains on alone to train_steps, every loop whole. Each checkpoint written before
    the kill counts exactly its global step in the optimizer's iterations (Keras 3's own
    increment, a read then a write, loses some of the concurrent steps: seen 19 of 20 here
    with `make_step_counts_atomic` left out). The evaluation after training, scheduled through
    the coordinator as the release cluster's chiefs schedule theirs, equals numpy's."""
    model_dir = tmp_path / "model"
    train_steps = 100
    processes, logs = start_ps_cluster(tmp_path, "killed", ps_flags(
        model_dir, train_steps, mode="train_and_post_eval"))
    chief = processes["chief", 0]
    with stopped_at_exit(processes):
        wait_first_checkpoint(model_dir, chief, logs["chief", 0], at_least=40)
        before_kill = checkpoint_numbers(str(model_dir))
        processes["worker", 1].kill()
        processes["worker", 1].wait()
        code = wait_chief(processes, logs)
    chief_log = read_text(logs["chief", 0])
    assert code == 0, chief_log[-3000:]
    assert before_kill[-1] < train_steps  # the kill came while the run went on
    for step in before_kill:
        assert optimizer_iterations(str(model_dir / f"ckpt-{step}")) == step, before_kill
    final = str(model_dir / f"ckpt-{train_steps}")
    assert tf.train.latest_checkpoint(str(model_dir)) == final
    assert checkpoint_global_step(final) == train_steps
    # A step the SIGKILL cut in two may count in one counter and not the other
    # (docs/multi_worker_faults.md).
    assert train_steps - 1 <= optimizer_iterations(final) <= train_steps
    printed = [printed_steps(logs["worker", i]) for i in range(2)]
    assert min(printed) > 0 and sum(printed) >= train_steps - 1, printed
    steps = logged_train_steps(chief_log)
    assert steps[-1] == train_steps
    # Loops are whole until the kill; the loop the kill cut may count the killed worker's
    # re-run steps too (seen: 40, 53, 63, ...), so after it the steps only grow.
    loops = list(zip([0] + steps, steps))
    assert all(b - a == 10 for a, b in loops if b <= before_kill[-1]), steps
    assert all(b > a for a, b in loops), steps
    # The evaluation after training, scheduled on the surviving worker, is of the final
    # weights: numpy's loss with them.
    losses = summary_values(str(model_dir / "validation"), "validation_loss")
    assert list(losses) == [train_steps]
    assert losses[train_steps] == pytest.approx(numpy_validation_loss(final), rel=1e-5)


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_multi_worker_faults.py::"
                             "test_parameter_server_trains_on_without_a_killed_worker_and_"
                             "counts_every_step")
def test_parameter_server_goes_on_without_a_killed_worker_and_stops_with_one_line_without_its_ps(
        tmp_path):
    """Worker 1 is killed after the first checkpoint: the coordinator puts its closure back and
    worker 0 trains on alone, every loop whole. Then the ps is killed: the chief stops with one
    line naming `ps 0` (not an in-process retry, which waited forever), its last checkpoint
    reads whole, and a restart of every task resumes from it; there both workers step
    concurrently and the optimizer counts each step (Keras 3's own increment, a read then a
    write, lost about a quarter of them)."""
    model_dir = tmp_path / "model"
    processes, logs = start_ps_cluster(tmp_path, "first", ps_flags(model_dir, 10 ** 6))
    chief = processes["chief", 0]
    with stopped_at_exit(processes):
        wait_first_checkpoint(model_dir, chief, logs["chief", 0])
        processes["worker", 1].kill()
        processes["worker", 1].wait()
        at_kill = checkpoint_numbers(str(model_dir))[-1]
        # Worker 0 alone trains on: 40 more steps, checkpointed.
        wait_first_checkpoint(model_dir, chief, logs["chief", 0], at_least=at_kill + 40)
        processes["ps", 0].kill()
        processes["ps", 0].wait()
        code = wait_chief(processes, logs)
    chief_log = read_text(logs["chief", 0])
    assert code == 1, chief_log[-3000:]
    errors = [line for line in chief_log.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(errors) == 1 and "Traceback" not in chief_log, chief_log[-3000:]
    assert errors[0].startswith(ERROR_PREFIX + "Lost contact with cluster task ps 0 ("), errors
    assert errors[0].endswith(f"resumes from the last checkpoint in {model_dir}."), errors
    assert "retry" not in chief_log
    # The closure worker 1 lost ran again on worker 0: every loop ran all of its 10 steps
    # (one dropped would end a loop 5 short).
    steps = logged_train_steps(chief_log)
    assert steps[-1] >= at_kill + 40
    assert all(b - a >= 10 for a, b in zip(steps, steps[1:])), steps
    assert "[Worker 1] Putting back a closure after it failed." in chief_log
    # At most one line short: seen once in a release run (2026-12-07: 53 lines for 54 steps),
    # which step went unprinted not established; the suite's sibling above allows the same one
    # step, for a step a SIGKILL cuts in two.
    assert sum(printed_steps(logs["worker", i]) for i in range(2)) >= steps[-1] - 1

    latest = tf.train.latest_checkpoint(str(model_dir))
    step = recorded_checkpoint_number(model_dir)
    assert step >= at_kill + 40
    # The ps can die while the chief writes the next checkpoint (seen once in CI): that
    # write's index may stay on disk unrecorded; the state still names `latest`, the restart
    # below resumes from it and overwrites the files. Nothing else may be there.
    assert [n for n in checkpoint_numbers(str(model_dir)) if n > step] in ([], [step + 10])
    read_checkpoint(latest)  # every tensor reads
    assert checkpoint_global_step(latest) == step
    # Equal but for a step the worker's SIGKILL cut in two (see the next test).
    iterations = optimizer_iterations(latest)
    assert abs(iterations - step) <= 1

    # Every task restarted (a new ps: the old one's variables are gone) resumes at `step`.
    processes, logs = start_ps_cluster(tmp_path, "restarted", ps_flags(model_dir, step + 60))
    with stopped_at_exit(processes):
        code = wait_chief(processes, logs)
    chief_log = read_text(logs["chief", 0])
    assert code == 0, chief_log[-3000:]
    assert restored_checkpoints(chief_log)[-1] == (latest, step)
    final = str(model_dir / f"ckpt-{step + 60}")
    assert tf.train.latest_checkpoint(str(model_dir)) == final
    assert checkpoint_global_step(final) == step + 60
    printed = [printed_steps(logs["worker", i]) for i in range(2)]
    assert sum(printed) == 60 and min(printed) > 0, printed  # both, each step once
    assert optimizer_iterations(final) - iterations == 60


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_multi_worker_faults.py::"
                             "test_parameter_server_trains_on_without_a_killed_worker_and_"
                             "counts_every_step")
def test_parameter_server_workers_killed_and_restarted_rejoin_and_every_step_runs_once(
        tmp_path):
    """Both workers are killed while the chief is stopped (SIGSTOP: it can neither finish the
    run nor notice), then started again on their addresses, then the chief is continued. TF's
    ClusterCoordinator puts the failed closures back and runs them on the restarted workers,
    which rejoin; the run ends at exactly train_steps, each step counted once."""
    model_dir = tmp_path / "model"
    train_steps = 100
    flags = ps_flags(model_dir, train_steps)
    cluster = ps_cluster()
    logs = {task: str(tmp_path / f"{task[0]}{task[1]}.log") for task in _PS_TASKS}
    processes = {task: start_ps_task(cluster, task, flags, logs[task]) for task in _PS_TASKS}
    chief = processes["chief", 0]
    try:
        wait_first_checkpoint(model_dir, chief, logs["chief", 0])
        chief.send_signal(signal.SIGSTOP)
        for i in range(2):
            processes["worker", i].kill()
            processes["worker", i].wait()
        for i in range(2):
            task, log = ("worker", i), str(tmp_path / f"restarted_worker{i}.log")
            logs["restarted", i] = log
            processes["restarted", i] = start_ps_task(cluster, task, flags, log)
        for i in range(2):
            wait_for(lambda: "Serving as a worker/ps task" in read_text(logs["restarted", i]),
                     timeout=WAIT_S, interval=0.05, what=f"restarted worker {i} to serve")
        chief.send_signal(signal.SIGCONT)
        code = wait_chief(processes, logs)
    finally:
        if chief.poll() is None:
            chief.send_signal(signal.SIGCONT)
        for process in processes.values():
            stop_if_running(process)
    chief_log = read_text(logs["chief", 0])
    assert code == 0, chief_log[-3000:]
    final = str(model_dir / f"ckpt-{train_steps}")
    assert checkpoint_numbers(str(model_dir))[-1] == train_steps
    assert checkpoint_global_step(final) == train_steps
    before = [printed_steps(logs["worker", i]) for i in range(2)]
    after = [printed_steps(logs["restarted", i]) for i in range(2)]
    # The restarted workers ran every step the killed ones had not: they rejoined.
    assert sum(after) > 0, (before, after)
    # Each step ran once: the steps the workers ran add up to global_step. Exactly, but for a
    # step the SIGKILL cut in two (at most one per killed worker): TF applies a step's updates
    # on the ps one variable at a time, so such a step may have counted in one counter and not
    # in the other (docs/multi_worker_faults.md).
    assert abs(sum(before) + sum(after) - train_steps) <= 2, (before, after)
    assert abs(optimizer_iterations(final) - train_steps) <= 2
    # Rescheduled, not dropped: each train loop (10 steps, 2 closures) ran all its steps, the
    # loop cut by the kill included (a dropped closure would end it 5 short).
    steps = logged_train_steps(chief_log)
    assert steps[-1] == train_steps
    assert all(b - a >= 10 for a, b in zip([0] + steps, steps[:-1])), steps
    assert "Putting back a closure after it failed" in chief_log
    # TF's reconnection (logged for the workers whose own call failed first; one suffices).
    assert re.search(r"Worker /job:worker/replica:0/task:[01] has been recovered", chief_log)
