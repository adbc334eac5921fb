"""The dense heads of the one- and two-stage detectors (TFM's
official/vision/modeling/heads/dense_prediction_heads.py): `RetinaNetHead` and `RPNHead`.

`RetinaNetHead` reads the pyramid levels min_level .. max_level and predicts, per level and
anchor, class logits (`num_classes` per anchor, class 0 the background) and 4 box offsets,
each through its own tower of `num_convs` x (3x3 convolution, BatchNormalization, activation)
and a 3x3 predictor. As in TFM:
- `share_level_convs` (default): one set of tower convolutions and one predictor serve every
  level; the normalisations are per level either way. False: one set per level.
- `use_separable_conv`: separable convolutions; their tower convolutions keep Keras's default
  initializers and no kernel regulariser (TFM's), the predictors are initialised
  N(0, 0.03) and regularised.
- The class predictor's bias starts at -log((1 - 0.01) / 0.01): every anchor starts at a
  foreground probability of 0.01 (the focal-loss prior).
- Attribute heads: each predicts `size` values per anchor through its own tower (always shared
  across levels), one tower per `prediction_tower_name` (the first head naming it defines it),
  or, with `share_classification_heads`, a classification attribute reads the class tower.

`RPNHead` (Faster / Mask R-CNN's region proposals) is TFM's: `num_convs` 3x3 convolutions
shared by the levels with a BatchNormalization per level, then 1x1 objectness logits (one per
anchor) and 1x1 box offsets (four per anchor), shared too.

Sub-layers are attributes (not list items), so that `tf.train.Checkpoint` tracks every
variable; only the layers a call uses are created, so every weight is built by one call.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import keras

from lite_launcher.checkpointing import tfm_checkpoint
from lite_launcher.vision.modeling.layers.nn_layers import (
    NormSettings, SettingsBlock, build_in_call_order, get_activation, output_shape_through,
    register_serializable)

# The focal-loss prior: a new class predictor says "foreground" with this probability.
PRIOR_PROBABILITY = 0.01
ATTRIBUTE_TYPES = ("regression", "classification")


def _normal(stddev: float):
    return keras.initializers.RandomNormal(stddev=stddev)


def _prior_bias():
    return keras.initializers.Constant(-math.log((1 - PRIOR_PROBABILITY) / PRIOR_PROBABILITY))


def _level_shapes(input_shape):
    """{str(level): shape tuple} of a head's `build` / `compute_output_shape` argument."""
    return {str(level): tuple(shape) for level, shape in input_shape.items()}


# (tower, predict) steps for the heads' `_walk` on shapes: building each layer on its way, or
# only following the shapes.
_building = (build_in_call_order, lambda shape, layer: build_in_call_order(shape, [layer]))
_shapes = (output_shape_through, lambda shape, layer: layer.compute_output_shape(shape))


def _tensor_steps(activation, training):
    """(tower, predict) steps for the heads' `_walk` on tensors: each [conv, norm] pair of a
    tower, then `activation`; a predictor as it is."""

    def tower(x, layers):
        for conv, norm in zip(layers[::2], layers[1::2]):
            x = activation(norm(conv(x), training=training))
        return x

    return tower, lambda x, layer: layer(x)


# TFM's RetinaNetHead keeps each tower's convolutions in one list and their norms in another
# (`_cls_convs`, `_cls_norms`, then `_classifier`; the box net likewise): lite builds each
# convolution's norms after it. Attribute towers are not in this order.
tfm_checkpoint.register_block_order("retinanet_head", tuple(
    pattern for net, predictor in (("classnet", "scores"), ("boxnet", "boxes"))
    for pattern in (fr"{net}-conv_\d+(_\d+)?", fr"{net}-conv-norm_\d+_\d+",
                    fr"{predictor}(-\d+)?")))


@register_serializable
class RetinaNetHead(keras.layers.Layer):
    """TFM's RetinaNetHead: `head(features)` with features {str(level): [B, h, w, C]} returns
    `(scores, boxes, attributes)`: scores {str(level): [B, h, w, num_classes * A]}, boxes
    {str(level): [B, h, w, 4 * A]}, attributes {name: {str(level): [B, h, w, size * A]}}
    ({} without attribute heads), A = num_anchors_per_location.

    Args:
      min_level, max_level: the levels read and predicted.
      num_classes: classes per anchor, background included.
      num_anchors_per_location: A, anchors per feature-map cell.
      num_convs, num_filters: each tower's 3x3 convolutions and their filters.
      attribute_heads: dicts with `name`, `type` ('regression' / 'classification'), `size`,
        and optionally `prediction_tower_name`, `num_convs`, `num_filters` (None / 0: the
        head's).
      share_classification_heads: classification attributes read the class tower.
      use_separable_conv: separable convolutions everywhere.
      share_level_convs: one tower and predictor for all levels (True) or one per level.
      num_params_per_anchor: box values per anchor (4).
      settings: normalisation (momentum, epsilon, synchronized), activation and the kernel
        regulariser.
    """

    def __init__(self, min_level: int, max_level: int, num_classes: int,
                 num_anchors_per_location: int, num_convs: int = 4, num_filters: int = 256,
                 attribute_heads: Optional[Sequence[Dict[str, Any]]] = None,
                 share_classification_heads: bool = False, use_separable_conv: bool = False,
                 share_level_convs: bool = True, num_params_per_anchor: int = 4,
                 settings: Optional[NormSettings] = None, **kwargs):
        super().__init__(**kwargs)
        attribute_heads = [dict(head) for head in attribute_heads or []]
        for head in attribute_heads:
            if head.get("type", "regression") not in ATTRIBUTE_TYPES:
                raise ValueError(f"attribute head {head.get('name')!r}: type "
                                 f"{head.get('type')!r} must be 'regression' or "
                                 f"'classification'.")
            if head.get("prediction_tower_name") and share_classification_heads:
                raise ValueError(f"attribute head {head.get('name')!r}: prediction_tower_name "
                                 f"cannot be set with share_classification_heads.")
        self._settings = NormSettings.of(settings)
        self._args = dict(
            min_level=min_level, max_level=max_level, num_classes=num_classes,
            num_anchors_per_location=num_anchors_per_location, num_convs=num_convs,
            num_filters=num_filters, attribute_heads=attribute_heads,
            share_classification_heads=share_classification_heads,
            use_separable_conv=use_separable_conv, share_level_convs=bool(share_level_convs),
            num_params_per_anchor=num_params_per_anchor)
        self._activation = get_activation(self._settings.activation)
        self._levels = list(range(min_level, max_level + 1))
        # TFM's build order: the class tower and predictor, the box tower and predictor, then
        # the attribute towers and predictors.
        self._build_tower("classnet", "classnet", num_convs, num_filters,
                          self._args["share_level_convs"])
        self._build_predictor("scores", "scores", num_classes * num_anchors_per_location,
                              _prior_bias, self._args["share_level_convs"])
        self._build_tower("boxnet", "boxnet", num_convs, num_filters,
                          self._args["share_level_convs"])
        self._build_predictor("boxes", "boxes",
                              num_params_per_anchor * num_anchors_per_location,
                              keras.initializers.Zeros, self._args["share_level_convs"])
        # Attribute i's tower: `_towers[i]` (None: the class tower), built by its first user.
        self._towers: List[Optional[str]] = []
        owners: Dict[str, str] = {}
        for i, head in enumerate(attribute_heads):
            if share_classification_heads and head["type"] == "classification":
                self._towers.append(None)
            else:
                key = head.get("prediction_tower_name") or f"attribute_{i}"
                if key not in owners:
                    owners[key] = f"attribute_{i}"
                    self._build_tower(owners[key], head["name"],
                                      head.get("num_convs") or num_convs,
                                      head.get("num_filters") or num_filters, shared=True)
                self._towers.append(owners[key])
            bias = _prior_bias if head["type"] == "classification" else keras.initializers.Zeros
            self._build_predictor(f"attribute_{i}_predictor", f"{head['name']}_attributes",
                                  head.get("size", 1) * num_anchors_per_location, bias,
                                  shared=True, attribute=True)

    # ----- layers ----------------------------------------------------------------------
    # Sub-layers are attributes named `{net}_conv_{i}` / `{net}_conv_{level}_{i}` /
    # `{net}_norm_{level}_{i}` / predictors; the layers carry TFM's names ('classnet-conv_0',
    # 'classnet-conv-norm_3_0', 'scores', 'boxes-3', '<attribute>_attributes', ...), so that
    # TFM's weights map onto them by layer name.

    def _conv(self, filters, name, kernel_stddev, bias_initializer, tower_conv):
        """A 3x3 convolution with TFM's initialisers and regularisers for its role."""
        regularizer = self._settings.kernel_regularizer
        common = dict(kernel_size=3, padding="same", bias_initializer=bias_initializer(),
                      name=name)
        if not self._args["use_separable_conv"]:
            return keras.layers.Conv2D(filters, kernel_initializer=_normal(kernel_stddev),
                                       kernel_regularizer=regularizer, **common)
        if tower_conv:
            return keras.layers.SeparableConv2D(filters, **common)
        return keras.layers.SeparableConv2D(
            filters, depthwise_initializer=_normal(0.03), pointwise_initializer=_normal(0.03),
            depthwise_regularizer=regularizer, pointwise_regularizer=regularizer, **common)

    def _build_tower(self, net, tfm_net, num_convs, num_filters, shared):
        for level in self._levels:
            for i in range(num_convs):
                if not shared or level == self._levels[0]:
                    suffix = f"{i}" if shared else f"{level}_{i}"
                    setattr(self, f"{net}_conv_{suffix}",
                            self._conv(num_filters, f"{tfm_net}-conv_{suffix}", 0.01,
                                       keras.initializers.Zeros, tower_conv=True))
                setattr(self, f"{net}_norm_{level}_{i}",
                        self._settings.norm(name=f"{tfm_net}-conv-norm_{level}_{i}"))

    def _build_predictor(self, name, tfm_name, filters, bias_initializer, shared,
                         attribute=False):
        # Attribute predictors without separable convolutions: N(0, 1e-5), regularised; with
        # them, Keras's defaults (TFM passes no initializer there).
        for level in ([None] if shared else self._levels):
            suffix = "" if level is None else f"_{level}"
            layer_name = tfm_name if level is None else f"{tfm_name}-{level}"
            if attribute and self._args["use_separable_conv"]:
                layer = keras.layers.SeparableConv2D(filters, 3, padding="same",
                                                     bias_initializer=bias_initializer(),
                                                     name=layer_name)
            else:
                layer = self._conv(filters, layer_name, 1e-5, bias_initializer,
                                   tower_conv=False)
            setattr(self, name + suffix, layer)

    def build(self, input_shape):
        """Builds every sub-layer on {str(level): shape} in `call`'s order, without running
        it (Keras calls it before the first call, and when a `.keras` file is loaded)."""
        self._walk(_level_shapes(input_shape), *_building)

    def compute_output_shape(self, input_shape):
        return self._walk(_level_shapes(input_shape), *_shapes)

    # ----- call ------------------------------------------------------------------------

    def _tower_layers(self, net, level, shared, num_convs):
        """[conv, norm] x num_convs: the tower `net` on `level`, in order."""
        return [layer for i in range(num_convs) for layer in (
            getattr(self, f"{net}_conv_{i}" if shared else f"{net}_conv_{level}_{i}"),
            getattr(self, f"{net}_norm_{level}_{i}"))]

    def _predictor(self, name, level, shared):
        return getattr(self, name if shared else f"{name}_{level}")

    def call(self, features, training=None):
        return self._walk(features, *_tensor_steps(self._activation, training))

    def _walk(self, features, tower, predict):
        """`call`'s traversal of the levels: `tower(x, layers)` runs a tower's [conv, norm, ...]
        and `predict(x, layer)` a predictor, on tensors (`call`) or shapes (`build`,
        `compute_output_shape`), so that the three follow one order."""
        args = self._args
        shared = args["share_level_convs"]
        scores, boxes = {}, {}
        heads = args["attribute_heads"]
        attributes = {head["name"]: {} for head in heads}
        for level in self._levels:
            key = str(level)
            x = features[key]
            class_x = tower(x, self._tower_layers("classnet", level, shared, args["num_convs"]))
            scores[key] = predict(class_x, self._predictor("scores", level, shared))
            box_x = tower(x, self._tower_layers("boxnet", level, shared, args["num_convs"]))
            boxes[key] = predict(box_x, self._predictor("boxes", level, shared))
            tower_outputs = {}
            for i, (head, net) in enumerate(zip(heads, self._towers)):
                if net is None:
                    head_x = class_x
                else:
                    if net not in tower_outputs:
                        owner = heads[int(net.rsplit("_", 1)[1])]
                        tower_outputs[net] = tower(x, self._tower_layers(
                            net, level, True, owner.get("num_convs") or args["num_convs"]))
                    head_x = tower_outputs[net]
                attributes[head["name"]][key] = predict(
                    head_x, getattr(self, f"attribute_{i}_predictor"))
        return scores, boxes, attributes

    def get_config(self):
        return {**super().get_config(), **self._args, "settings": self._settings.get_config()}


def build_retinanet_head(model_config, settings: NormSettings,
                         num_anchors_per_location: Optional[int] = None) -> RetinaNetHead:
    """TFM's factory call of `RetinaNetHead` for a `RetinaNet` model config: A is
    num_scales * len(aspect_ratios) unless `num_anchors_per_location` is given."""
    head = model_config.head
    anchor = model_config.anchor
    return RetinaNetHead(
        min_level=model_config.min_level, max_level=model_config.max_level,
        num_classes=model_config.num_classes,
        num_anchors_per_location=(num_anchors_per_location
                                  or anchor.num_scales * len(anchor.aspect_ratios)),
        num_convs=head.num_convs, num_filters=head.num_filters,
        attribute_heads=[attribute.as_dict() for attribute in head.attribute_heads],
        share_classification_heads=head.share_classification_heads,
        use_separable_conv=head.use_separable_conv,
        # TFM tests the value's truth: null shares nothing, as False.
        share_level_convs=bool(head.share_level_convs), settings=settings,
        name="head")


@register_serializable
class RPNHead(SettingsBlock):
    """TFM's RPNHead: `head(features)` with features {str(level): [B, h, w, C]} returns
    `(scores, boxes)`: {str(level): [B, h, w, A]} objectness logits and {str(level):
    [B, h, w, 4 * A]} box offsets, A = num_anchors_per_location.

    Args:
      min_level, max_level: the levels read and predicted.
      num_anchors_per_location: A.
      num_convs, num_filters: the shared 3x3 convolutions (each level its own norms).
      use_separable_conv: separable convolutions with Keras's default initializers and no
        kernel regulariser (TFM's); otherwise N(0, 0.01) tower and N(0, 1e-5) predictor
        kernels, regularised.
      settings: normalisation, activation and the kernel regulariser.
    """

    def __init__(self, min_level: int, max_level: int, num_anchors_per_location: int,
                 num_convs: int = 1, num_filters: int = 256, use_separable_conv: bool = False,
                 settings: Optional[NormSettings] = None, **kwargs):
        super().__init__(settings, min_level=min_level, max_level=max_level,
                         num_anchors_per_location=num_anchors_per_location,
                         num_convs=num_convs, num_filters=num_filters,
                         use_separable_conv=use_separable_conv, **kwargs)
        self._levels = list(range(min_level, max_level + 1))
        self._activation = get_activation(self._settings.activation)
        # TFM's order: the convolutions, the norms level by level, then the predictors.
        for i in range(num_convs):
            setattr(self, f"conv_{i}", self._conv(num_filters, 3, 0.01, f"rpn-conv_{i}"))
        for level in self._levels:
            for i in range(num_convs):
                setattr(self, f"norm_{level}_{i}",
                        self._settings.norm(name=f"rpn-conv-norm_{level}_{i}"))
        self.classifier = self._conv(num_anchors_per_location, 1, 1e-5, "rpn-scores")
        self.box_regressor = self._conv(4 * num_anchors_per_location, 1, 1e-5, "rpn-boxes")

    def _conv(self, filters, kernel_size, stddev, name):
        padding = "same" if kernel_size > 1 else "valid"
        if self._args["use_separable_conv"]:
            return keras.layers.SeparableConv2D(filters, kernel_size, padding=padding,
                                                bias_initializer="zeros", name=name)
        return keras.layers.Conv2D(filters, kernel_size, padding=padding,
                                   kernel_initializer=_normal(stddev),
                                   bias_initializer="zeros",
                                   kernel_regularizer=self._settings.kernel_regularizer,
                                   name=name)

    def build(self, input_shape):
        """Builds every sub-layer on {str(level): shape} in `call`'s order, without running
        it."""
        self._walk(_level_shapes(input_shape), *_building)

    def compute_output_shape(self, input_shape):
        return self._walk(_level_shapes(input_shape), *_shapes)

    def call(self, features, training=None):
        return self._walk(features, *_tensor_steps(self._activation, training))

    def _walk(self, features, tower, predict):
        """`call`'s traversal (see `RetinaNetHead._walk`): per level the shared convolutions
        with the level's norms, then the two predictors."""
        scores, boxes = {}, {}
        for level in self._levels:
            x = tower(features[str(level)], [
                layer for i in range(self._args["num_convs"])
                for layer in (getattr(self, f"conv_{i}"), getattr(self, f"norm_{level}_{i}"))])
            scores[str(level)] = predict(x, self.classifier)
            boxes[str(level)] = predict(x, self.box_regressor)
        return scores, boxes


def build_rpn_head(model_config, settings: NormSettings) -> RPNHead:
    """TFM's factory call of `RPNHead` for a `MaskRCNN` model config (A: num_scales *
    len(aspect_ratios))."""
    anchor = model_config.anchor
    head = model_config.rpn_head
    return RPNHead(min_level=model_config.min_level, max_level=model_config.max_level,
                   num_anchors_per_location=anchor.num_scales * len(anchor.aspect_ratios),
                   num_convs=head.num_convs, num_filters=head.num_filters,
                   use_separable_conv=head.use_separable_conv, settings=settings,
                   name="rpn_head")
