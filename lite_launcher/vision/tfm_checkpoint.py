"""Reads checkpoints written by TFM (tf_keras models) into lite's Keras 3 vision models.

A TFM Trainer checkpoint is a tf_keras object graph: `model/layer_with_weights-N/...`,
`backbone/layer_with_weights-N/_conv1/kernel`, ... A lite checkpoint is a Keras 3 one
(`model/_backbone/_operations/N/...`). The two cannot restore into each other with
`tf.train.Checkpoint`, but they hold the same layers: lite's vision families are built from the
same block specs, in the same order, as TFM's. So the pairing comes from structure:

- TFM's side: the checkpoint's object graph walked depth first from the part restored
  (`model` or `backbone`), each node's children in the order its layer assigned them (the
  graph keeps it); every node that holds variables is one layer.
- lite's side: `module.weights` in Keras's order, grouped into layers by `variable.path`.
- The two layer lists pair one to one, in order; within a pair, variables pair by their Keras
  names (kernel, gamma, moving_mean, ...). Where a family builds a block's sub-layers in
  another order than TFM (lite's ViT encoder block), `BLOCK_ORDERS` puts lite's in TFM's order.

Every variable of the restored part must be found, with its shape (TFM's
`assert_existing_objects_matched`); anything else is a one-line `ConfigError` naming the first
variable that does not fit. Nothing is assigned until the whole part has matched.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from lite_launcher.base_config import ConfigError

_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VALUE = "VARIABLE_VALUE"
# tf_keras's names for a functional model's layers in its object graph (Keras 3 has none).
_TF_KERAS_LAYER = re.compile(r"^layer(_with_weights)?-\d+$")

# tf_keras variable names Keras 3 renamed (DepthwiseConv2D's kernel).
_KERAS3_NAMES = {"depthwise_kernel": "kernel"}

# Within one block, lite's sub-layers (by the end of their variable path) in the order TFM's
# block assigns its own: TFM's TransformerEncoderBlock builds attention, its norm, then the MLP;
# lite's ViT block builds the norms first.
BLOCK_ORDERS: Dict[str, Tuple[str, ...]] = {
    "vit_encoder_block": ("self_attention/query", "self_attention/key", "self_attention/value",
                          "self_attention/attention_output", "self_attention_layer_norm",
                          "intermediate", "output", "output_layer_norm"),
}


@dataclasses.dataclass
class TfmLayer:
    """One TFM layer that holds variables: its object path and {name: checkpoint key}."""

    path: str
    keys: Dict[str, str]


@dataclasses.dataclass
class LiteLayer:
    """One lite layer that holds variables: its variable path prefix and {name: variable}."""

    path: str
    variables: Dict[str, tf.Variable]


# Optional per-variable transform: (TFM value, lite variable) -> value to assign, or None when
# it does not apply (then shapes must be equal).
Hook = Callable[[np.ndarray, tf.Variable], Optional[np.ndarray]]


def resolve(path: str, what: str = "task.init_checkpoint") -> str:
    """A checkpoint prefix from a prefix or a directory (its latest checkpoint)."""
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if not latest:
            raise ConfigError(f"{what} directory {path!r} holds no checkpoint.")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise ConfigError(f"{what} {path!r} is neither a checkpoint directory nor a checkpoint "
                          f"prefix.")
    return path


def _object_graph(prefix: str):
    reader = tf.train.load_checkpoint(prefix)
    if not reader.has_tensor(_GRAPH_KEY):
        return reader, None
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(_GRAPH_KEY))
    return reader, graph


def is_tfm_checkpoint(prefix: str) -> bool:
    """True for a checkpoint written by a tf_keras model (TFM's), False for a Keras 3 one."""
    _, graph = _object_graph(prefix)
    if graph is None:
        return False
    return any(_TF_KERAS_LAYER.match(child.local_name)
               for node in graph.nodes for child in node.children)


def _is_variable(node) -> bool:
    return any(attribute.name == _VALUE for attribute in node.attributes)


def tfm_layers(graph, root: str) -> List[TfmLayer]:
    """The layers holding variables under the top-level object `root`, depth first, each
    node's children in the order TFM's code assigned them."""
    top = {child.local_name: child.node_id for child in graph.nodes[0].children}
    if root not in top:
        raise ConfigError(f"the TFM checkpoint has no {root!r} object (it holds "
                          f"{', '.join(sorted(top))}).")
    layers: List[TfmLayer] = []
    seen = set()

    def visit(node_id: int, path: str):
        if node_id in seen:
            return
        seen.add(node_id)
        node = graph.nodes[node_id]
        keys = {}
        for child in node.children:
            child_node = graph.nodes[child.node_id]
            if _is_variable(child_node):
                keys[child.local_name] = next(a.checkpoint_key for a in child_node.attributes
                                              if a.name == _VALUE)
                seen.add(child.node_id)
        if keys:
            layers.append(TfmLayer(path, keys))
        for child in node.children:
            visit(child.node_id, f"{path}/{child.local_name}")

    visit(top[root], root)
    return layers


def _block_rank(path: str) -> Optional[Tuple[str, int]]:
    for order in BLOCK_ORDERS.values():
        for rank, suffix in enumerate(order):
            if path.endswith("/" + suffix):
                return path[: -len(suffix) - 1], rank
    return None


def lite_layers(module) -> List[LiteLayer]:
    """`module.weights` grouped into layers by variable path, in Keras's order; the sub-layers
    of a block listed in `BLOCK_ORDERS` put in TFM's order."""
    layers: Dict[str, LiteLayer] = {}
    for variable in module.weights:
        prefix, _, name = variable.path.rpartition("/")
        layers.setdefault(prefix, LiteLayer(prefix, {})).variables[name] = variable
    ordered = list(layers.values())
    # Reorder each run of consecutive sub-layers of one listed block.
    result: List[LiteLayer] = []
    i = 0
    while i < len(ordered):
        ranked = _block_rank(ordered[i].path)
        if ranked is None:
            result.append(ordered[i])
            i += 1
            continue
        block, j = ranked[0], i
        run = []
        while j < len(ordered):
            r = _block_rank(ordered[j].path)
            if r is None or r[0] != block:
                break
            run.append((r[1], ordered[j]))
            j += 1
        result.extend(layer for _, layer in sorted(run, key=lambda pair: pair[0]))
        i = j
    return result


def _shape(value) -> str:
    return "(" + ", ".join(str(d) for d in value) + ")"


def pair_variables(tfm: Sequence[TfmLayer], lite: Sequence[LiteLayer],
                   shapes: Dict[str, List[int]]) -> List[Tuple[str, tf.Variable]]:
    """(TFM checkpoint key, lite variable) for every variable; ConfigError at the first layer
    or variable that does not pair."""
    pairs = []
    for i in range(max(len(tfm), len(lite))):
        if i >= len(lite):
            raise ConfigError(f"TFM variable {next(iter(tfm[i].keys.values()))} has no "
                              f"counterpart in the model (the checkpoint holds "
                              f"{len(tfm) - len(lite)} more layers with weights).")
        if i >= len(tfm):
            variable = next(iter(lite[i].variables.values()))
            raise ConfigError(f"the model's variable {variable.path} "
                              f"{_shape(variable.shape)} is not in the TFM checkpoint (it "
                              f"holds {len(lite) - len(tfm)} fewer layers with weights).")
        t, l = tfm[i], lite[i]
        keys = {(_KERAS3_NAMES.get(name, name) if name not in l.variables else name): key
                for name, key in t.keys.items()}
        if set(keys) != set(l.variables):
            raise ConfigError(f"TFM layer {t.path} (variables {', '.join(sorted(t.keys))}) "
                              f"does not fit the model's layer {l.path} (variables "
                              f"{', '.join(sorted(l.variables))}).")
        for name, variable in l.variables.items():
            pairs.append((keys[name], variable))
    return pairs


def port_weight(variable: tf.Variable, value: np.ndarray, key: str,
                hook: Optional[Hook] = None) -> np.ndarray:
    """The value `variable` gets from TFM's `value` (checkpoint `key`): `hook`'s transform
    where it applies, else `value` itself; ConfigError naming both shapes if it does not fit."""
    if hook is not None:
        ported = hook(value, variable)
        if ported is not None:
            value = ported
    if tuple(value.shape) != tuple(variable.shape):
        raise ConfigError(f"TFM variable {key} {_shape(value.shape)} does not fit the model's "
                          f"{variable.path} {_shape(variable.shape)}.")
    return value


def restore(module, prefix: str, root: str, hook: Optional[Hook] = None) -> int:
    """Assigns the TFM checkpoint's `root` object (`model` or `backbone`) to `module`.

    All variables are read and checked before any is assigned. Returns how many were."""
    reader, graph = _object_graph(prefix)
    if graph is None:
        raise ConfigError(f"{prefix!r} holds no object graph (not a TF2 checkpoint).")
    shapes = reader.get_variable_to_shape_map()
    pairs = pair_variables(tfm_layers(graph, root), lite_layers(module), shapes)
    values = [(variable, port_weight(variable, reader.get_tensor(key), key, hook))
              for key, variable in pairs]
    for variable, value in values:
        variable.assign(value.astype(variable.dtype))
    return len(values)
