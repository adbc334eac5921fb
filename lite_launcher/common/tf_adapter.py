"""The one home of lite's uses of private TensorFlow names (as `keras_adapter` is Keras's).

TensorFlow offers no public path to a few things lite needs: calling a traced graph with its
flat tensors (the public call re-binds and casts its arguments on every step: ~0.1 ms on a
2-core machine, most of lite's own time in a 100-step loop), the cluster resolver a
`ParameterServerStrategy` keeps to itself, whether an iterator can be saved in a checkpoint,
the coordination service of a multi-worker cluster (its timeouts), and when a
`CheckpointManager` last saved. Every read of a private TensorFlow name is here, and nowhere
else in lite (`tests/test_architecture.py` scans for them); each function falls back to public
behaviour when TensorFlow renames what it reads, and `missing_private_names()` checks them
against the installed TensorFlow (`tests/test_tf_adapter.py` fails naming each one a release
renames or drops).

Checked on TensorFlow `CHECKED_TF_VERSIONS`.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, List, Optional

import tensorflow as tf

CHECKED_TF_VERSIONS = ("2.21.0",)

# What lite reads, by owner: attributes of TensorFlow objects, and private modules.
PRIVATE_NAMES = {
    "ConcreteFunction": ("_call_flat",),
    "ParameterServerStrategy": ("_cluster_resolver",),
    "CheckpointManager": ("_last_checkpoint_step",),
    "tf.__internal__.tracking": ("Trackable",),
    "modules": ("tensorflow.python.eager.context",
                "tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2"),
}
# The parameters of `ConcreteFunction._call_flat` that `flat_call` was written against.
_CALL_FLAT_PARAMETERS = ["tensor_inputs", "captured_inputs"]


def flat_call(concrete) -> Optional[Callable[[List[Any]], Any]]:
    """`concrete`'s call with flat tensors (`inputs -> outputs`, captures passed for it), or
    None when this TensorFlow's `ConcreteFunction` has no such call with the parameters it
    was written against (use the public call then)."""
    call_flat = getattr(concrete, "_call_flat", None)
    if call_flat is None:
        return None
    try:
        parameters = list(inspect.signature(call_flat).parameters)
    except (TypeError, ValueError):
        return None
    if parameters != _CALL_FLAT_PARAMETERS:
        return None
    captured = concrete.captured_inputs
    return lambda inputs: call_flat(inputs, captured)


def cluster_resolver(strategy):
    """The strategy's cluster resolver; `ParameterServerStrategy` keeps its own private (TF
    2.21: its public `cluster_resolver` is None). None when it has none."""
    return strategy.cluster_resolver or getattr(strategy, "_cluster_resolver", None)


def is_trackable(obj) -> bool:
    """Whether `obj` can be tracked by a `tf.train.Checkpoint` (a tf.data iterator can; a
    tf.distribute input iterator cannot)."""
    return isinstance(obj, tf.__internal__.tracking.Trackable)


def last_checkpoint_step(manager: tf.train.CheckpointManager) -> Optional[int]:
    """The step `manager` last saved or restored at (its own record; None before either)."""
    return getattr(manager, "_last_checkpoint_step", None)


def set_last_checkpoint_step(manager: tf.train.CheckpointManager, step: int) -> None:
    """Records `step` as the one `manager` last saved or restored at, as the manager does
    after its own restore (a restore that bypasses it: the next save is due
    `checkpoint_interval` steps on)."""
    manager._last_checkpoint_step = step  # pylint: disable=protected-access


def configure_coordination_service(leader: str, jobs: dict, timeout_ms: int) -> bool:
    """Starts TensorFlow's coordination service for a multi-worker cluster with registration
    and heartbeat timeouts of `timeout_ms` (`jobs`: {job name: number of tasks}); TensorFlow
    has no public API for them. Returns False, changing nothing, when one is configured
    already (by an earlier strategy of this process)."""
    context = importlib.import_module("tensorflow.python.eager.context")
    coordination_config_pb2 = importlib.import_module(
        "tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2")
    if context.context().coordination_service is not None:
        return False
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=leader,
        cluster_register_timeout_in_ms=timeout_ms, heartbeat_timeout_in_ms=timeout_ms,
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(name=job, num_tasks=count)
                          for job, count in jobs.items()])
    return True


def missing_private_names() -> List[str]:
    """The private names of `PRIVATE_NAMES` the installed TensorFlow lacks (or whose call has
    other parameters), as 'owner.name'."""
    missing = []

    @tf.function(autograph=False)
    def double(x):
        return 2 * x

    concrete = double.get_concrete_function(tf.TensorSpec([], tf.float32))
    call_flat = getattr(concrete, "_call_flat", None)
    if call_flat is None or list(inspect.signature(call_flat).parameters) != \
            _CALL_FLAT_PARAMETERS:
        missing.append("ConcreteFunction._call_flat")
    if not _assigned_in_source(tf.distribute.experimental.ParameterServerStrategy,
                               "self._cluster_resolver"):
        missing.append("ParameterServerStrategy._cluster_resolver")
    if not _assigned_in_source(tf.train.CheckpointManager, "self._last_checkpoint_step ="):
        missing.append("CheckpointManager._last_checkpoint_step")
    if not hasattr(getattr(tf, "__internal__", None), "tracking") or not hasattr(
            tf.__internal__.tracking, "Trackable"):
        missing.append("tf.__internal__.tracking.Trackable")
    for module in PRIVATE_NAMES["modules"]:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(f"modules.{module}")
    return missing


def _assigned_in_source(cls, text: str) -> bool:
    """Whether the source of `cls` or a base of it holds `text` (an attribute its
    constructor assigns: a strategy cannot be built here without a cluster)."""
    for klass in cls.__mro__:
        try:
            if text in inspect.getsource(klass):
                return True
        except (OSError, TypeError):
            continue
    return False
