"""What an eval step really runs: the ops of its traced graph that TensorFlow keeps.

TensorFlow prunes from a function every op that no output of the function (and no op it must
run, its control outputs) depends on. An eval step whose detections nobody consumes therefore
runs no box decoding and no NMS, and one whose only output is a constant (Mask R-CNN with the
COCO evaluator off: its loss is 0) runs no model at all. `step_ops` walks the traced graph of a
trainer's `eval_step` back from its outputs and control outputs: what it reaches is what runs.
`check` names the work a detection eval row promises (a convolution, the detection
generator's NMS, for Mask R-CNN the mask head) and what of it is missing.

Pure TensorFlow graph code (no lite_launcher, no TFM): `step_vs_tfm.py` runs it on both sides
in TFM's venv and records the result, and tests/test_detection_eval_rows.py runs it on lite's
side in the suite.
"""

import collections

# NMS as a kernel (TensorFlow's NMS ops) or as the tiled while loop of `nms_version: v2`
# (lite's and TFM's `ops/nms.py`) in the scope of the final detections (lite:
# `detection_generator`; TFM: `generate_detections`). The RPN's proposals (`roi_generator`,
# `propose_rois`) run NMS too, but they are not the detections.
NMS_OP_TYPES = ("NonMaxSuppressionV3", "NonMaxSuppressionV4", "NonMaxSuppressionV5",
                "NonMaxSuppressionWithOverlaps", "CombinedNonMaxSuppression")
LOOP_OP_TYPES = ("While", "StatelessWhile")
DETECTION_SCOPES = ("detection_generator", "generate_detections")
CONV_OP_TYPES = ("Conv2D", "DepthwiseConv2dNative", "Conv2DBackpropInput")
# The mask head's layer scope on both sides (lite `mask_head`, TFM `mask_head`); not "mask"
# alone, which every op of `maskrcnn_model` / `mask_rcnn_model` matches.
MASK_SCOPE = "mask_head"


def eval_step_function(trainer):
    """The concrete function of `trainer.eval_step` (lite's or TFM's Trainer) traced on an
    iterator over its eval dataset: the step its `evaluate` calls in a loop."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return tf.function(trainer.eval_step).get_concrete_function(iter(trainer.eval_dataset))


def _traced_step(fn, depth=0):
    """The `tf.function` an eval loop function calls, found in its closure (Orbit's
    `create_loop_fn(tf.function(eval_step))`, lite's `python_loop(tf.function(step))` through
    its `DirectCall`), or None."""
    if depth > 3 or fn is None:
        return None
    if hasattr(fn, "get_concrete_function") and hasattr(fn, "python_function"):
        return fn
    inner = getattr(fn, "fn", None)  # lite's DirectCall
    if inner is not None:
        return _traced_step(inner, depth + 1)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            found = _traced_step(cell.cell_contents, depth + 1)
        except ValueError:  # an empty cell
            continue
        if found is not None:
            return found
    return None


def timed_eval_step_function(trainer):
    """(concrete function, traced_again): the eval step the trainer's `evaluate` has traced and
    called, looked up from its eval loop function (TFM's `_eval_loop_fn`, lite's
    `_eval_loop_fns`) with an iterator of the same kind (no new trace); else traced again."""
    loops = [getattr(trainer, "_eval_loop_fn", None)]
    loops += list((getattr(trainer, "_eval_loop_fns", None) or {}).values())
    for loop in loops:
        step = _traced_step(loop)
        if step is not None:
            return step.get_concrete_function(iter(trainer.eval_dataset)), False
    return eval_step_function(trainer), True


def step_ops(concrete_function):
    """The ops of `concrete_function`'s graph that its outputs or control outputs depend on
    (data and control edges): the ops that survive pruning."""
    graph = concrete_function.graph
    stack = [t.op for t in graph.outputs] + list(graph.control_outputs)
    seen = {}
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return list(seen.values())


def _is_nms(op):
    return (op.type in NMS_OP_TYPES or op.type in LOOP_OP_TYPES) and any(
        scope in op.name for scope in DETECTION_SCOPES)


def check(ops, masks=False, all_ops=None):
    """{"ok", "missing", "convolutions", "nms", "mask_convolutions", "op_types"} of the kept
    `ops`: ok when a convolution and the detection generator's NMS (and with `masks` a
    convolution under a mask scope) are kept. With `all_ops` (every op of the graph),
    "pruned_op_types" counts what was traced but is not kept."""
    convolutions = [op for op in ops if op.type in CONV_OP_TYPES]
    nms = sorted(op.name for op in ops if _is_nms(op))
    mask_convolutions = [op for op in convolutions if MASK_SCOPE in op.name]
    missing = [what for what, present in (("convolution", convolutions), ("nms", nms),
                                          ("mask head", mask_convolutions or not masks))
               if not present]
    result = {"ok": not missing, "missing": missing, "convolutions": len(convolutions),
              "nms": nms, "mask_convolutions": len(mask_convolutions),
              "op_types": dict(sorted(collections.Counter(op.type for op in ops).items()))}
    if all_ops is not None:
        kept = {op.name for op in ops}
        result["pruned_op_types"] = dict(sorted(collections.Counter(
            op.type for op in all_ops if op.name not in kept).items()))
    return result


def check_trainer(trainer, masks=False, timed=False):
    """`check` of `trainer`'s eval step: traced anew, or with `timed` the one its `evaluate`
    calls (after an evaluation; traced anew when not found, "traced_again" says which)."""
    if timed:
        function, traced_again = timed_eval_step_function(trainer)
    else:
        function, traced_again = eval_step_function(trainer), True
    result = check(step_ops(function), masks=masks, all_ops=function.graph.get_operations())
    result["traced_again"] = traced_again
    return result
