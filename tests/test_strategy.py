"""Tests for lite_launcher.common.distribute_utils: strategy names, cluster setup, mixed precision, chief."""

import json
import os
import pathlib
import socket
import subprocess
import sys
import textwrap
import time
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.common import distribute_utils as st
from lite_launcher.core.base_config import ConfigError
from lite_launcher.core.config_definitions import RuntimeConfig

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_in_subprocess(code: str, env_extra=None, timeout=120) -> dict:
    """Runs `code` in a fresh Python (fresh TF device setup); returns the JSON it prints last."""
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    # tests/ for the test helpers (local_devices).
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests"),
                                         env.get("PYTHONPATH", "")])
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def clean_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)


# ----------------------------------------------------------------------------- names


def test_off_returns_the_default_strategy_case_insensitive():
    # As TFM's: the default strategy, so TFM's driver code (`strategy.scope()`,
    # `strategy.distribute_datasets_from_function`) runs with "off" (issue 18, item 7).
    default = tf.distribute.get_strategy()
    assert st.get_distribution_strategy("off") is default
    assert st.get_distribution_strategy("OFF") is default


def test_one_device_on_cpu():
    strategy = st.get_distribution_strategy("One_Device", num_gpus=0)
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    assert strategy.extended.worker_devices[0].endswith("device:CPU:0")
    assert strategy.num_replicas_in_sync == 1


def test_mirrored_without_gpus_uses_cpu0():
    strategy = st.get_distribution_strategy("mirrored")
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert [d.split("/")[-1] for d in strategy.extended.worker_devices] == ["device:CPU:0"]
    assert strategy.num_replicas_in_sync == 1


def test_unknown_name_lists_valid_ones():
    with pytest.raises(ConfigError) as info:
        st.get_distribution_strategy("mirored")
    message = str(info.value)
    assert "'mirored'" in message
    for name in st.VALID_STRATEGIES:
        assert name in message


def test_yaml_false_gets_quote_hint():
    with pytest.raises(ConfigError, match="in quotes"):
        st.get_distribution_strategy(False)


@pytest.mark.parametrize("name", ["off", "one_device", "mirrored"])
def test_more_gpus_than_available_fails(name):
    available = len(tf.config.list_physical_devices("GPU"))
    requested = 1 if name != "mirrored" else available + 1
    if requested <= available:
        pytest.skip("this machine has the GPU")
    with pytest.raises(ConfigError, match=f"num_gpus={requested} but TensorFlow sees "
                                          f"{available} GPU"):
        st.get_distribution_strategy(name, num_gpus=requested)


def test_multi_gpu_with_single_device_strategies_fails():
    with pytest.raises(ConfigError, match="'mirrored'"):
        st.get_distribution_strategy("off", num_gpus=2)
    with pytest.raises(ConfigError, match="'one_device' uses one device but num_gpus=2"):
        st.get_distribution_strategy("one_device", num_gpus=2)


@pytest.mark.parametrize("kwargs, pattern", [
    ({"num_gpus": -1}, r"num_gpus \(-1\)"),
    ({"num_packs": 0}, r"num_packs \(0\)"),
])
def test_bad_numbers_fail(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        st.get_distribution_strategy("mirrored", **kwargs)


def test_unknown_keyword_fails():
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['gpus'\\]"):
        st.get_distribution_strategy("mirrored", gpus=2)


def test_devices_for_wrong_strategy_or_with_num_gpus_fails():
    with pytest.raises(ConfigError, match="devices= is only for"):
        st.get_distribution_strategy("multi_worker_mirrored", devices=["/cpu:0"])
    with pytest.raises(ConfigError, match="either devices= or num_gpus"):
        st.get_distribution_strategy("mirrored", num_gpus=1, devices=["/cpu:0"])
    with pytest.raises(ConfigError, match="'/cpu:7' does not exist"):
        st.get_distribution_strategy("mirrored", devices=["/cpu:0", "/cpu:7"])


def test_one_device_with_devices():
    strategy = st.get_distribution_strategy("one_device", devices=["/cpu:0"])
    assert strategy.extended.worker_devices[0].endswith("device:CPU:0")


# ----------------------------------------------------------------------------- all_reduce_alg


def test_mirrored_bad_all_reduce_alg():
    with pytest.raises(ConfigError, match="'ring' is not valid with 'mirrored'.*nccl, "
                                          "hierarchical_copy"):
        st.get_distribution_strategy("mirrored", all_reduce_alg="ring")


def test_multi_worker_bad_all_reduce_alg():
    with pytest.raises(ConfigError, match="'hierarchical_copy' is not valid with "
                                          "'multi_worker_mirrored'.*ring, nccl"):
        st.get_distribution_strategy("multi_worker_mirrored", all_reduce_alg="hierarchical_copy")


def test_mirrored_cross_device_ops_choice():
    assert st._mirrored_cross_device_ops(None, 1, ["/device:GPU:0"]) is None
    # CPU-only mirroring reduces to one device (collective keys clash across strategies).
    assert isinstance(st._mirrored_cross_device_ops(None, 1, ["/cpu:0", "/cpu:1"]),
                      tf.distribute.ReductionToOneDevice)
    ops = st._mirrored_cross_device_ops("hierarchical_copy", 3)
    assert isinstance(ops, tf.distribute.HierarchicalCopyAllReduce)
    assert isinstance(st._mirrored_cross_device_ops("nccl", 1), tf.distribute.NcclAllReduce)
    strategy = st.get_distribution_strategy("mirrored", all_reduce_alg="hierarchical_copy",
                                            num_packs=2)
    assert isinstance(strategy, tf.distribute.MirroredStrategy)


def test_collective_implementation_choice():
    impl = tf.distribute.experimental.CommunicationImplementation
    assert st._collective_implementation(None) == impl.AUTO
    assert st._collective_implementation("ring") == impl.RING
    assert st._collective_implementation("nccl") == impl.NCCL


# ----------------------------------------------------------------------------- subprocesses


@pytest.fixture(scope="module")
def local_strategies_in_a_fresh_process():
    """What a fresh process reports for a MirroredStrategy over 2 logical CPUs, then for
    runtime.tpu='local' without a TPU (last: initialize_tpu_system clears TensorFlow's caches
    even when it fails). One process for both: a TensorFlow start-up is ~6 CPU-seconds."""
    return run_in_subprocess("""
        import json, time
        import tensorflow as tf
        from lite_launcher import strategy as st
        from lite_launcher.core.base_config import ConfigError
        import local_devices
        devices = local_devices.set_logical_cpu_count(2)
        strategy = st.get_distribution_strategy("mirrored", devices=devices)
        def replica_value():
            ctx = tf.distribute.get_replica_context()
            return tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32) * 10.0
        per_replica = strategy.run(replica_value)
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        same_count_ok = local_devices.set_logical_cpu_count(2) == devices
        try:
            local_devices.set_logical_cpu_count(3)
            late_error = ""
        except ConfigError as e:
            late_error = str(e)
        mirrored = {
            "type": type(strategy).__name__, "devices": devices,
            "replicas": strategy.num_replicas_in_sync, "total": float(total),
            "same_count_ok": same_count_ok, "late_error": late_error,
            "chief": st.is_chief(strategy), "write": st.should_write(strategy)}
        has_tpu = bool(tf.config.list_physical_devices("TPU"))
        start = time.monotonic()
        try:
            st.get_distribution_strategy("tpu", tpu_address="local")
            error = ""
        except ConfigError as e:
            error = str(e)
        local_tpu = {"has_tpu": has_tpu, "error": error, "seconds": time.monotonic() - start}
        print(json.dumps({"mirrored": mirrored, "local_tpu": local_tpu}))
    """)


def test_mirrored_over_two_logical_cpus(local_strategies_in_a_fresh_process):
    result = local_strategies_in_a_fresh_process["mirrored"]
    assert result["type"] == "MirroredStrategy"
    assert result["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert result["replicas"] == 2
    np.testing.assert_allclose(result["total"], 30.0)  # 10 + 20
    assert result["same_count_ok"] is True
    assert "already initialised 2" in result["late_error"]
    assert result["chief"] is True and result["write"] is True


def test_multi_worker_mirrored_with_one_worker_tf_config():
    port = closed_port()
    tf_config = {"cluster": {"worker": [f"localhost:{port}"]},
                 "task": {"type": "worker", "index": 0}}
    result = run_in_subprocess("""
        import json
        import tensorflow as tf
        from lite_launcher import strategy as st
        strategy = st.get_distribution_strategy("Multi_Worker_Mirrored", all_reduce_alg="ring")
        per_replica = strategy.run(lambda: tf.constant(4.0))
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        resolver = strategy.cluster_resolver
        print(json.dumps({
            "type": type(strategy).__name__, "replicas": strategy.num_replicas_in_sync,
            "impl": str(strategy.extended._communication_options.implementation),
            "task": [resolver.task_type, resolver.task_id], "total": float(total),
            "chief": st.is_chief(strategy), "write": st.should_write(strategy)}))
    """, env_extra={"TF_CONFIG": json.dumps(tf_config)})
    assert result["type"] == "CollectiveAllReduceStrategy"  # MultiWorkerMirroredStrategy
    assert result["replicas"] == 1
    assert result["impl"].endswith("RING")
    assert result["task"] == ["worker", 0]
    np.testing.assert_allclose(result["total"], 4.0)
    assert result["chief"] is True and result["write"] is True


def test_parameter_server_with_in_process_cluster_trains_steps():
    result = run_in_subprocess("""
        import json
        import tensorflow as tf
        from lite_launcher import strategy as st
        import local_devices
        resolver = local_devices.start_local_cluster(num_workers=2, num_ps=1)
        strategy = st.get_distribution_strategy("parameter_server", cluster_resolver=resolver)
        with strategy.scope():
            counter = tf.Variable(0, dtype=tf.int64)
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        @tf.function
        def step():
            counter.assign_add(1)
            return counter.read_value()
        for _ in range(20):
            coordinator.schedule(step)
        coordinator.join()  # hangs with too few inter-op threads on small machines
        print(json.dumps({
            "type": type(strategy).__name__, "device": counter.device,
            "count": int(counter.numpy()), "jobs": sorted(resolver.cluster_spec().jobs),
            "chief": st.is_chief(strategy)}))
    """, timeout=120)
    assert result["type"] == "ParameterServerStrategyV2"
    assert "/job:ps" in result["device"]
    assert result["count"] == 20
    assert result["jobs"] == ["ps", "worker"]
    assert result["chief"] is True


# ----------------------------------------------------------------------------- parameter_server


def test_parameter_server_needs_tf_config():
    with pytest.raises(ConfigError, match="needs TF_CONFIG with a cluster"):
        st.get_distribution_strategy("parameter_server")


def test_parameter_server_on_worker_task_points_to_server(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["h0:1"], "worker": ["h1:1"], "ps": ["h2:1"]},
        "task": {"type": "worker", "index": 0}}))
    with pytest.raises(ConfigError, match="task.type 'worker'.*start_server_from_tf_config"):
        st.get_distribution_strategy("parameter_server")


def test_parameter_server_without_ps_job_fails(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["h0:1"], "worker": ["h1:1"]}, "task": {"type": "chief",
                                                                    "index": 0}}))
    with pytest.raises(ConfigError, match="has no ps task"):
        st.get_distribution_strategy("parameter_server")


def test_start_server_from_tf_config_is_none_for_chief_or_unset(monkeypatch):
    assert st.start_server_from_tf_config() is None
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["h0:1"], "worker": ["h1:1"], "ps": ["h2:1"]},
        "task": {"type": "chief", "index": 0}}))
    assert st.start_server_from_tf_config() is None


def test_bad_tf_config_json(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ConfigError, match="TF_CONFIG is not valid JSON"):
        st.configure_cluster("h1:1")


# ----------------------------------------------------------------------------- tpu


def test_tpu_without_address_fails_fast(monkeypatch):
    for name in ("TPU_NAME", "TPU_CONFIG", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="needs runtime.tpu"):
        st.get_distribution_strategy("tpu")


@pytest.mark.parametrize("address_kind", ["grpc", "name"])
def test_remote_tpu_unreachable_fails_fast(monkeypatch, address_kind):
    port = closed_port()
    # Point name resolution at a closed local port instead of the real metadata server.
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{port}")
    address = {"grpc": f"grpc://127.0.0.1:{port}", "name": "my-tpu"}[address_kind]
    start = time.monotonic()
    with pytest.raises(ConfigError, match="TPU") as info:
        st.get_distribution_strategy("tpu", tpu_address=address)
    assert time.monotonic() - start < 5.0
    assert len(str(info.value).splitlines()) == 1


def test_local_tpu_missing_fails_fast(local_strategies_in_a_fresh_process):
    result = local_strategies_in_a_fresh_process["local_tpu"]
    if result["has_tpu"]:
        pytest.skip("this machine has a TPU")
    assert result["error"].startswith("No TPU reachable for runtime.tpu='local'")
    assert len(result["error"].splitlines()) == 1
    assert result["seconds"] < 5.0


# ----------------------------------------------------------------------------- configure_cluster


def test_configure_cluster_writes_tf_config():
    assert st.configure_cluster("h1:2222, h2:2222,h3:2222", task_index=1) == 3
    assert json.loads(os.environ["TF_CONFIG"]) == {
        "cluster": {"worker": ["h1:2222", "h2:2222", "h3:2222"]},
        "task": {"type": "worker", "index": 1}}


def test_configure_cluster_single_worker_ignores_index():
    assert st.configure_cluster("h1:2222") == 1
    assert json.loads(os.environ["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}


def test_configure_cluster_without_hosts_leaves_env_unset():
    assert st.configure_cluster(None) == 1
    assert "TF_CONFIG" not in os.environ


def test_configure_cluster_keeps_existing_tf_config(monkeypatch):
    existing = json.dumps({"cluster": {"chief": ["c:1"], "worker": ["w1:1", "w2:1"],
                                       "ps": ["p:1"]}, "task": {"type": "chief", "index": 0}})
    monkeypatch.setenv("TF_CONFIG", existing)
    assert st.configure_cluster("other:1,other:2", task_index=0) == 3
    assert os.environ["TF_CONFIG"] == existing


@pytest.mark.parametrize("index, pattern", [
    (-1, "task_index must be set \\(0..1\\)"),
    (2, "task_index \\(2\\) is out of range"),
])
def test_configure_cluster_bad_index(index, pattern):
    with pytest.raises(ConfigError, match=pattern):
        st.configure_cluster("h1:1,h2:1", task_index=index)
    assert "TF_CONFIG" not in os.environ


def test_strategy_from_runtime_configures_cluster_and_builds():
    runtime = RuntimeConfig(distribution_strategy="one_device", num_gpus=0,
                            worker_hosts="localhost:1234")
    strategy = st.strategy_from_runtime(runtime)
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    assert json.loads(os.environ["TF_CONFIG"])["cluster"] == {"worker": ["localhost:1234"]}
    assert st.strategy_from_runtime(RuntimeConfig(distribution_strategy="off")) is \
        tf.distribute.get_strategy()


def test_strategy_from_runtime_passes_all_reduce_alg():
    runtime = RuntimeConfig(distribution_strategy="mirrored", all_reduce_alg="ring")
    with pytest.raises(ConfigError, match="'ring' is not valid with 'mirrored'"):
        st.strategy_from_runtime(runtime)


# ----------------------------------------------------------------------------- mixed precision


@pytest.fixture
def restore_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("dtype, policy, compute", [
    ("float16", "mixed_float16", "float16"),
    ("bfloat16", "mixed_bfloat16", "bfloat16"),
    (tf.bfloat16, "mixed_bfloat16", "bfloat16"),
    ("float32", "float32", "float32"),
    (None, "float32", "float32"),
])
def test_mixed_precision_policy(restore_policy, dtype, policy, compute):
    keras.mixed_precision.set_global_policy("mixed_float16" if dtype is None else "float32")
    assert st.set_mixed_precision_policy(dtype) == policy
    assert keras.mixed_precision.global_policy().name == policy
    layer = keras.layers.Dense(2)
    out = layer(np.ones((1, 3), np.float32))
    assert layer.compute_dtype == compute
    assert layer.kernel.dtype == "float32"  # variables stay float32 under mixed policies
    assert out.dtype == compute


@pytest.mark.parametrize("dtype", ["float64", "fp16", 16])
def test_mixed_precision_invalid(restore_policy, dtype):
    with pytest.raises(ConfigError, match="is not one of float16, bfloat16, float32"):
        st.set_mixed_precision_policy(dtype)
    assert keras.mixed_precision.global_policy().name == "float32"


# ----------------------------------------------------------------------------- chief helpers


def fake_multi_worker(task_type, task_id, cluster, should_checkpoint):
    """A duck-typed multi-worker strategy (a real non-chief needs a second process)."""
    resolver = types.SimpleNamespace(
        task_type=task_type, task_id=task_id,
        cluster_spec=lambda: tf.train.ClusterSpec(cluster))
    return types.SimpleNamespace(
        cluster_resolver=resolver,
        extended=types.SimpleNamespace(should_checkpoint=should_checkpoint))


TWO_WORKERS = {"worker": ["h1:1", "h2:1"]}
WITH_CHIEF = {"chief": ["h0:1"], "worker": ["h1:1", "h2:1"]}


@pytest.mark.parametrize("task_type, task_id, cluster, chief", [
    ("worker", 0, TWO_WORKERS, True),
    ("worker", 1, TWO_WORKERS, False),
    ("chief", 0, WITH_CHIEF, True),
    ("worker", 0, WITH_CHIEF, False),
    ("evaluator", 0, WITH_CHIEF, False),
])
def test_is_chief(task_type, task_id, cluster, chief):
    strategy = fake_multi_worker(task_type, task_id, cluster, should_checkpoint=chief)
    assert st.is_chief(strategy) is chief
    assert st.should_write(strategy) is chief


def test_single_process_strategies_are_chief():
    assert st.is_chief(None) and st.should_write(None)
    strategy = st.get_distribution_strategy("one_device")
    assert st.is_chief(strategy) and st.should_write(strategy)


# ----------------------------------------------------------------------------- thread settings

_PERFORMANCE_ENV = ("TF_GPU_THREAD_MODE", "TF_GPU_THREAD_COUNT",
                    "TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT")


@pytest.fixture
def clean_performance_env(monkeypatch):
    for name in _PERFORMANCE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(st, "_warned_settings", set())


def _experiment(runtime=None, trainer=None):
    from lite_launcher.core.config_definitions import ExperimentConfig
    params = ExperimentConfig()
    params.override({"runtime": runtime or {}, "trainer": trainer or {}})
    return params


def test_gpu_thread_mode_sets_tfm_environment(clean_performance_env):
    env = st.apply_performance_settings(_experiment(
        {"gpu_thread_mode": "gpu_private", "batchnorm_spatial_persistent": True}))
    assert os.environ["TF_GPU_THREAD_MODE"] == "gpu_private"
    assert os.environ["TF_GPU_THREAD_COUNT"] == "2"  # TFM's default for per_gpu_thread_count=0
    assert os.environ["TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT"] == "1"
    assert env == {name: os.environ[name] for name in _PERFORMANCE_ENV}
    st.apply_performance_settings(_experiment(
        {"gpu_thread_mode": "gpu_shared", "per_gpu_thread_count": 3}))
    assert os.environ["TF_GPU_THREAD_MODE"] == "gpu_shared"
    assert os.environ["TF_GPU_THREAD_COUNT"] == "3"


def test_defaults_set_nothing_and_bad_gpu_thread_mode_is_refused(clean_performance_env):
    assert st.apply_performance_settings(_experiment()) == {}
    assert not any(name in os.environ for name in _PERFORMANCE_ENV)
    with pytest.raises(ConfigError, match="gpu_thread_mode 'gpu_privat' is not one of"):
        st.apply_performance_settings(_experiment({"gpu_thread_mode": "gpu_privat"}))


def test_fields_without_effect_warn_once_each(clean_performance_env, caplog):
    params = _experiment({"dataset_num_private_threads": 4, "per_gpu_thread_count": 2},
                         {"allow_tpu_summary": True})
    with caplog.at_level("WARNING"):
        assert st.apply_performance_settings(params) == {}
        st.apply_performance_settings(params)
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    for field in ("dataset_num_private_threads=4", "per_gpu_thread_count=2",
                  "allow_tpu_summary"):
        assert len([m for m in messages if field in m]) == 1, (field, messages)
