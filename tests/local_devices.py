"""Test helpers: logical CPU devices and an in-process parameter-server cluster.

Used by tests (and their subprocesses) to mirror over several CPU devices and to run
`parameter_server` in one process; not part of lite_launcher's API.
"""

import socket
from typing import Any, List

import tensorflow as tf

from lite_launcher.core.base_config import ConfigError

# In-process `tf.distribute.Server`s deadlock `ClusterCoordinator.join()` on small machines
# with too few inter-op threads; 3 or more avoid it.
LOCAL_SERVER_INTER_OP_THREADS = 8

# Keeps in-process servers alive: a `tf.distribute.Server` cannot be stopped, and dropping
# the last reference must not tear down a cluster a test is still using.
_LOCAL_SERVERS: List[Any] = []


def set_logical_cpu_count(count: int) -> List[str]:
    """Splits the CPU into `count` logical devices and returns their names.

    For mirroring over CPUs (tests, benchmarks):
    `get_distribution_strategy("mirrored", devices=set_logical_cpu_count(2))`.
    Must run before TensorFlow initialises its devices (before any op or device listing of
    logical devices); afterwards only the same count is accepted.
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ConfigError(f"Logical CPU count ({count!r}) must be a positive integer.")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError:
        existing = len(tf.config.list_logical_devices("CPU"))
        if existing != count:
            raise ConfigError(
                f"Cannot split the CPU into {count} logical devices: TensorFlow already "
                f"initialised {existing}. Call set_logical_cpu_count before any TensorFlow "
                f"op runs (e.g. at the top of the program or in a fresh subprocess).") from None
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def start_local_cluster(num_workers: int, num_ps: int,
                        inter_op_parallelism_threads: int = LOCAL_SERVER_INTER_OP_THREADS):
    """Starts in-process worker and ps servers on localhost; returns a cluster resolver.

    For tests and benchmarks of 'parameter_server' in one process:
    `get_distribution_strategy("parameter_server", cluster_resolver=start_local_cluster(2, 1))`.
    The servers get `inter_op_parallelism_threads` (default 8): with too few threads
    `ClusterCoordinator.join()` hangs on small machines. Servers live until the process ends.
    """
    if num_workers < 1 or num_ps < 0:
        raise ConfigError(
            f"start_local_cluster needs num_workers >= 1 and num_ps >= 0, got "
            f"{num_workers} and {num_ps}.")
    if inter_op_parallelism_threads < 3:
        raise ConfigError(
            f"inter_op_parallelism_threads ({inter_op_parallelism_threads}) must be >= 3 for "
            f"in-process servers.")
    cluster = {"worker": [f"localhost:{_free_port()}" for _ in range(num_workers)]}
    if num_ps:
        cluster["ps"] = [f"localhost:{_free_port()}" for _ in range(num_ps)]
    cluster_spec = tf.train.ClusterSpec(cluster)
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=inter_op_parallelism_threads)
    for job, hosts in cluster.items():
        for index in range(len(hosts)):
            _LOCAL_SERVERS.append(tf.distribute.Server(
                cluster_spec, job_name=job, task_index=index, config=config, protocol="grpc"))
    return tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, rpc_layer="grpc")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]
