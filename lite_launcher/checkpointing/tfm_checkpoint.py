"""Reads checkpoints written by TFM (tf_keras models) into lite's Keras 3 models.

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
  another order than TFM (lite's ViT encoder block), `BLOCK_ORDERS` puts lite's in TFM's order;
  a family's module may add its own entry (`register_block_order`).
- Where TFM's checkpoint lists a Functional model's layers in graph order but lite's module
  creates them in TFM's order of creation (NAS-FPN: `register_creation_order`), each kind of
  layer (BatchNormalization or other) of that run pairs by the number tf_keras put in its
  name (`conv2d_12`), which counts creations.

`load_weights` reads the model (or backbone) alone, for `task.init_checkpoint` and lite-export.
`resume` (used by `checkpoints.TfmResumingCheckpointManager`, one layer up: this module reads,
`checkpoints` manages) resumes a TFM model_dir: weights, global step, and the optimizer's iterations and slots where TFM's legacy optimizer keeps them as Keras 3's does
(`SLOT_NAMES`: SGD's momentum, Adam's m / v); other optimizer state restarts, with a warning.

Every variable of the restored part must be found, with its shape (TFM's
`assert_existing_objects_matched`); anything else is a one-line `ConfigError` naming the first
variable that does not fit. Nothing is assigned until the whole part has matched.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from absl import logging

from lite_launcher.core.base_config import ConfigError

_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VALUE = "VARIABLE_VALUE"
# tf_keras's names for a functional model's layers in its object graph (Keras 3 has none).
_TF_KERAS_LAYER = re.compile(r"^layer(_with_weights)?-\d+$")

# tf_keras variable names Keras 3 renamed (DepthwiseConv2D's kernel).
_KERAS3_NAMES = {"depthwise_kernel": "kernel"}

# Within one block, lite's sub-layers (patterns matching the end of their variable path) in the
# order TFM's block assigns its own; sub-layers matching one pattern keep lite's order. TFM's
# TransformerEncoderBlock builds attention, its norm, then the MLP; lite's ViT block builds the
# norms first.
BLOCK_ORDERS: Dict[str, Tuple[str, ...]] = {
    "vit_encoder_block": ("self_attention/query", "self_attention/key", "self_attention/value",
                          "self_attention/attention_output", "self_attention_layer_norm",
                          "intermediate", "output", "output_layer_norm"),
    # MobileNetV4's multi-query attention: TFM's 1x1-conv projections are sub-layers, each
    # after the depthwise downsampling of its input; lite keeps them as its own matrices
    # (split by `_split_projections`).
    "mobilenet_v4_multi_query_attention": (
        "attention/query", "attention/key_dw", "attention/key_dw_norm", "attention/key",
        "attention/value_dw", "attention/value_dw_norm", "attention/value", "attention/output"),
    # TFM's SegmentationHead keeps its convolutions in one list and their norms in another
    # (`_convs`, `_norms`: depthwise and 1x1 alternating); lite builds each conv's norm after it.
    "segmentation_head": (
        "segmentation_head_deeplabv3p_fusion_conv", "segmentation_head_deeplabv3p_fusion_norm",
        r"segmentation_head_(depthwise_)?conv_\d+", r"segmentation_head_(depthwise_)?norm_\d+",
        "segmentation_output"),
}


# Patterns matching the end of a lite layer's path: runs of such layers were created in the
# order TFM created its own (see the module docstring).
CREATION_ORDERS: List[str] = []


def register_creation_order(pattern: str) -> None:
    """Marks lite layers whose path ends with `pattern` as created in TFM's order of creation
    (their TFM counterparts pair by tf_keras's name numbers, not by the graph's order)."""
    if pattern not in CREATION_ORDERS:
        CREATION_ORDERS.append(pattern)


def register_block_order(name: str, order: Sequence[str]) -> None:
    """Adds a family's `BLOCK_ORDERS` entry `name`: the patterns of its block's sub-layers in
    TFM's order. A family registers from its own module, so that this one imports none."""
    order = tuple(order)
    if BLOCK_ORDERS.get(name, order) != order:
        raise ValueError(f"block order {name!r} is already registered with other patterns.")
    BLOCK_ORDERS[name] = order


# A lite layer holding these projection matrices itself stands for TFM's sub-layers, one each.
_PROJECTIONS = frozenset(("query", "key", "value", "output"))


# TFM's (tf_keras legacy) optimizer slot names -> Keras 3's, where the two keep the same
# quantity: SGD's momentum (both store momentum * m - lr * g), Adam's first and second moments.
SLOT_NAMES = {"momentum": "momentum", "m": "momentum", "v": "velocity"}
# TFM's ExponentialMovingAverage keeps each variable's average as this slot.
AVERAGE_SLOT = "average"


@dataclasses.dataclass
class TfmLayer:
    """One TFM layer that holds variables: its object path, {name: checkpoint key} and
    {name: object-graph node id}."""

    path: str
    keys: Dict[str, str]
    nodes: Dict[str, int] = dataclasses.field(default_factory=dict)
    # The variables' names in TFM's model ('conv2d_12/kernel').
    full_names: Dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class LiteLayer:
    """One lite layer that holds variables: its variable path prefix and {name: variable}."""

    path: str
    variables: Dict[str, tf.Variable]


# Optional per-variable transform: (TFM value, lite variable) -> value to assign, or None when
# it does not apply (then shapes must be equal).
Hook = Callable[[np.ndarray, tf.Variable], Optional[np.ndarray]]


def _object_graph(prefix: str):
    reader = tf.train.load_checkpoint(prefix)
    if not reader.has_tensor(_GRAPH_KEY):
        return reader, None
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(_GRAPH_KEY))
    return reader, graph


def is_tfm_checkpoint(prefix: str) -> bool:
    """True for a checkpoint written by a tf_keras model (TFM's), False for a Keras 3 one and
    for one whose files cannot be read (the caller's own read then says why)."""
    try:
        _, graph = _object_graph(prefix)
    except (IndexError, tf.errors.OpError):
        return False
    if graph is None:
        return False
    return any(_TF_KERAS_LAYER.match(child.local_name)
               for node in graph.nodes for child in node.children)


def _is_variable(node) -> bool:
    return any(attribute.name == _VALUE for attribute in node.attributes)


def _value_key(node) -> str:
    return next(a.checkpoint_key for a in node.attributes if a.name == _VALUE)


def _full_name(node) -> str:
    return next(a.full_name for a in node.attributes if a.name == _VALUE)


def _top(graph) -> Dict[str, int]:
    return {child.local_name: child.node_id for child in graph.nodes[0].children}


def tfm_layers(graph, root: str, skip: Sequence[str] = ()) -> List[TfmLayer]:
    """The layers holding variables under the top-level object `root`, depth first, each
    node's children in the order TFM's code assigned them; `skip`: children of `root` whose
    layers are left out."""
    top = _top(graph)
    if root not in top:
        raise ConfigError(f"the TFM checkpoint has no {root!r} object (it holds "
                          f"{', '.join(sorted(top))}).")
    layers: List[TfmLayer] = []
    seen = {child.node_id for child in graph.nodes[top[root]].children
            if child.local_name in skip}

    def visit(node_id: int, path: str):
        if node_id in seen:
            return
        seen.add(node_id)
        node = graph.nodes[node_id]
        keys, nodes, names = {}, {}, {}
        for child in node.children:
            child_node = graph.nodes[child.node_id]
            if not _is_variable(child_node):
                continue
            if child.node_id in nodes.values():
                # Tracked twice (an attribute and the weight's own name): keep the public name.
                alias = next(n for n, i in nodes.items() if i == child.node_id)
                if not alias.startswith("_") or child.local_name.startswith("_"):
                    continue
                del keys[alias], nodes[alias], names[alias]
            keys[child.local_name] = _value_key(child_node)
            nodes[child.local_name] = child.node_id
            names[child.local_name] = _full_name(child_node)
            seen.add(child.node_id)
        if set(keys) == _PROJECTIONS:  # as lite's, one layer per projection
            layers.extend(TfmLayer(f"{path}/{name}", {"kernel": keys[name]},
                                   {"kernel": nodes[name]}) for name in keys)
        elif keys:
            layers.append(TfmLayer(path, keys, nodes, names))
        for child in node.children:
            visit(child.node_id, f"{path}/{child.local_name}")

    visit(top[root], root)
    return layers


def _block_rank(path: str) -> Optional[Tuple[str, int]]:
    """(the block's path, the sub-layer's rank in TFM's order) for the longest end of `path`
    a BLOCK_ORDERS pattern matches (a bare 'output' must not claim 'attention/output')."""
    matches = []
    for order in BLOCK_ORDERS.values():
        for rank, pattern in enumerate(order):
            match = re.search(f"/({pattern})$", path)
            if match:
                matches.append((len(match.group(1)), path[: match.start()], rank))
    if not matches:
        return None
    _, block, rank = max(matches)
    return block, rank


def _split_projections(layers: List[LiteLayer]) -> List[LiteLayer]:
    """Each lite layer that holds attention projections (`_PROJECTIONS`) as its own matrices
    as one layer per projection (`<path>/<name>`, its variable as `kernel`)."""
    result = []
    for layer in layers:
        if set(layer.variables) == _PROJECTIONS:
            result.extend(LiteLayer(f"{layer.path}/{name}", {"kernel": variable})
                          for name, variable in layer.variables.items())
        else:
            result.append(layer)
    return result


def lite_layers(module) -> List[LiteLayer]:
    """`module.weights` grouped into layers by variable path, in Keras's order; the sub-layers
    of a block listed in `BLOCK_ORDERS` put in TFM's order."""
    layers: Dict[str, LiteLayer] = {}
    for variable in module.weights:
        prefix, _, name = variable.path.rpartition("/")
        layers.setdefault(prefix, LiteLayer(prefix, {})).variables[name] = variable
    ordered = _split_projections(list(layers.values()))
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
        # (sorted is stable: sub-layers of one rank keep lite's order)
        result.extend(layer for _, layer in sorted(run, key=lambda pair: pair[0]))
        i = j
    return result


def _numpy_dtype(variable):
    return tf.as_dtype(variable.dtype).as_numpy_dtype


def _shape(value) -> str:
    return "(" + ", ".join(str(d) for d in value) + ")"


def _lite_name(tfm_name: str, lite_names) -> str:
    """The lite name of TFM's variable `tfm_name` in one layer: the same, Keras 3's rename, or
    without the underscore of a private attribute (TFM's LayerScale keeps `_gamma`)."""
    for name in (tfm_name, _KERAS3_NAMES.get(tfm_name), tfm_name.lstrip("_")):
        if name in lite_names:
            return name
    return tfm_name


def pair_variables(tfm: Sequence[TfmLayer],
                   lite: Sequence[LiteLayer]) -> List[Tuple[str, int, tf.Variable]]:
    """(TFM checkpoint key, TFM node id, lite variable) for every variable; ConfigError at the
    first layer or variable that does not pair."""
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
        keys = {_lite_name(name, l.variables): (key, t.nodes.get(name, -1))
                for name, key in t.keys.items()}
        if set(keys) != set(l.variables):
            raise ConfigError(f"TFM layer {t.path} (variables {', '.join(sorted(t.keys))}) "
                              f"does not fit the model's layer {l.path} (variables "
                              f"{', '.join(sorted(l.variables))}).")
        for name, variable in l.variables.items():
            pairs.append((*keys[name], variable))
    return pairs


def _one_by_one_conv(value: np.ndarray, variable) -> Optional[np.ndarray]:
    """TFM's 1x1 convolution kernel (1, 1, in, out) as lite's projection matrix (in, out)."""
    if tuple(value.shape) == (1, 1) + tuple(variable.shape):
        return value.reshape(tuple(variable.shape))
    return None


def _multi_query_projection(value: np.ndarray, variable) -> Optional[np.ndarray]:
    """TFM's MultiQueryAttentionLayerV2 einsum weights as lite's matrices: the query
    (heads, key_dim, channels) -> (channels, heads * key_dim), the output
    (channels, heads, value_dim) -> (heads * value_dim, channels)."""
    if value.ndim != 3 or len(variable.shape) != 2:
        return None
    if variable.path.endswith("attention/query"):
        return value.transpose(2, 0, 1).reshape(value.shape[2], -1)
    if variable.path.endswith("attention/output"):
        return value.transpose(1, 2, 0).reshape(-1, value.shape[0])
    return None


# Where a TFM layer keeps a weight in another layout than lite's.
_LAYOUTS = (_one_by_one_conv, _multi_query_projection)


def port_weight(variable: tf.Variable, value: np.ndarray, key: str,
                hook: Optional[Hook] = None) -> np.ndarray:
    """The value `variable` gets from TFM's `value` (checkpoint `key`): `hook`'s transform
    where it applies, else `value` itself; ConfigError naming both shapes if it does not fit."""
    if hook is not None:
        ported = hook(value, variable)
        if ported is not None:
            value = ported
    if tuple(value.shape) != tuple(variable.shape):
        for layout in _LAYOUTS:
            ported = layout(value, variable)
            if ported is not None and tuple(ported.shape) == tuple(variable.shape):
                value = ported
                break
    if tuple(value.shape) != tuple(variable.shape):
        raise ConfigError(f"TFM variable {key} {_shape(value.shape)} does not fit the model's "
                          f"{variable.path} {_shape(variable.shape)}.")
    return value


def _layer_kind(names) -> str:
    return "norm" if "moving_mean" in names else "other"


def _creation_number(layer: TfmLayer) -> int:
    """The number tf_keras put at the end of the layer's name (`conv2d_12`: 12, `conv2d`: 0)."""
    layer_name = next(iter(layer.full_names.values()), "").rpartition("/")[0]
    match = re.search(r"_(\d+)$", layer_name.rpartition("/")[2])
    return int(match.group(1)) if match else 0


def in_creation_order(tfm: List[TfmLayer], lite: List[LiteLayer]) -> List[TfmLayer]:
    """`tfm` with each run that pairs with a run of creation-ordered lite layers
    (`CREATION_ORDERS`) reordered: the k-th lite layer of a kind gets the TFM layer of that
    kind with the k-th smallest name number."""
    if not CREATION_ORDERS:
        return tfm
    marked = [any(re.search(f"(^|/)({p})$", layer.path) for p in CREATION_ORDERS)
              for layer in lite]
    result = list(tfm)
    i = 0
    while i < len(lite):
        if not marked[i]:
            i += 1
            continue
        j = i
        while j < len(lite) and marked[j]:
            j += 1
        if j <= len(tfm):
            by_kind: Dict[str, List[TfmLayer]] = {}
            for layer in sorted(tfm[i:j], key=_creation_number):
                by_kind.setdefault(_layer_kind(layer.keys), []).append(layer)
            wanted = [_layer_kind(layer.variables) for layer in lite[i:j]]
            if all(len(by_kind.get(kind, [])) == wanted.count(kind) for kind in set(wanted)):
                result[i:j] = [by_kind[kind].pop(0) for kind in wanted]
        i = j
    return result


def _holds_variables(graph, node_id: int) -> bool:
    """Whether the object `node_id` or any object under it is a variable."""
    stack, seen = [node_id], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if _is_variable(graph.nodes[node]):
            return True
        stack.extend(child.node_id for child in graph.nodes[node].children)
    return False


def parts_the_module_lacks(graph, root: str, module) -> Dict[str, int]:
    """{name: node id} of the parts of the checkpoint's `root` object that `module` names but
    does not have (its attribute of that name is None): a box-only Mask R-CNN's `mask_head`,
    read from a Mask R-CNN checkpoint. TFM's tasks read an init checkpoint with
    `expect_partial()`, which leaves such parts unread."""
    top = _top(graph)
    if root not in top:
        return {}
    return {child.local_name: child.node_id for child in graph.nodes[top[root]].children
            if not child.local_name.startswith("_")
            and getattr(module, child.local_name, False) is None}


def _read_model(reader, graph, module, root: str, hook: Optional[Hook] = None,
                partial: bool = False):
    """[(variable, value, TFM node id)] for every variable of `module`, checked. `partial`:
    the checkpoint's parts that the module lacks are left unread (`parts_the_module_lacks`),
    as TFM's `expect_partial()` reads."""
    lite = lite_layers(module)
    skip = parts_the_module_lacks(graph, root, module) if partial else {}
    unread = [name for name, node in skip.items() if _holds_variables(graph, node)]
    if unread:
        logging.info("The TFM checkpoint's %s weights are not read: the model has no such "
                     "part (TFM's expect_partial() leaves them too).",
                     ", ".join(f"{root}/{name}" for name in unread))
    pairs = pair_variables(in_creation_order(tfm_layers(graph, root, skip), lite), lite)
    return [(variable, port_weight(variable, reader.get_tensor(key), key, hook), node)
            for key, node, variable in pairs]


def load_weights(module, prefix: str, root: str, hook: Optional[Hook] = None,
                 averages: bool = False) -> int:
    """Assigns the TFM checkpoint's `root` object (`model` or `backbone`) to `module`
    (`load_items` with one item)."""
    return load_items({root: module}, prefix, hook, averages)


def load_items(items: Dict[str, object], prefix: str, hook: Optional[Hook] = None,
               averages: bool = False) -> int:
    """Assigns each top-level object of the TFM checkpoint (`model`, or a model's
    checkpoint items: `backbone`, `decoder`, `head`) to the module `items` gives it. Parts of
    an object that its module lacks are not read, as TFM's tasks read with `expect_partial()`
    (a Faster R-CNN from a Mask R-CNN checkpoint: its `mask_head`).

    `averages`: where the checkpoint was saved under TFM's ExponentialMovingAverage, the
    trainable variables get its moving averages (what TFM evaluates and exports), the others
    their values; without averages in the checkpoint the weights are read as they are (logged).
    All variables of every item are read and checked before any is assigned. Returns how
    many were."""
    reader, graph = _object_graph(prefix)
    if graph is None:
        raise ConfigError(f"{prefix!r} holds no object graph (not a TF2 checkpoint).")
    values = [value for root, module in items.items()
              for value in _read_model(reader, graph, module, root, hook, partial=True)]
    slots = _tfm_slots(graph, reader) if averages else {}
    trainable = {id(v) for module in items.values() for v in module.trainable_variables}
    averaged = 0
    for i, (variable, value, node) in enumerate(values):
        key = slots.get(node, {}).get(AVERAGE_SLOT)
        if key is not None and id(variable) in trainable:
            values[i] = (variable, port_weight(variable, reader.get_tensor(key), key), node)
            averaged += 1
    if averages:
        logging.info("%s: %d trainable variables read as TFM's moving averages%s.", prefix,
                     averaged, "" if averaged else " (the checkpoint holds none: its weights "
                     "are read as they are)")
    for variable, value, _ in values:
        variable.assign(value.astype(_numpy_dtype(variable)))
    return len(values)


def _keras_slots(optimizer, variables) -> Dict[Tuple[int, str], tf.Variable]:
    """{(id(model variable), Keras slot name): slot variable} of a built Keras 3 optimizer,
    found by the name Keras gives a slot: `<variable path, '/' -> '_'>_<slot>` (Keras 3.15;
    `<slot>_<variable name>` in earlier releases)."""
    by_name = {v.name: v for v in optimizer.variables}
    slots = {}
    for variable in variables:
        for slot in set(SLOT_NAMES.values()):
            for name in (f"{variable.path.replace('/', '_')}_{slot}", f"{slot}_{variable.name}"):
                found = by_name.get(name)
                if found is not None and tuple(found.shape) == tuple(variable.shape):
                    slots[(id(variable), slot)] = found
                    break
    return slots


def _optimizer_nodes(graph) -> List[int]:
    """The checkpoint's optimizer and the optimizers inside it (TFM's EMA wraps its base
    optimizer as `ema_base_optimizer`), depth first."""
    top = _top(graph)
    if "optimizer" not in top:
        return []
    nodes, pending = [], [top["optimizer"]]
    while pending:
        node_id = pending.pop(0)
        if node_id in nodes:
            continue
        nodes.append(node_id)
        pending.extend(child.node_id for child in graph.nodes[node_id].children
                       if graph.nodes[child.node_id].slot_variables
                       or any(c.local_name == "iter" for c in graph.nodes[child.node_id].children))
    return nodes


def _tfm_slots(graph, reader) -> Dict[int, Dict[str, str]]:
    """{TFM variable node id: {TFM slot name: checkpoint key}} of the checkpoint's
    optimizer(s); TFM's EMA keeps its averages as slots named 'average'."""
    slots: Dict[int, Dict[str, str]] = {}
    for node_id in _optimizer_nodes(graph):
        for ref in graph.nodes[node_id].slot_variables:
            key = _value_key(graph.nodes[ref.slot_variable_node_id])
            if reader.has_tensor(key):
                slots.setdefault(ref.original_variable_node_id, {})[ref.slot_name] = key
    return slots


def _ema_averages(optimizer, variables) -> Dict[int, tf.Variable]:
    """{id(model variable): its moving average} of a lite optimizer with EMA, else {}."""
    from lite_launcher import optimization  # pylint: disable=import-outside-toplevel

    if not optimization.has_ema(optimizer):
        return {}
    averages = optimization.ema_variables(optimizer)
    return {id(v): a for v, a in zip(variables, averages) if tuple(v.shape) == tuple(a.shape)}


def _tfm_iterations(graph, reader) -> Optional[int]:
    for node_id in _optimizer_nodes(graph):
        for child in graph.nodes[node_id].children:
            if child.local_name in ("iter", "iterations"):
                return int(reader.get_tensor(_value_key(graph.nodes[child.node_id])))
    return None


def resume(prefix: str, model, optimizer=None, global_step: Optional[tf.Variable] = None):
    """Continues a TFM run from its checkpoint `prefix`: the model's weights, the global
    step, and the optimizer's iterations and the slots `SLOT_NAMES` maps. Optimizer state
    that does not map restarts from its initial values, with one warning naming it.

    Returns the global step restored (None when the checkpoint holds none)."""
    reader, graph = _object_graph(prefix)
    if graph is None:
        raise ConfigError(f"{prefix!r} holds no object graph (not a TF2 checkpoint).")
    weights = _read_model(reader, graph, model, "model")
    values = [(variable, value) for variable, value, _ in weights]
    step = tfm_global_step(prefix)
    if global_step is not None and step is not None:
        values.append((global_step, np.asarray(step)))
    restarted = set()
    if optimizer is not None and not hasattr(optimizer, "iterations"):
        restarted.add(f"all of {type(optimizer).__name__}'s")  # several optimizers
        optimizer = None
    if optimizer is not None:
        from lite_launcher import optimization  # pylint: disable=import-outside-toplevel

        trainable = list(model.trainable_variables)
        optimization.create_optimizer_variables(optimizer, model)
        optimizer = optimization.unwrap_loss_scale(optimizer)
        keras_slots = _keras_slots(optimizer, trainable)
        tfm_slots = _tfm_slots(graph, reader)
        node_of = {id(variable): node for variable, _, node in weights}
        averages = _ema_averages(optimizer, trainable)
        for variable in trainable:
            found = tfm_slots.get(node_of.get(id(variable), -1), {})
            mapped = set()
            if AVERAGE_SLOT in found and id(variable) in averages:
                target = averages[id(variable)]
                key = found[AVERAGE_SLOT]
                values.append((target, port_weight(target, reader.get_tensor(key), key)))
            elif AVERAGE_SLOT in found:
                restarted.add("TFM's moving averages (set optimizer_config.ema to keep them)")
            elif id(variable) in averages:
                restarted.add("Keras's moving averages")
            for tfm_name, key in found.items():
                if tfm_name == AVERAGE_SLOT:
                    continue
                keras_name = SLOT_NAMES.get(tfm_name)
                target = keras_slots.get((id(variable), keras_name))
                if target is None:
                    restarted.add(f"TFM's {tfm_name!r}")
                    continue
                values.append((target, port_weight(target, reader.get_tensor(key), key)))
                mapped.add(keras_name)
            for (owner, keras_name) in keras_slots:
                if owner == id(variable) and keras_name not in mapped:
                    restarted.add(f"Keras's {keras_name!r}")
        iterations = _tfm_iterations(graph, reader)
        if iterations is not None:
            values.append((optimizer.iterations, np.asarray(iterations)))
        else:
            restarted.add("the optimizer's iterations")
    for variable, value in values:
        variable.assign(np.asarray(value).astype(_numpy_dtype(variable)))
    if restarted:
        logging.warning("Resuming the TFM checkpoint %s: optimizer state %s has no counterpart "
                        "and restarts from its initial values.", prefix,
                        ", ".join(sorted(restarted)))
    logging.info("Resumed the TFM checkpoint %s (global step %s).", prefix, step)
    return step


def tfm_global_step(prefix: str) -> Optional[int]:
    """The global step a TFM Trainer checkpoint holds (None without one)."""
    reader, graph = _object_graph(prefix)
    top = _top(graph)
    if "global_step" not in top:
        return None
    return int(reader.get_tensor(_value_key(graph.nodes[top["global_step"]])))
