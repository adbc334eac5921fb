"""RetinaNet's training losses from model outputs and parser labels, as TFM's
`tasks/retinanet.py` `RetinaNetTask.build_losses` computes them, in one function the task
calls.

Both losses are sums normalised by the number of positive anchors in the (per-replica) batch
plus one: `cls_loss = sum(focal * cls_weights) / (P + 1)` over anchors and classes, and
`box_loss = sum(mean_4(huber) * box_weights) / (P + 1)` (P = sum of `box_weights`).
Ignored anchors have class weight 0; negatives and ignored ones have box weight 0.
"""

import dataclasses

import tensorflow as tf

from lite_launcher.vision.losses import focal_loss


@dataclasses.dataclass(frozen=True)
class AttributeHead:
    """An attribute head's loss: `type` 'regression' (Huber, delta 1) or 'classification'
    (focal, int targets of `size` classes)."""
    name: str
    type: str = "regression"
    size: int = 1


def multi_level_flatten(multi_level_inputs, last_dim=None):
    """Dict level -> [B, h_l, w_l, ...] -> [B, sum of anchors] (or [B, ..., last_dim]),
    concatenated in the dict's order."""
    flattened = []
    for values in multi_level_inputs.values():
        batch_size = values.shape[0] or tf.shape(values)[0]
        shape = [batch_size, -1] if last_dim is None else [batch_size, -1, last_dim]
        flattened.append(tf.reshape(values, shape))
    return tf.concat(flattened, axis=1)


def huber_loss(y_true, y_pred, delta):
    """Huber loss averaged over the last axis (Keras's `huber`): 0.5 e^2 for |e| <= delta,
    delta * |e| - 0.5 delta^2 beyond."""
    error = tf.cast(y_pred, tf.float32) - tf.cast(y_true, tf.float32)
    abs_error = tf.abs(error)
    delta = tf.cast(delta, tf.float32)
    loss = tf.where(abs_error <= delta, 0.5 * tf.square(error),
                    delta * abs_error - 0.5 * tf.square(delta))
    return tf.reduce_mean(loss, axis=-1)


def _attribute_loss(heads, outputs, labels, box_weights, alpha, gamma):
    total = 0.0
    for head in heads:
        if head.name not in labels.get("attribute_targets", {}):
            raise ValueError(f"attribute {head.name!r} is not in the labels' attribute_targets")
        if head.name not in outputs.get("attribute_outputs", {}):
            raise ValueError(f"attribute {head.name!r} is not in the model's attribute_outputs")
        y_pred = multi_level_flatten(outputs["attribute_outputs"][head.name], head.size)
        if head.type == "regression":
            y_true = multi_level_flatten(labels["attribute_targets"][head.name], head.size)
            per_anchor = huber_loss(y_true, y_pred, 1.0)
        elif head.type == "classification":
            y_true = tf.one_hot(
                tf.cast(multi_level_flatten(labels["attribute_targets"][head.name]), tf.int32),
                head.size)
            per_element = focal_loss.sigmoid_focal_loss(y_true, y_pred, alpha, gamma)
            total += tf.reduce_sum(per_element * box_weights[..., None])
            continue
        else:
            raise ValueError(f"attribute {head.name!r} has type {head.type!r}; use "
                             f"'regression' or 'classification'")
        total += tf.reduce_sum(per_anchor * box_weights)
    return total


def retinanet_losses(outputs, labels, *, num_classes, focal_loss_alpha=0.25,
                     focal_loss_gamma=1.5, huber_loss_delta=0.1, box_loss_weight=50,
                     loss_weight=1.0, aux_losses=None, attribute_heads=()):
    """TFM's RetinaNet losses (defaults are TFM's `Losses` config).

    Args:
      outputs: `cls_outputs` (level -> [B, h, w, A * num_classes] logits), `box_outputs`
        (level -> [B, h, w, A * 4]) and, with attribute heads, `attribute_outputs`.
      labels: `cls_targets` (level -> [B, h, w, A] int, -1 = no class), `box_targets`
        (level -> [B, h, w, A * 4]), `cls_weights` and `box_weights` ([B, num_anchors]),
        and `attribute_targets` with attribute heads.
      aux_losses: the model's regularisation losses (L2), summed into `total_loss`.
      attribute_heads: `AttributeHead`s whose losses join `model_loss`.

    Returns:
      dict of scalars: `total_loss` (= loss_weight * (model_loss + sum(aux_losses))),
      `cls_loss`, `box_loss`, `model_loss` (= cls_loss + box_loss_weight * box_loss +
      attribute losses).
    """
    box_weights = tf.cast(labels["box_weights"], tf.float32)
    num_positives = tf.reduce_sum(box_weights) + 1.0
    cls_weights = tf.cast(labels["cls_weights"], tf.float32) / num_positives
    box_weights = box_weights / num_positives

    y_true_cls = tf.one_hot(tf.cast(multi_level_flatten(labels["cls_targets"]), tf.int32),
                            num_classes)
    y_pred_cls = multi_level_flatten(outputs["cls_outputs"], num_classes)
    per_element = focal_loss.sigmoid_focal_loss(y_true_cls, y_pred_cls, focal_loss_alpha,
                                                focal_loss_gamma)
    cls_loss = tf.reduce_sum(per_element * cls_weights[..., None])

    y_true_box = multi_level_flatten(labels["box_targets"], 4)
    y_pred_box = multi_level_flatten(outputs["box_outputs"], 4)
    box_loss = tf.reduce_sum(huber_loss(y_true_box, y_pred_box, huber_loss_delta) * box_weights)

    model_loss = cls_loss + box_loss_weight * box_loss
    if attribute_heads:
        model_loss += _attribute_loss(attribute_heads, outputs, labels, box_weights,
                                      focal_loss_alpha, focal_loss_gamma)
    total_loss = model_loss
    if aux_losses:
        total_loss = model_loss + tf.reduce_sum(aux_losses)
    return {"total_loss": loss_weight * total_loss, "cls_loss": cls_loss,
            "box_loss": box_loss, "model_loss": model_loss}
