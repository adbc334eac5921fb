"""The detection eval rows of benchmarks/step_vs_tfm.py time what they say (issue 55).

Each row's eval step is the step lite's `Trainer.evaluate` traced and ran, built by
`detection_rows.lite_params_and_task` from the row's overrides (the model shrunk: ResNet-18
for ResNet-50, 128x128 inputs). What TensorFlow runs of it is what its outputs depend on
(`benchmarks/eval_graph.py`): the test fails unless that keeps a convolution, the detection
generator's NMS and, for Mask R-CNN, the mask head. The same rows with the COCO evaluator off
(the rows before 2026-12-06) are seen to fail the check, and the step one `evaluate` call
traced is found and checked as the benchmark checks it (both `release`: more models to build
and run; a toy graph in the suite shows the same pruning). TFM's side is checked by the benchmark
itself (TFM's venv), in each record's `eval_step_graph`.
"""

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import detection_rows  # noqa: E402
import eval_graph  # noqa: E402
import step_vs_tfm  # noqa: E402

# Smaller model, same code path: what the rows build, with these overrides on top.
SHRINK = {"task": {"model": {"input_size": [128, 128, 3]}}}
RESNET18 = {"task": {"model": {"input_size": [128, 128, 3],
                               "backbone": {"resnet": {"model_id": 18}}}}}
SHRUNK = {"retinanet_resnet50_fpn": RESNET18, "retinanet_mobilenetv2_fpn": SHRINK,
          "maskrcnn_resnet50_fpn": RESNET18}


def lite_eval_check(model, data_dir, tmp_path, coco=True, evaluate=False):
    """eval_graph.check of the eval step of `model`'s lite row (shrunk): traced anew, or with
    `evaluate` the very step one `evaluate` call of one step traced and ran (as the row calls
    it, COCO summary included)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    import lite_launcher as ll  # pylint: disable=import-outside-toplevel
    from lite_launcher.core import train_utils  # pylint: disable=import-outside-toplevel

    train_utils.load_builtin_registrations(detection_rows.MODELS[model][0])
    extra = dict(SHRUNK[model])
    if not coco:
        extra = {"task": dict(extra["task"], use_coco_metrics=False)}
    glob = detection_rows.write_synthetic_tfrecords(
        str(data_dir), num_images=2, masks=model in detection_rows.WITH_MASKS)
    params, task = detection_rows.lite_params_and_task(
        model, glob, 1, str(tmp_path / "model"), "float32", eval_steps=1,
        extra_overrides=extra)
    assert params.task.use_coco_metrics is coco
    trainer = ll.create_trainer(params, task, train=False, evaluate=True)
    if evaluate:
        trainer.evaluate(tf.constant(1, tf.int32))
    check = eval_graph.check_trainer(trainer, masks=model in detection_rows.WITH_MASKS,
                                     timed=evaluate)
    assert check["traced_again"] is not evaluate
    return check


# RetinaNet ResNet-50 FPN runs RetinaNetTask's eval step as MobileNetV2 FPN does (another
# backbone): `release`, its sibling the MobileNetV2 row (the suite's budget).
RETINANET_SIBLING = ("tests/test_detection_eval_rows.py::test_each_eval_row_step_keeps_the_"
                     "model_the_nms_and_the_masks[retinanet_mobilenetv2_fpn]")
ROWS = [pytest.param(model, marks=pytest.mark.release(sibling=RETINANET_SIBLING))
        if model == "retinanet_resnet50_fpn" else model for model in sorted(detection_rows.MODELS)]


@pytest.mark.parametrize("model", ROWS)
def test_each_eval_row_step_keeps_the_model_the_nms_and_the_masks(model, tmp_path_factory,
                                                                  tmp_path):
    data_dir = tmp_path_factory.mktemp("records")
    check = lite_eval_check(model, data_dir, tmp_path)
    assert check["ok"], check["missing"]
    assert check["convolutions"] > 0 and check["nms"]
    assert all(scope in name for name in check["nms"] for scope in ("detection_generator",))
    if model in detection_rows.WITH_MASKS:
        # The mask head's convolutions (4 + the logits) and its upsampling, not the rest.
        assert 0 < check["mask_convolutions"] < check["convolutions"]
        assert check["op_types"].get("Conv2DBackpropInput") == 1
    else:
        assert check["mask_convolutions"] == 0
    # Every row's records are consumed by the evaluator (the row's overrides, not the shrink).
    assert detection_rows.overrides(model, "/d/*", 1, eval_steps=1)["task"][
        "use_coco_metrics"] is True


MASKRCNN_SIBLING = ("tests/test_detection_eval_rows.py::test_each_eval_row_step_keeps_the_"
                    "model_the_nms_and_the_masks[maskrcnn_resnet50_fpn]")


@pytest.mark.release(sibling=MASKRCNN_SIBLING)
def test_the_step_evaluate_ran_is_the_one_checked_and_keeps_nms_and_masks(tmp_path_factory,
                                                                          tmp_path):
    # The benchmark checks the step its evaluate() calls traced (no new trace): the same here.
    check = lite_eval_check("maskrcnn_resnet50_fpn", tmp_path_factory.mktemp("records"),
                            tmp_path, evaluate=True)
    assert check["ok"] and check["traced_again"] is False


@pytest.mark.release(sibling=MASKRCNN_SIBLING)
def test_the_check_fails_the_rows_as_they_were_with_the_evaluator_off(tmp_path_factory,
                                                                      tmp_path):
    data_dir = tmp_path_factory.mktemp("records")
    # RetinaNet: the losses keep backbone and heads, nothing keeps decoding and NMS.
    retinanet = lite_eval_check("retinanet_mobilenetv2_fpn", data_dir, tmp_path / "r",
                                coco=False)
    assert retinanet["missing"] == ["nms"] and retinanet["convolutions"] > 0
    assert retinanet["pruned_op_types"].get("StatelessWhile", 0) >= 1
    # Mask R-CNN: the loss is a constant 0, so no convolution is kept at all.
    maskrcnn = lite_eval_check("maskrcnn_resnet50_fpn", data_dir, tmp_path / "m", coco=False)
    assert maskrcnn["missing"] == ["convolution", "nms", "mask head"]
    assert maskrcnn["convolutions"] == 0 and maskrcnn["pruned_op_types"]["Conv2D"] > 0


def test_step_ops_follows_outputs_and_control_outputs_only():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    counter = tf.Variable(0.0)

    @tf.function
    def step(x):
        with tf.name_scope("detection_generator"):
            boxes = tf.image.non_max_suppression(x, tf.ones([x.shape[0]]), 2)
        conv = tf.nn.conv2d(tf.ones([1, 4, 4, 1]), tf.ones([1, 1, 1, 1]), 1, "SAME")
        counter.assign_add(tf.reduce_sum(conv))  # a stateful op: kept, and what it reads
        return {"unused": tf.constant(0.0)} if x.shape[0] == 4 else {"boxes": boxes}

    kept = eval_graph.step_ops(step.get_concrete_function(tf.zeros([4, 4])))
    check = eval_graph.check(kept)
    assert check["missing"] == ["nms"] and check["convolutions"] == 1
    kept = eval_graph.step_ops(step.get_concrete_function(tf.zeros([5, 4])))
    check = eval_graph.check(kept, masks=True)
    assert check["missing"] == ["mask head"] and check["nms"]


def test_the_report_names_a_side_whose_eval_step_is_pruned():
    rounds = [{"order": ["lite", "tfm"], "loadavg": [1.0] * 3,
               "ms_per_step": {"lite": {"train": 10.0, "eval": 5.0},
                               "tfm": {"train": 10.0, "eval": 6.0}}}]
    record = {"model": "retinanet_resnet50_fpn", "dtype": "float32", "rounds": rounds,
              "eval_step_graph": {"lite": {"ok": True, "missing": []},
                                  "tfm": {"ok": False, "missing": ["nms"]}}}
    text = step_vs_tfm.render({"rounds": 1, "records": [record]})
    assert "- retinanet_resnet50_fpn float32: tfm's eval step does not keep nms" in text
    assert "lite's eval step" not in text
