"""Distribution: Mirrored (2 logical CPUs), XLA under Mirrored, mixed precision, multi-worker
and parameter-server clusters of local processes.

The in-process tests use the 2 logical CPU devices that conftest.py configures. Multi-process
tests start `lite-train` (or tests/dist_workers/lite_train_capture.py, which runs the same
driver and saves the trained weights) with TF_CONFIG on 127.0.0.1.
"""

import functools
import glob
import json
import logging
import os
import pathlib
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import lite_launcher as ll
from lite_launcher.commands import train as main_lib
from lite_launcher.common import distribute_utils as strategy_lib
from lite_launcher.core.base_task import Task
from lite_launcher.core.base_trainer import ExactMean
from lite_launcher.core.train_lib import ExperimentRunner
from lite_launcher.experiments.digits import load_digits_split
from lite_launcher.orbit.loops import split_steps

import tiny
import xla_checks
import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
CAPTURE_SCRIPT = ROOT / "tests" / "dist_workers" / "lite_train_capture.py"
SUBPROCESS_TIMEOUT = 240
TWO_CPUS = ["/device:CPU:0", "/device:CPU:1"]


@pytest.fixture(autouse=True)
def float32_policy_after_each_test():
    """Mixed precision is global Keras state: every test leaves the float32 policy behind."""
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(autouse=True)
def no_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)


def mirrored_two_cpus():
    return ll.get_distribution_strategy("mirrored", devices=TWO_CPUS)


# ------------------------------------------------------------------------------------------
# digits_mlp through run_experiment, in process.


def digits_params(train_steps, **runtime):
    params = ll.get_exp_config("digits_mlp")
    params.override({
        "trainer": {"train_steps": train_steps, "steps_per_loop": train_steps // 2,
                    "summary_interval": train_steps // 2, "checkpoint_interval": train_steps,
                    "validation_interval": train_steps},
        "runtime": runtime,
    }, is_strict=True)
    return params


def run_digits(model_dir, strategy=None, train_steps=40, mode="train_and_eval", **runtime):
    """Runs digits_mlp through ExperimentRunner; returns (trainer, eval logs of the last eval).

    The mixed precision policy is set before the task builds the model, as main.py does.
    """
    params = digits_params(train_steps, **runtime)
    ll.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        task = ll.get_task(params.task)
    runner = ExperimentRunner(distribution_strategy=strategy, task=task, mode=mode,
                              params=params, model_dir=str(model_dir))
    eval_logs = {}
    original_evaluate = runner.controller.evaluate

    def evaluate(*args, **kwargs):
        eval_logs.update(original_evaluate(*args, **kwargs) or {})
        return eval_logs

    runner.controller.evaluate = evaluate  # keeps the logs of the eval inside train_and_eval
    runner.run()
    return runner.trainer, {k: float(v) for k, v in eval_logs.items()}


def weights(trainer):
    return [w.numpy() for w in trainer.model.weights]


@functools.lru_cache(maxsize=None)
def _cached_digits_run(name, tmp_root):
    """The runs several tests compare against, made once per session."""
    model_dir = os.path.join(tmp_root, name)
    if name == "default":
        return run_digits(model_dir)
    if name == "mirrored":
        return run_digits(model_dir, strategy=mirrored_two_cpus())
    if name == "mirrored_xla":
        return run_digits(model_dir, strategy=mirrored_two_cpus(), enable_xla=True)
    if name == "float32_300":
        return run_digits(model_dir, train_steps=300, mode="train_and_post_eval")
    raise ValueError(name)


@pytest.fixture
def digits_run(tmp_path_factory):
    root = str(tmp_path_factory.getbasetemp())
    return lambda name: _cached_digits_run(name, root)


def test_mirrored_sees_the_same_global_batches_as_one_device():
    # One machine has one input pipeline: consecutive per-replica batches of 32 go to replica
    # 0, 1, 0, 1, ... so each step's two halves are exactly one single-device batch of 64
    # (the seeded shuffle runs once, before batching). Sharding applies only across machines.
    params = digits_params(40)
    task = ll.get_task(params.task)
    single = next(iter(task.build_inputs(params.task.train_data)))
    strategy = mirrored_two_cpus()
    distributed = strategy.distribute_datasets_from_function(
        lambda context: task.build_inputs(params.task.train_data, context))
    images, labels = next(iter(distributed))
    halves = strategy.experimental_local_results(labels)
    assert [h.shape[0] for h in halves] == [32, 32]
    np.testing.assert_array_equal(np.concatenate([h.numpy() for h in halves]), single[1].numpy())
    np.testing.assert_array_equal(
        np.concatenate([h.numpy() for h in strategy.experimental_local_results(images)]),
        single[0].numpy())


def test_mirrored_two_replicas_matches_default_strategy(digits_run):
    default_trainer, default_logs = digits_run("default")
    mirrored_trainer, mirrored_logs = digits_run("mirrored")
    assert mirrored_trainer.strategy.num_replicas_in_sync == 2
    assert int(mirrored_trainer.global_step.numpy()) == 40
    assert int(default_trainer.global_step.numpy()) == 40
    for a, b in zip(weights(default_trainer), weights(mirrored_trainer)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The weights moved: the comparison is not between two initial models.
    initial = ll.get_task(digits_params(40).task).build_model().get_weights()
    assert np.abs(weights(default_trainer)[0] - initial[0]).max() > 1e-2
    assert mirrored_logs["accuracy"] == pytest.approx(default_logs["accuracy"], abs=1.5 / 297)
    # validation_loss is the mean of per-replica batch losses (as in TFM), so it depends on
    # how the 297 examples are cut: 128+128+41 on one device, 64+64 | 64+64 | 41+(empty) on
    # two replicas. The empty replica batch is not counted.
    assert default_logs["validation_loss"] == pytest.approx(
        mean_batch_loss(default_trainer.model, batch_size=128), rel=1e-5)
    assert mirrored_logs["validation_loss"] == pytest.approx(
        mean_batch_loss(mirrored_trainer.model, batch_size=64), rel=1e-5)


def mean_batch_loss(model, batch_size):
    """numpy: the mean over validation batches of `batch_size` of each batch's mean loss."""
    images, labels = load_digits_split("validation")
    logits = model(images).numpy().astype(np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    per_example = -log_probs[np.arange(len(labels)), labels]
    return np.mean([per_example[i:i + batch_size].mean()
                    for i in range(0, len(labels), batch_size)])


def test_mirrored_xla_compiles_forward_backward_and_matches(digits_run):
    plain_trainer, _ = digits_run("mirrored")
    xla_trainer, xla_logs = digits_run("mirrored_xla")
    # Under MirroredStrategy only Task.compute_gradients is compiled; the update runs outside.
    assert xla_trainer._xla_train_step.__name__ == "split_train_step"
    compiled = xla_checks.xla_compiled_calls(xla_trainer)
    assert compiled and all("compute_gradients" in name for name in compiled), compiled
    assert xla_checks.xla_compiled_calls(plain_trainer) == []
    assert int(xla_trainer.global_step.numpy()) == 40
    for a, b in zip(weights(plain_trainer), weights(xla_trainer)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert 0.5 < xla_logs["accuracy"] <= 1.0


class _WholeStepTask(tiny.TinyTask):
    """Overrides train_step entirely (same maths), so it cannot be split for XLA."""

    def train_step(self, inputs, model, optimizer, metrics=None):
        return Task.train_step(self, inputs, model, optimizer, metrics=metrics)


def test_xla_with_overridden_train_step_under_mirrored_runs_uncompiled(caplog):
    strategy = mirrored_two_cpus()
    config = tiny.make_config()
    config.runtime.enable_xla = True
    with caplog.at_level(logging.WARNING):
        with strategy.scope():
            task = _WholeStepTask(config.task)
            trainer = ll.Trainer(config, task, task.build_model(), keras.optimizers.SGD(0.1))
            trainer.train(tf.constant(3))
    reference = tiny.make_trainer(strategy=mirrored_two_cpus())
    with reference.strategy.scope():
        reference.train(tf.constant(3))
    assert "overrides Task.train_step" in caplog.text
    assert trainer._xla_train_step == task.train_step
    for a, b in zip(weights(reference), weights(trainer)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------
# Mixed precision.


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mixed_precision_trains_digits_as_well_as_float32(dtype, digits_run, tmp_path):
    _, float32_logs = digits_run("float32_300")
    trainer, logs = run_digits(tmp_path, train_steps=300, mode="train_and_post_eval",
                               mixed_precision_dtype=dtype)
    dense = trainer.model.get_layer("dense_0")
    assert dense.compute_dtype == dtype
    assert dense.kernel.dtype == "float32"  # variables stay float32
    is_loss_scaled = isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    assert is_loss_scaled == (dtype == "float16")
    assert int(trainer.global_step.numpy()) == 300
    assert float32_logs["accuracy"] > 0.9
    assert abs(logs["accuracy"] - float32_logs["accuracy"]) <= 0.01


def test_policy_is_float32_again_after_a_mixed_precision_test():
    # Runs after the mixed precision tests in file order: the autouse fixture reset it.
    assert keras.mixed_precision.global_policy().name == "float32"


@pytest.mark.parametrize("enable_xla", [False, True])
def test_inf_on_one_replica_skips_the_step_on_all_and_lowers_the_loss_scale(enable_xla):
    ll.set_mixed_precision_policy("float16")
    strategy = mirrored_two_cpus()
    config = tiny.make_config()
    config.runtime.mixed_precision_dtype = "float16"
    config.runtime.enable_xla = enable_xla
    x, y = tiny.make_data(n=16)
    poisoned = x.copy()
    # The second half of the first global batch: replica 1 only. (Keras decides finiteness
    # from one replica's gradients, replica 0's under MirroredStrategy: an Inf elsewhere is
    # what the cross-replica fix is for.)
    poisoned[4:8] = np.inf
    dataset = tf.data.Dataset.from_tensor_slices((poisoned, y)).batch(8)
    distributed = strategy.experimental_distribute_dataset(dataset)
    with strategy.scope():
        task = tiny.TinyTask(config.task)
        optimizer = Task.create_optimizer(config.trainer.optimizer_config, config.runtime)
        trainer = ll.Trainer(config, task, task.build_model(), optimizer,
                             train_dataset=distributed, evaluate=False)
    assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    finite_per_replica = strategy.experimental_local_results(strategy.run(
        lambda batch: tf.reduce_all(tf.math.is_finite(batch[0])),
        args=(next(iter(distributed)),)))
    assert [bool(f) for f in finite_per_replica] == [True, False]

    def replica_copies(variable):
        # `.value` is the MirroredVariable behind a Keras variable: one copy per replica.
        return [v.numpy() for v in strategy.experimental_local_results(variable.value)]

    def weight_copies():
        return [replica_copies(w) for w in trainer.model.weights]

    before = weight_copies()
    assert all(len(copies) == 2 for copies in before)
    scale_before = float(trainer.optimizer.dynamic_scale.numpy())
    with strategy.scope():
        trainer.train(tf.constant(1))
    after_inf = weight_copies()
    for copies_before, copies_after in zip(before, after_inf):
        for b, a in zip(copies_before, copies_after):
            np.testing.assert_array_equal(a, b)  # skipped on both replicas
    assert replica_copies(trainer.optimizer.dynamic_scale) == [scale_before / 2] * 2

    with strategy.scope():
        trainer.train(tf.constant(1))  # the second batch is finite on both replicas
    after_finite = weight_copies()
    kernel_0, kernel_1 = after_finite[0]
    assert np.all(np.isfinite(kernel_0))
    np.testing.assert_array_equal(kernel_0, kernel_1)
    assert np.abs(kernel_0 - before[0][0]).max() > 1e-4
    assert int(trainer.global_step.numpy()) == 2
    compiled = xla_checks.xla_compiled_calls(trainer)
    assert bool(compiled) == enable_xla, compiled


# ------------------------------------------------------------------------------------------
# Small pieces.


def test_exact_mean_under_mirrored_sums_both_replicas():
    strategy = mirrored_two_cpus()
    with strategy.scope():
        mean = ExactMean("loss")

    @tf.function
    def update():
        def replica_fn():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            mean.update_state(tf.cast(replica, tf.float32) * 2.0 + 1.0)  # 1.0 and 3.0
        strategy.run(replica_fn)

    for _ in range(3):
        update()
    assert float(mean.count.numpy()) == 6.0
    assert float(mean.result()) == pytest.approx(2.0)
    with strategy.scope():
        mean.reset_state()
    assert float(mean.count.numpy()) == 0.0 and float(mean.result()) == 0.0


def test_exact_mean_weights_and_dtype():
    mean = ExactMean("loss")
    mean.update_state(np.array([1.0, 2.0, 4.0]), sample_weight=np.array([1.0, 1.0, 2.0]))
    mean.update_state(tf.constant(3.0, tf.float16), sample_weight=0.0)  # an empty batch
    assert float(mean.result()) == pytest.approx(11.0 / 4.0)
    assert float(mean.count.numpy()) == 4.0


@pytest.mark.parametrize("num_steps, parts, chunks", [
    (100, 2, [50, 50]), (101, 2, [51, 50]), (7, 3, [3, 2, 2]), (1, 4, [1]), (0, 2, []),
    (5, 1, [5])])
def test_split_steps(num_steps, parts, chunks):
    assert split_steps(num_steps, parts) == chunks


@pytest.mark.parametrize("strategy_name, task, cluster, chief", [
    ("multi_worker_mirrored", None, None, True),
    ("multi_worker_mirrored", ("worker", 0), {"worker": ["a:1", "b:1"]}, True),
    ("multi_worker_mirrored", ("worker", 1), {"worker": ["a:1", "b:1"]}, False),
    ("multi_worker_mirrored", ("worker", 0), {"chief": ["c:1"], "worker": ["a:1"]}, False),
    ("parameter_server", ("chief", 0), {"chief": ["c:1"], "worker": ["a:1"], "ps": ["p:1"]},
     True),
    ("mirrored", ("worker", 1), {"worker": ["a:1", "b:1"]}, True),
])
def test_is_chief_process_from_tf_config(monkeypatch, strategy_name, task, cluster, chief):
    if task is not None:
        monkeypatch.setenv("TF_CONFIG", json.dumps(
            {"cluster": cluster, "task": {"type": task[0], "index": task[1]}}))
    assert strategy_lib.is_chief_process(strategy_name) is chief


def test_chief_process_from_worker_hosts(monkeypatch):
    strategy_lib.configure_cluster("h0:2222,h1:2222", task_index=1)
    try:
        assert strategy_lib.is_chief_process("multi_worker_mirrored") is False
    finally:
        monkeypatch.delenv("TF_CONFIG", raising=False)


def test_cluster_server_role_is_only_for_parameter_server_worker_and_ps(monkeypatch):
    params = ll.get_exp_config("mlp_tiny")
    # A chief (the coordinator) and other strategies train: the function returns at once.
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3"]},
        "task": {"type": "chief", "index": 0}}))
    params.runtime.distribution_strategy = "parameter_server"
    assert main_lib.maybe_run_cluster_server(params) is None
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": ["localhost:2", "localhost:4"]},
        "task": {"type": "worker", "index": 1}}))
    params.runtime.distribution_strategy = "multi_worker_mirrored"
    assert main_lib.maybe_run_cluster_server(params) is None


# ------------------------------------------------------------------------------------------
# Clusters of local processes.


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def lite_train_command():
    return cli.lite_train_command(installed=True)


def process_env(tf_config, tmpdir=None):
    env = dict(os.environ)
    env["TF_CONFIG"] = json.dumps(tf_config)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)  # where a non-chief's throwaway checkpoints go
    return env


def start(command, env, log_path):
    log = open(log_path, "w")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return process


def finish(processes, logs, timeout=SUBPROCESS_TIMEOUT):
    """Waits for every process; kills all of them if one fails or hangs."""
    try:
        for process, log in zip(processes, logs):
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = "timeout"
            assert code == 0, f"{log} exited {code}:\n{pathlib.Path(log).read_text()[-4000:]}"
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def run_two_workers(model_dir, out_dir, run_name, train_steps):
    """Runs digits_mlp train_and_eval on a 2-worker MultiWorkerMirrored cluster; returns the
    saved results of (worker 0 = chief, worker 1) and their pids."""
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    override = ",".join([
        "runtime.distribution_strategy=multi_worker_mirrored",
        f"trainer.train_steps={train_steps}", "trainer.steps_per_loop=10",
        "trainer.summary_interval=10", "trainer.checkpoint_interval=10",
        "trainer.validation_interval=20", "trainer.max_to_keep=5",
        "trainer.best_checkpoint_export_subdir=best",
        "trainer.best_checkpoint_eval_metric=accuracy",
    ])
    processes, logs, outputs = [], [], []
    for index in range(2):
        tmpdir = out_dir / f"{run_name}_tmp{index}"
        tmpdir.mkdir()
        # task.name differs per worker and does not change training: params.yaml shows who
        # wrote it.
        flags = ["--experiment=digits_mlp", "--mode=train_and_eval", f"--model_dir={model_dir}",
                 f"--params_override={override},task.name=worker{index}"]
        outputs.append(out_dir / f"{run_name}_worker{index}.npz")
        logs.append(out_dir / f"{run_name}_worker{index}.log")
        tf_config = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
        processes.append(start([sys.executable, str(CAPTURE_SCRIPT), str(outputs[-1])] + flags,
                               process_env(tf_config, tmpdir), logs[-1]))
    finish(processes, logs)
    for index in range(2):
        leftovers = os.listdir(out_dir / f"{run_name}_tmp{index}")
        assert leftovers == [], f"worker {index} left temporary files: {leftovers}"
    return [dict(np.load(path)) for path in outputs], [p.pid for p in processes]


def checkpoint_value(prefix, name):
    return tf.train.load_checkpoint(prefix).get_tensor(name)


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_multi_worker_faults.py::"
                             "test_sigkill_of_one_worker_stops_the_survivor_with_one_line")
def test_multi_worker_mirrored_two_processes_chief_writes_and_both_resume(tmp_path):
    model_dir = tmp_path / "model"
    results, pids = run_two_workers(model_dir, tmp_path, "first", train_steps=20)
    chief, other = results
    # The default path, as users run it: each inner loop and its metric reads are one graph.
    assert bool(chief["fused"]) and bool(other["fused"])
    assert int(chief["global_step"]) == int(other["global_step"]) == 20
    # 10 steps a loop, one loss per replica (2 in sync: one on each worker), summed on read.
    np.testing.assert_array_equal(chief["loss_counts"], [20.0, 20.0])
    names = sorted(k for k in chief if k.startswith("weight_"))
    assert len(names) == 4
    for name in names:
        np.testing.assert_array_equal(chief[name], other[name])  # bit-identical

    # Only the chief wrote: checkpoints, params.yaml, the gin config, summaries, best export.
    assert sorted(os.listdir(model_dir)) == sorted([
        "best", "checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index",
        "ckpt-20.data-00000-of-00001", "ckpt-20.index", "operative_config.train_and_eval.gin",
        "params.yaml", "train", "validation"])
    assert "name: worker0" in (model_dir / "params.yaml").read_text()
    for subdir in ("train", "validation"):
        event_files = os.listdir(model_dir / subdir)
        assert len(event_files) == 1, event_files
        assert f".{pids[0]}." in event_files[0]  # written by the chief's process
    # The best checkpoint is named as TFM names it: by the checkpoint's save counter.
    best = tf.train.latest_checkpoint(str(model_dir / "best"))
    number = int(checkpoint_value(best, "save_counter/.ATTRIBUTES/VARIABLE_VALUE"))
    assert best == str(model_dir / "best" / f"best_ckpt-{number}")
    assert sorted(os.listdir(model_dir / "best")) == [
        f"best_ckpt-{number}.data-00000-of-00001", f"best_ckpt-{number}.index", "checkpoint",
        "info.json"]
    assert int(checkpoint_value(best, "global_step/.ATTRIBUTES/VARIABLE_VALUE")) == 20

    # A restart of both resumes from the chief's ckpt-20 and trains on to 40.
    results, _ = run_two_workers(model_dir, tmp_path, "restart", train_steps=40)
    chief, other = results
    assert int(chief["global_step"]) == int(other["global_step"]) == 40
    np.testing.assert_array_equal(chief["loss_counts"], [20.0, 20.0])  # 20 new steps only
    for name in names:
        np.testing.assert_array_equal(chief[name], other[name])
    restart_log = (tmp_path / "restart_worker1.log").read_text()
    # The non-chief restored the chief's checkpoint (its own saves were thrown away).
    assert f"Restored checkpoint {model_dir / 'ckpt-20'} (global step 20)" in restart_log
    # The optimizer state came back too: Adam's step counter is 40, not 20.
    assert int(checkpoint_value(str(model_dir / "ckpt-40"),
                                "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")) == 40
    assert int(checkpoint_value(str(model_dir / "ckpt-40"),
                                "global_step/.ATTRIBUTES/VARIABLE_VALUE")) == 40


def default_strategy_eval(model_dir, step, validation_steps):
    """digits_mlp's evaluation of `model_dir`/ckpt-`step` in this process, default strategy."""
    params = digits_params(200)
    params.trainer.validation_steps = validation_steps
    task = ll.get_task(params.task)
    trainer = ll.Trainer(params, task, task.build_model(),
                         task.create_optimizer(params.trainer.optimizer_config, params.runtime),
                         train=False)
    trainer.checkpoint.restore(str(model_dir / f"ckpt-{step}")).expect_partial()
    assert int(trainer.global_step.numpy()) == step
    return {k: float(v) for k, v in trainer.evaluate(validation_steps).items()}


@pytest.mark.slow
@pytest.mark.release(sibling="tests/reliability/test_multi_worker_faults.py::"
                             "test_parameter_server_trains_on_without_a_killed_worker_and_"
                             "counts_every_step")
def test_parameter_server_cluster_of_lite_train_processes_trains_and_evaluates(tmp_path):
    """One cluster (2 workers, 1 ps) serves four chiefs in turn: train_and_eval, eval (with
    eval_tf_while_loop), continuous_eval and train_and_post_eval. Every evaluation equals the
    default strategy's on the same checkpoint: the 3 validation batches differ (297 digits,
    batch 128), so an evaluation read out of order or split across workers would not."""
    ports = free_ports(4)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"],
               "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"],
               "ps": [f"127.0.0.1:{ports[3]}"]}
    model_dir = tmp_path / "model"
    override = ("runtime.distribution_strategy=parameter_server,runtime.enable_xla=true,"
                "trainer.train_steps=200,trainer.steps_per_loop=100,"
                "trainer.summary_interval=100,trainer.checkpoint_interval=100,"
                "trainer.validation_interval=100,trainer.validation_steps=3,"
                "trainer.best_checkpoint_export_subdir=best,"
                "trainer.best_checkpoint_eval_metric=accuracy")

    def flags(mode, extra="", base=override):
        return ["--experiment=digits_mlp", f"--mode={mode}", f"--model_dir={model_dir}",
                f"--params_override={base}{extra}"]

    chief_env = process_env({"cluster": cluster, "task": {"type": "chief", "index": 0}})
    # The same lite-train command on every task: workers and ps serve, the chiefs train.
    servers, server_logs = [], []
    for job in ("worker", "ps"):
        for index in range(len(cluster[job])):
            server_logs.append(tmp_path / f"{job}{index}.log")
            servers.append(start(lite_train_command() + flags("train"), process_env(
                {"cluster": cluster, "task": {"type": job, "index": index}}),
                server_logs[-1]))
    runs = [("train_and_eval", ""), ("eval", ",trainer.eval_tf_while_loop=true"),
            ("continuous_eval", ""), ("train_and_post_eval", "")]
    results = {}
    try:
        for mode, extra in runs:
            output, log = tmp_path / f"{mode}.npz", tmp_path / f"{mode}.log"
            chief = start([sys.executable, str(CAPTURE_SCRIPT), str(output)]
                          + flags(mode, extra), chief_env, log)
            finish([chief], [log])
            results[mode] = dict(np.load(output))
        # The servers are still serving (a worker/ps lite-train never exits by itself).
        for server, log in zip(servers, server_logs):
            assert server.poll() is None, f"{log}:\n{log.read_text()[-3000:]}"
        # The coordinator schedules tf.functions only: a chief asking for eager train loops,
        # or for the whole validation set (a while loop needs a step count), is refused with
        # one line (exit 2) before it trains.
        whole_validation_set = override.replace("validation_steps=3", "validation_steps=-1")
        refused = [subprocess.run(
            lite_train_command() + flags("train_and_eval", extra, base), cwd=ROOT,
            env=chief_env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
            for extra, base in [
                (",trainer.train_tf_function=false,trainer.train_tf_while_loop=false", override),
                ("", whole_validation_set)]]
    finally:
        for server in servers:
            server.kill()
            server.wait()
    trained = results["train_and_eval"]
    # Each 100-step loop ran as 2 concurrent 50-step closures; no update was lost.
    assert int(trained["global_step"]) == 200
    np.testing.assert_array_equal(trained["loss_counts"], [100.0, 100.0])
    prefix = str(model_dir / "ckpt-200")
    assert int(checkpoint_value(prefix, "global_step/.ATTRIBUTES/VARIABLE_VALUE")) == 200
    assert sorted(glob.glob(str(model_dir / "ckpt-*.index"))) == [
        str(model_dir / "ckpt-100.index"), str(model_dir / "ckpt-200.index")]

    expected = {step: default_strategy_eval(model_dir, step, 3) for step in (100, 200)}
    assert expected[200]["accuracy"] > 0.5  # trained: not a comparison of initial models
    evaluations = [("train_and_eval", [100, 200])] + [
        (mode, [200]) for mode in ("eval", "continuous_eval", "train_and_post_eval")]
    for mode, steps in evaluations:
        result = results[mode]
        np.testing.assert_array_equal(result["eval_global_step"], steps, err_msg=mode)
        for index, step in enumerate(steps):
            assert result["eval_accuracy"][index] == pytest.approx(
                expected[step]["accuracy"], abs=1e-6), (mode, step)
            assert result["eval_validation_loss"][index] == pytest.approx(
                expected[step]["validation_loss"], rel=1e-5), (mode, step)
    assert int(results["train_and_post_eval"]["global_step"]) == 200  # nothing more trained
    # The best checkpoint export runs under parameter servers too.
    best_step = max((100, 200), key=lambda step: expected[step]["accuracy"])
    best = tf.train.latest_checkpoint(str(model_dir / "best"))
    assert int(checkpoint_value(best, "global_step/.ATTRIBUTES/VARIABLE_VALUE")) == best_step
    assert trained["eval_best_accuracy"][-1] == pytest.approx(expected[best_step]["accuracy"])

    assert "Serving as a worker/ps task" in server_logs[0].read_text()
    # XLA cannot read variables on the ps task: enable_xla is ignored there, with a warning.
    assert "runtime.enable_xla has no effect with the parameter_server" in (
        tmp_path / "train_and_eval.log").read_text()
    assert [r.returncode for r in refused] == [2, 2], [r.stderr[-3000:] for r in refused]
    assert [r.stderr.strip().splitlines()[-1] for r in refused] == [
        "lite-train: error: The parameter_server strategy needs trainer.train_tf_function=true "
        "and trainer.eval_tf_function=true.",
        "lite-train: error: The parameter_server strategy evaluates a fixed number of steps: "
        "set trainer.validation_steps > 0 (it is -1, the whole validation set)."]
