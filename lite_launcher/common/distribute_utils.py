"""Distribution strategies, cluster setup, mixed precision and chief-only writing.

The strategy names and their meaning follow TFM's `runtime.distribution_strategy`:

| name                    | strategy                                                       |
|-------------------------|----------------------------------------------------------------|
| `off`                   | the default strategy (`tf.distribute.get_strategy()`), as TFM   |
| `one_device`            | `OneDeviceStrategy` on GPU:0 (`num_gpus=1`) or CPU:0            |
| `mirrored`              | `MirroredStrategy` over `num_gpus` GPUs, or CPU:0 when 0        |
| `multi_worker_mirrored` | `MultiWorkerMirroredStrategy`, cluster from `TF_CONFIG`         |
| `parameter_server`      | `ParameterServerStrategy`, cluster from `TF_CONFIG`             |
| `tpu`                   | `TPUStrategy` on the TPU named by `tpu_address`                 |

Typical driver flow (what `strategy_from_runtime` does, plus mixed precision):

    set_mixed_precision_policy(runtime.mixed_precision_dtype)  # before any model is built
    strategy = strategy_from_runtime(runtime)                  # default for "off"
    with strategy.scope():
        ...

Multi-worker saving: every worker must take part in saving (variables sync on read), but two
workers writing the same directory collide. `should_write(strategy)` is the one place that
says who writes to model_dir (checkpoints, summaries, exports, configs; `is_chief_process`
applies the same rule to TF_CONFIG before a strategy exists); `checkpoints.worker_save_dir`
gives the others a throwaway directory to save into.

`apply_performance_settings(params)` applies TFM's GPU thread and kernel fields of the
runtime config (environment variables read when TensorFlow creates its devices).
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from typing import Any, Dict, List, Optional, Sequence, Union

import tensorflow as tf
from absl import logging

from lite_launcher.common import tf_adapter
from lite_launcher.core.base_config import ConfigError

VALID_STRATEGIES = ("off", "one_device", "mirrored", "multi_worker_mirrored",
                    "parameter_server", "tpu")

# all_reduce_alg values per strategy (None lets TensorFlow pick from the device topology).
MIRRORED_ALL_REDUCE_ALGS = ("nccl", "hierarchical_copy")
MULTI_WORKER_ALL_REDUCE_ALGS = ("ring", "nccl")

# How long to wait for a network answer before deciding a TPU is not reachable.
_TPU_PROBE_TIMEOUT_S = 2.0


# --------------------------------------------------------------------------------------
# Strategy construction
# --------------------------------------------------------------------------------------

def get_distribution_strategy(distribution_strategy: str = "mirrored",
                              num_gpus: int = 0,
                              all_reduce_alg: Optional[str] = None,
                              num_packs: int = 1,
                              tpu_address: Optional[str] = None,
                              **kwargs) -> tf.distribute.Strategy:
    """Returns the `tf.distribute.Strategy` named by `distribution_strategy`.

    Args:
      distribution_strategy: one of `VALID_STRATEGIES`, case-insensitive.
      num_gpus: GPUs to use for `one_device` (0 or 1) and `mirrored`; must not exceed the
        GPUs TensorFlow can see. 0 means CPU:0, as in TFM.
      all_reduce_alg: `mirrored`: None, "nccl" or "hierarchical_copy" (cross-device ops).
        `multi_worker_mirrored`: None, "ring" or "nccl" (collective implementation).
        Ignored, with a warning, by the other strategies.
      num_packs: `num_packs` of the `mirrored` cross-device ops (only with all_reduce_alg).
      tpu_address: `tpu` only: a Cloud TPU name, "grpc://host:port", or "local" for TPUs
        attached to this VM. None or "" resolves the name from the TPU_NAME environment.
      **kwargs: keyword-only extras, beyond TFM:
        devices: `mirrored` / `one_device` only: explicit device names, e.g.
          `["/device:CPU:0", "/device:CPU:1"]` to mirror over logical CPU devices (made
          with `tf.config.set_logical_device_configuration`). Excludes `num_gpus`.
        cluster_resolver: `multi_worker_mirrored` / `parameter_server` only: a
          `ClusterResolver` to use instead of reading `TF_CONFIG` (e.g. a
          `SimpleClusterResolver` over in-process servers).
        failure_timeout_s: `multi_worker_mirrored` only: seconds to wait for a worker that
          never starts or stops sending heartbeats (`runtime.cluster_failure_timeout_s`);
          then the collectives fail with an error naming the task. None: TensorFlow's
          defaults (an hour to register).

    Returns:
      The strategy; for "off" the default strategy (`tf.distribute.get_strategy()`), as
      TFM's, so `strategy.scope()` and `strategy.distribute_datasets_from_function` work.

    Raises:
      ConfigError: unknown name or all_reduce_alg, bad num_gpus / num_packs / devices, a
        cluster missing from TF_CONFIG, or a TPU that cannot be reached.
      TypeError: an unknown keyword argument.
    """
    devices = kwargs.pop("devices", None)
    cluster_resolver = kwargs.pop("cluster_resolver", None)
    failure_timeout_s = kwargs.pop("failure_timeout_s", None)
    if "dist_strategy" in kwargs:
        # TFM's guide writes this keyword; TFM drops it silently and builds "mirrored".
        raise TypeError(
            f"get_distribution_strategy() got dist_strategy={kwargs['dist_strategy']!r}; the "
            f"argument is distribution_strategy= (TFM ignores dist_strategy and builds its "
            f"default, 'mirrored').")
    if kwargs:
        raise TypeError(
            f"get_distribution_strategy() got unexpected keyword arguments {sorted(kwargs)}; "
            f"the extras it accepts are 'devices', 'cluster_resolver' and "
            f"'failure_timeout_s'.")

    name = _normalise_name(distribution_strategy)
    if not isinstance(num_gpus, int) or isinstance(num_gpus, bool) or num_gpus < 0:
        raise ConfigError(f"num_gpus ({num_gpus!r}) must be a non-negative integer.")
    if not isinstance(num_packs, int) or isinstance(num_packs, bool) or num_packs < 1:
        raise ConfigError(f"num_packs ({num_packs!r}) must be a positive integer.")
    if all_reduce_alg is not None and not isinstance(all_reduce_alg, str):
        raise ConfigError(f"all_reduce_alg ({all_reduce_alg!r}) must be a string or None.")
    if devices is not None and name not in ("mirrored", "one_device"):
        raise ConfigError(
            f"devices= is only for 'mirrored' and 'one_device', not {name!r}.")
    if cluster_resolver is not None and name not in ("multi_worker_mirrored",
                                                     "parameter_server"):
        raise ConfigError(
            f"cluster_resolver= is only for 'multi_worker_mirrored' and 'parameter_server', "
            f"not {name!r}.")
    if all_reduce_alg is not None and name not in ("mirrored", "multi_worker_mirrored"):
        logging.warning("all_reduce_alg=%r has no effect with distribution_strategy=%r.",
                        all_reduce_alg, name)

    if name == "off":
        if num_gpus > 1:
            raise ConfigError(
                f"num_gpus={num_gpus} needs a multi-device strategy such as 'mirrored'; "
                f"distribution_strategy 'off' runs on one device.")
        _check_gpu_count(num_gpus)
        return tf.distribute.get_strategy()

    if name == "one_device":
        if devices is not None:
            device = _check_devices(devices, num_gpus)
            if len(device) != 1:
                raise ConfigError(
                    f"'one_device' takes exactly one device, got devices={list(devices)}.")
            return tf.distribute.OneDeviceStrategy(device[0])
        if num_gpus > 1:
            raise ConfigError(
                f"'one_device' uses one device but num_gpus={num_gpus}; use 'mirrored' for "
                f"several GPUs.")
        _check_gpu_count(num_gpus)
        return tf.distribute.OneDeviceStrategy(
            "/device:GPU:0" if num_gpus == 1 else "/device:CPU:0")

    if name == "mirrored":
        if devices is not None:
            device_list = _check_devices(devices, num_gpus)
        else:
            _check_gpu_count(num_gpus)
            device_list = ([f"/device:GPU:{i}" for i in range(num_gpus)]
                           if num_gpus else ["/device:CPU:0"])
        return tf.distribute.MirroredStrategy(
            devices=device_list,
            cross_device_ops=_mirrored_cross_device_ops(all_reduce_alg, num_packs,
                                                        device_list))

    if name == "multi_worker_mirrored":
        if failure_timeout_s is not None:
            _configure_failure_detection(cluster_resolver, failure_timeout_s)
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=_collective_implementation(all_reduce_alg))
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=cluster_resolver, communication_options=options)

    if name == "parameter_server":
        if cluster_resolver is None:
            cluster_resolver = _parameter_server_resolver_from_tf_config()
        _check_parameter_server_cluster(cluster_resolver.cluster_spec().as_dict())
        return tf.distribute.experimental.ParameterServerStrategy(cluster_resolver)

    return _tpu_strategy(tpu_address)


def _configure_failure_detection(cluster_resolver, timeout_s: float) -> None:
    """Bounds how long a MultiWorkerMirrored worker waits for a lost or absent peer.

    MultiWorkerMirroredStrategy starts TF's coordination service with its defaults unless one
    is configured already: an hour for every worker to register, so a worker whose peer never
    starts waits an hour. Configuring it here first sets the registration and heartbeat
    timeouts; a peer that misses them fails the collectives with an UnavailableError naming
    it. TensorFlow has no public API for this (`tf_adapter.configure_coordination_service`).
    First waits for the peers to be reachable (`_wait_for_peers`).
    """
    resolver = cluster_resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver()
    jobs = resolver.cluster_spec().as_dict()
    coordinated = [job for job in ("chief", "worker") if job in jobs]
    if resolver.task_type not in coordinated or sum(len(jobs[j]) for j in coordinated) < 2:
        return  # one worker: no peers to wait for, and TF starts no coordination service
    _wait_for_peers(jobs, resolver.task_type, int(resolver.task_id or 0), coordinated,
                    timeout_s)
    # Nothing changes when an earlier strategy of this process configured it.
    tf_adapter.configure_coordination_service(
        f"/job:{coordinated[0]}/replica:0/task:0",
        {job: len(jobs[job]) for job in coordinated}, int(timeout_s * 1000))


def _wait_for_peers(jobs, task_type: str, task_id: int, coordinated, timeout_s: float) -> None:
    """Waits, at most `timeout_s`, until every other coordinated task accepts connections.

    TensorFlow's cluster setup (inside the MultiWorkerMirroredStrategy constructor) retries an
    unreachable peer without a bound, in C++ that nothing can interrupt, so a worker given a
    wrong address or whose peer never starts would wait forever. Before it, each worker
    listens on its own address (so its peers see it) and waits for theirs; the listener is
    closed before TensorFlow's server takes the port. Raises `ClusterTaskLostError` naming
    the first task that never answered.
    """
    from lite_launcher.common.errors import ClusterTaskLostError  # pylint: disable=g-import-not-at-top

    pending = [(job, index, address) for job in coordinated
               for index, address in enumerate(jobs[job]) if (job, index) != (task_type, task_id)]
    listener = None
    own_host, _, own_port = jobs[task_type][task_id].rpartition(":")
    try:
        listener = socket.socket(socket.AF_INET6 if ":" in own_host else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((own_host.strip("[]"), int(own_port)))
        listener.listen(16)
    except (OSError, ValueError):
        # Not bindable here (a name for another interface, or in use): TF's server reports it.
        if listener is not None:
            listener.close()
        listener = None
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            job, index, address = pending[0]
            host, _, port = address.rpartition(":")
            try:
                with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
                    pending.pop(0)
                    continue
            except (OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                raise ClusterTaskLostError(
                    f"Cluster task {job} {index} at {address} did not start within "
                    f"runtime.cluster_failure_timeout_s={timeout_s:g} s (nothing accepts "
                    f"connections there): check its address in TF_CONFIG and that it runs.")
            time.sleep(0.2)
    finally:
        if listener is not None:
            listener.close()


def _normalise_name(distribution_strategy) -> str:
    if not isinstance(distribution_strategy, str):
        hint = ""
        if distribution_strategy is False:
            # YAML 1.1 loaders (PyYAML's safe_load) read a bare `off` as false. lite's config
            # files do not (base_config's loader), but a value loaded elsewhere may.
            hint = " In YAML write 'off' in quotes; a bare off is read as false."
        raise ConfigError(
            f"distribution_strategy must be a string, got {distribution_strategy!r}.{hint}")
    name = distribution_strategy.lower()
    if name not in VALID_STRATEGIES:
        raise ConfigError(
            f"Unknown distribution_strategy {distribution_strategy!r}; valid values are "
            f"{', '.join(VALID_STRATEGIES)}.")
    return name


def _check_gpu_count(num_gpus: int) -> None:
    if num_gpus == 0:
        return
    available = len(tf.config.list_physical_devices("GPU"))
    if num_gpus > available:
        raise ConfigError(
            f"num_gpus={num_gpus} but TensorFlow sees {available} GPU(s); lower "
            f"runtime.num_gpus (0 runs on CPU).")


def _check_devices(devices: Sequence[str], num_gpus: int) -> List[str]:
    if num_gpus:
        raise ConfigError(
            f"Pass either devices= or num_gpus, not both (num_gpus={num_gpus}).")
    if isinstance(devices, str) or not devices:
        raise ConfigError(
            f"devices must be a non-empty list of device names, got {devices!r}.")
    known = {d.name for d in tf.config.list_logical_devices()}
    resolved = []
    for device in devices:
        spec = tf.DeviceSpec.from_string(device)
        full = f"/device:{spec.device_type}:{spec.device_index or 0}" if spec.device_type else ""
        if full not in known:
            raise ConfigError(
                f"Device {device!r} does not exist; available devices: {sorted(known)}.")
        resolved.append(full)
    return resolved


def _mirrored_cross_device_ops(all_reduce_alg: Optional[str], num_packs: int, devices=()):
    if all_reduce_alg is None:
        if all("CPU" in d.upper() for d in devices):
            # TF picks collective ops for CPU devices, whose keys are per strategy object: two
            # MirroredStrategy objects in one process then clash ("Shape mismatch in the
            # collective instance"). Reducing to one device has no such state.
            return tf.distribute.ReductionToOneDevice()
        return None  # MirroredStrategy picks from the device topology.
    if all_reduce_alg == "nccl":
        return tf.distribute.NcclAllReduce(num_packs=num_packs)
    if all_reduce_alg == "hierarchical_copy":
        return tf.distribute.HierarchicalCopyAllReduce(num_packs=num_packs)
    raise ConfigError(
        f"all_reduce_alg {all_reduce_alg!r} is not valid with 'mirrored'; use one of "
        f"{', '.join(MIRRORED_ALL_REDUCE_ALGS)} or None.")


def _collective_implementation(all_reduce_alg: Optional[str]):
    implementations = tf.distribute.experimental.CommunicationImplementation
    if all_reduce_alg is None:
        return implementations.AUTO
    if all_reduce_alg == "ring":
        return implementations.RING
    if all_reduce_alg == "nccl":
        return implementations.NCCL
    raise ConfigError(
        f"all_reduce_alg {all_reduce_alg!r} is not valid with 'multi_worker_mirrored'; use "
        f"one of {', '.join(MULTI_WORKER_ALL_REDUCE_ALGS)} or None.")


def _read_tf_config() -> Dict[str, Any]:
    raw = os.environ.get("TF_CONFIG", "")
    if not raw.strip():
        return {}
    try:
        tf_config = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({e}): {raw!r}.") from None
    if not isinstance(tf_config, dict):
        raise ConfigError(f"TF_CONFIG must be a JSON object, got {raw!r}.")
    return tf_config


def _parameter_server_resolver_from_tf_config():
    tf_config = _read_tf_config()
    if not tf_config.get("cluster"):
        raise ConfigError(
            "distribution_strategy 'parameter_server' needs TF_CONFIG with a cluster of "
            "'chief', 'worker' and 'ps' tasks and task.type 'chief' for this process.")
    task_type = tf_config.get("task", {}).get("type")
    if task_type != "chief":
        raise ConfigError(
            f"This process has TF_CONFIG task.type {task_type!r}; only the 'chief' (the "
            f"coordinator) builds a ParameterServerStrategy. Worker and ps tasks run a "
            f"server instead: see start_server_from_tf_config().")
    return tf.distribute.cluster_resolver.TFConfigClusterResolver()


def _check_parameter_server_cluster(cluster: Dict[str, Any]) -> None:
    missing = [job for job in ("worker", "ps") if not cluster.get(job)]
    if missing:
        raise ConfigError(
            f"The parameter-server cluster has no {' or '.join(missing)} task(s); its jobs "
            f"are {sorted(cluster)}. Add them to TF_CONFIG's cluster.")


# --------------------------------------------------------------------------------------
# TPU
# --------------------------------------------------------------------------------------

def _tpu_strategy(tpu_address: Optional[str]):
    """Connects to the TPU and builds a TPUStrategy; ConfigError when no TPU is reachable.

    TPUClusterResolver blocks on network calls without a timeout (GCE metadata, the Cloud
    TPU API, the gRPC worker), so the address is probed with a short timeout first.
    """
    # The resolver falls back to these environment variables when tpu is None or "".
    target = (tpu_address or os.environ.get("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS")
              or os.environ.get("TPU_NAME") or None)
    if target is None and not os.environ.get("TPU_CONFIG"):
        raise ConfigError(
            "distribution_strategy 'tpu' needs runtime.tpu: a Cloud TPU name, "
            "'grpc://host:port', or 'local' for TPUs attached to this machine (or set "
            "TPU_NAME).")
    if target is not None and target.startswith("grpc://"):
        _probe_grpc_address(target.split(",")[0])
    elif target is not None and target != "local":
        _probe_gce_metadata(target)

    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address)
        if tpu_address not in ("", "local"):
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, OSError, tf.errors.OpError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if len(reason) > 200:  # op errors append the full kernel signature
            reason = reason.split(". ")[0] + "."
        raise ConfigError(f"No TPU reachable for runtime.tpu={tpu_address!r}: {reason}") from e
    return tf.distribute.TPUStrategy(resolver)


def _probe_grpc_address(address: str) -> None:
    host, _, port = address[len("grpc://"):].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=_TPU_PROBE_TIMEOUT_S):
            pass
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"No TPU reachable at runtime.tpu={address!r}: cannot connect ({e}).") from None


def _probe_gce_metadata(tpu_name: Optional[str]) -> None:
    # Resolving a TPU name needs the GCE metadata server (project and zone of this VM).
    host = (os.environ.get("GCE_METADATA_HOST") or os.environ.get("GCE_METADATA_IP")
            or "metadata.google.internal")
    request = urllib.request.Request(f"http://{host}/computeMetadata/v1/project/project-id",
                                     headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=_TPU_PROBE_TIMEOUT_S):
            pass
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"Cannot resolve TPU name {tpu_name!r}: the Google Cloud metadata server "
            f"({host}) is not reachable ({e}). Outside Google Cloud pass "
            f"'grpc://host:port'; on a TPU VM pass 'local'.") from None


# --------------------------------------------------------------------------------------
# Cluster setup
# --------------------------------------------------------------------------------------

def configure_cluster(worker_hosts: Optional[str] = None, task_index: int = -1) -> int:
    """Sets TF_CONFIG from `worker_hosts` unless it is set; returns the number of workers.

    Args:
      worker_hosts: comma-separated "host:port" of every worker, e.g. "h1:2222,h2:2222".
        Used only when TF_CONFIG is not already set.
      task_index: this process's index in `worker_hosts`; required when there are 2 or
        more workers, ignored (taken as 0) for one.

    Returns:
      With TF_CONFIG set: its number of 'chief' plus 'worker' tasks (TF_CONFIG is left
      unchanged). Otherwise the number of `worker_hosts` (1 when there are none).
    """
    tf_config = _read_tf_config()
    if tf_config:
        cluster = tf_config.get("cluster", {})
        return len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    if not worker_hosts:
        return 1
    workers = [host.strip() for host in worker_hosts.split(",") if host.strip()]
    if not workers:
        raise ConfigError(f"runtime.worker_hosts {worker_hosts!r} names no host.")
    if len(workers) == 1:
        task_index = 0
    elif task_index < 0:
        raise ConfigError(
            f"runtime.task_index must be set (0..{len(workers) - 1}) when "
            f"runtime.worker_hosts lists {len(workers)} workers.")
    elif task_index >= len(workers):
        raise ConfigError(
            f"runtime.task_index ({task_index}) is out of range for {len(workers)} "
            f"worker_hosts; use 0..{len(workers) - 1}.")
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": workers},
        "task": {"type": "worker", "index": task_index},
    })
    return len(workers)


def strategy_from_runtime(runtime_config) -> tf.distribute.Strategy:
    """Configures the cluster and builds the strategy described by a `RuntimeConfig`.

    Runs `configure_cluster(runtime.worker_hosts, runtime.task_index)`, then
    `get_distribution_strategy` with the runtime's strategy, num_gpus, all_reduce_alg,
    num_packs and tpu. Returns the default strategy for "off".
    Mixed precision is separate: call `set_mixed_precision_policy` before building models.
    """
    configure_cluster(runtime_config.worker_hosts, runtime_config.task_index)
    return get_distribution_strategy(
        distribution_strategy=runtime_config.distribution_strategy,
        num_gpus=runtime_config.num_gpus,
        all_reduce_alg=runtime_config.all_reduce_alg,
        num_packs=runtime_config.num_packs,
        tpu_address=runtime_config.tpu,
        **({"failure_timeout_s": runtime_config.cluster_failure_timeout_s}
           if _normalise_name(runtime_config.distribution_strategy) == "multi_worker_mirrored"
           else {}))


def start_server_from_tf_config():
    """Starts the server of a 'worker' or 'ps' task named in TF_CONFIG, else returns None.

    In a parameter-server cluster only the chief runs the training program; each worker and
    ps process runs `server = start_server_from_tf_config(); server.join()` (join blocks
    forever). Returns None when TF_CONFIG is unset or names another task type.
    """
    tf_config = _read_tf_config()
    task = tf_config.get("task", {})
    if task.get("type") not in ("worker", "ps"):
        return None
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.Server(
        resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc", start=True)


# --------------------------------------------------------------------------------------
# Mixed precision
# --------------------------------------------------------------------------------------

_POLICY_BY_DTYPE = {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16",
                    "float32": "float32"}


def set_mixed_precision_policy(dtype: Union[None, str, tf.dtypes.DType]) -> str:
    """Sets Keras's global dtype policy from `runtime.mixed_precision_dtype`; returns its name.

    "float16" -> "mixed_float16", "bfloat16" -> "mixed_bfloat16", None or "float32" ->
    "float32". A `tf.DType` of those is accepted too. Layers read the policy when they are
    created, so call this before building the model; with float16 also wrap the optimizer in
    `keras.optimizers.LossScaleOptimizer`.
    """
    import keras  # pylint: disable=g-import-not-at-top  (keeps module import light)

    key = "float32" if dtype is None else getattr(dtype, "name", dtype)
    policy = _POLICY_BY_DTYPE.get(key) if isinstance(key, str) else None
    if policy is None:
        raise ConfigError(
            f"mixed_precision_dtype {dtype!r} is not one of float16, bfloat16, float32 "
            f"(or None).")
    keras.mixed_precision.set_global_policy(policy)
    return policy


# --------------------------------------------------------------------------------------
# Thread and kernel settings (TFM's RuntimeConfig fields the vision launcher leaves unread)
# --------------------------------------------------------------------------------------

GPU_THREAD_MODES = ("global", "gpu_private", "gpu_shared")
# TFM's keras_utils.set_gpu_thread_mode_and_count default when per_gpu_thread_count is 0.
_DEFAULT_PER_GPU_THREAD_COUNT = 2
_warned_settings: set = set()


def _warn_once(key: str, message: str, *args) -> None:
    if key not in _warned_settings:
        _warned_settings.add(key)
        logging.warning(message, *args)


def apply_performance_settings(params) -> Dict[str, str]:
    """Applies the thread and kernel fields of an `ExperimentConfig`; returns the env it set.

    Call before TensorFlow initialises its devices (the driver does, before building the
    strategy): the GPU runtime reads these variables when it creates a device.

    | field                              | effect                                             |
    |------------------------------------|----------------------------------------------------|
    | `runtime.gpu_thread_mode`          | `TF_GPU_THREAD_MODE` (global, gpu_private,         |
    |                                    | gpu_shared): who launches GPU kernels              |
    | `runtime.per_gpu_thread_count`     | `TF_GPU_THREAD_COUNT` (0: 2, TFM's default); only  |
    |                                    | with gpu_thread_mode, as in TFM                    |
    | `runtime.batchnorm_spatial_persistent` | `TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT=1`  |
    |                                    | (TFM's); warns that Keras 3's BatchNormalization   |
    |                                    | does not run the fused kernel it tunes             |
    | `runtime.dataset_num_private_threads` | warns once: InputReader keeps tf.data's shared  |
    |                                    | thread pool                                        |
    | `trainer.allow_tpu_summary`        | warns once: no TPU summary optimisation here       |

    Raises:
      ConfigError: gpu_thread_mode is not one of `GPU_THREAD_MODES`.
    """
    runtime, trainer = params.runtime, params.trainer
    env: Dict[str, str] = {}
    if runtime.gpu_thread_mode:
        if runtime.gpu_thread_mode not in GPU_THREAD_MODES:
            raise ConfigError(
                f"runtime.gpu_thread_mode {runtime.gpu_thread_mode!r} is not one of "
                f"{', '.join(GPU_THREAD_MODES)}.")
        env["TF_GPU_THREAD_MODE"] = runtime.gpu_thread_mode
        env["TF_GPU_THREAD_COUNT"] = str(runtime.per_gpu_thread_count
                                         or _DEFAULT_PER_GPU_THREAD_COUNT)
    elif runtime.per_gpu_thread_count:
        _warn_once("per_gpu_thread_count",
                   "runtime.per_gpu_thread_count=%d has no effect without "
                   "runtime.gpu_thread_mode (as in TFM).", runtime.per_gpu_thread_count)
    if runtime.batchnorm_spatial_persistent:
        env["TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT"] = "1"
        _warn_once("batchnorm_spatial_persistent",
                   "runtime.batchnorm_spatial_persistent sets "
                   "TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT=1, which only TensorFlow's fused "
                   "batch norm (tf.nn.fused_batch_norm) reads; Keras 3's BatchNormalization "
                   "does not use it.")
    if runtime.dataset_num_private_threads:
        _warn_once("dataset_num_private_threads",
                   "runtime.dataset_num_private_threads=%d is ignored: InputReader's datasets "
                   "use tf.data's shared thread pool. Set "
                   "`options.threading.private_threadpool_size` in your task's input "
                   "pipeline instead.", runtime.dataset_num_private_threads)
    if trainer.allow_tpu_summary:
        _warn_once("allow_tpu_summary",
                   "trainer.allow_tpu_summary is ignored: lite_launcher writes summaries "
                   "outside the compiled train loop, so there is no TPU summary "
                   "optimisation to allow.")
    os.environ.update(env)
    return env


# --------------------------------------------------------------------------------------
# Who writes to model_dir
# --------------------------------------------------------------------------------------

def _task_writes(task_type: Optional[str], task_id, cluster: Dict[str, Any]) -> bool:
    """The one rule: the 'chief' task writes, or worker 0 when the cluster has no chief; a
    process that is no task of a cluster (single process, PS coordinator) writes too, and so
    does a sidecar 'evaluator' (its own chief, as in TF: it writes the eval summaries and
    best-checkpoint exports of the checkpoints the chief saves)."""
    if not task_type or task_type in ("chief", "evaluator"):
        return True
    return task_type == "worker" and int(task_id or 0) == 0 and not cluster.get("chief")


def should_write(strategy: Optional[tf.distribute.Strategy] = None) -> bool:
    """Whether this process writes to model_dir (checkpoints, summaries, exports, configs).

    The one place that decides it. `strategy=None`: the current strategy. True for
    single-process strategies and the parameter-server coordinator (only the chief builds a
    ParameterServerStrategy). In a multi-worker cluster: the 'chief' task, or worker 0 when
    the cluster has no chief, and only if the strategy itself agrees
    (`extended.should_checkpoint`). Non-writers still take part in every save (variables
    sync on read) but save into a throwaway directory: see `checkpoints.worker_save_dir`.
    """
    if strategy is None:
        strategy = tf.distribute.get_strategy()
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return True
    if not getattr(strategy.extended, "should_checkpoint", True):
        return False
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    return _task_writes(resolver.task_type, resolver.task_id,
                        resolver.cluster_spec().as_dict())


# TFM-compatible name for the same question.
is_chief = should_write


def is_chief_process(distribution_strategy: str) -> bool:
    """`should_write` judged from TF_CONFIG alone, before any strategy exists.

    For the driver, which locks model_dir before building the strategy. Only
    `multi_worker_mirrored` and `parameter_server` run several processes; every other
    strategy's single process writes.
    """
    if _normalise_name(distribution_strategy) not in ("multi_worker_mirrored",
                                                      "parameter_server"):
        return True
    tf_config = _read_tf_config()
    task = tf_config.get("task") or {}
    return _task_writes(task.get("type"), task.get("index", 0), tf_config.get("cluster") or {})
