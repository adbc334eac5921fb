"""Video classification through the driver's own path (`train_lib.run_experiment`): a tiny 3D
ResNet trains 2 steps, stops, resumes from its checkpoint and trains on to step 3. The resumed
step starts from the restored state: with numpy, its SGD momentum is 0.9 x the restored one
minus lr x the gradient at the restored weights, and the weights moved by it. With
`optimizer_config.ema` the moving averages continue across the restart (numpy's average of
the weights after steps 1, 2 and 3), and the post-evaluation and the export use them: the
evaluation equals one of a model holding numpy's averages, the exported weights are those
averages (`export_lib.restore_for_serving`, the weights `lite-export` writes).

Every training batch is the same: two clips (batch 2, no shuffling) of exactly 4 frames at the
training size with an area-1 crop, and left-right symmetric frames, so the random window, crop
and flip cannot change them; dropout is 0. The gradient of the resumed step can then be taken
here, on the first batch of a fresh input pipeline.

Both tests are `release` (~16 CPU-seconds of tracing for the run and its restart); the suite's
sibling trains, evaluates and exports a tiny 3D ResNet through the same task and driver
(tests/vision/test_video_train.py), and resume and EMA through the driver are in the suite for
the image families (tests/reliability/test_exact_resume.py, tests/vision/test_tfm_checkpoint.py).
"""

import numpy as np
import pytest
import tensorflow as tf

FRAMES, SIZE, NUM_CLASSES, NUM_CLIPS = 4, 32, 3, 2
TINY_ID = 9
TINY_SPECS = [("bottleneck3d", 4, 1), ("bottleneck3d", 8, 1), ("bottleneck3d", 8, 1),
              ("bottleneck3d", 8, 1)]
AVERAGE_DECAY = 0.5
SIBLING = ("tests/vision/test_video_train.py::"
           "test_a_tiny_3d_resnet_trains_evaluates_and_exports_in_bfloat16")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """NUM_CLIPS SequenceExamples in TFM's format of symmetric PNG frames (lossless)."""
    path = str(tmp_path_factory.mktemp("video_resume") / "clips.tfrecord")
    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(path) as writer:
        for label in range(NUM_CLIPS):
            example = tf.train.SequenceExample()
            example.context.feature["clip/label/index"].int64_list.value.append(label)
            encoded = example.feature_lists.feature_list["image/encoded"]
            for _ in range(FRAMES):
                half = rng.integers(0, 256, (SIZE, SIZE // 2, 3), dtype=np.uint8)
                frame = np.concatenate([half, half[:, ::-1]], axis=1)  # flip-invariant
                encoded.feature.add().bytes_list.value.append(tf.io.encode_png(frame).numpy())
            writer.write(example.SerializeToString())
    return path


@pytest.fixture(scope="module")
def tiny_id():
    from lite_launcher.vision.configs import backbones_3d
    from lite_launcher.vision.modeling.backbones import resnet_3d
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(resnet_3d.RESNET_SPECS, TINY_ID, TINY_SPECS)
        patch.setitem(backbones_3d.RESNET_3D_REPEATS, TINY_ID, (1, 1, 1, 1))
        yield TINY_ID


def make_config(records, train_steps, ema=True):
    import lite_launcher as ll
    data = {"input_path": records, "global_batch_size": NUM_CLIPS, "num_classes": NUM_CLASSES,
            "feature_shape": [FRAMES, SIZE, SIZE, 3], "min_image_size": SIZE,
            "input_image_format": "png"}
    config = ll.get_exp_config("video_classification")
    config.override({
        "runtime": {"distribution_strategy": "off", "mixed_precision_dtype": "float32"},
        "task": {
            "model": {"backbone": {"type": "resnet_3d", "resnet_3d": {
                "model_id": TINY_ID, "stem_conv_temporal_kernel_size": 1,
                "stem_conv_temporal_stride": 1, "stem_pool_temporal_stride": 1,
                "block_specs": [{"temporal_kernel_sizes": [k], "use_self_gating": gating}
                                for k, gating in ((3, False), (1, True), (3, False),
                                                  (1, True))]}},
                "dropout_rate": 0.0},
            "losses": {"l2_weight_decay": 1e-4},
            "train_data": dict(data, shuffle_buffer_size=1, aug_min_area_ratio=1.0,
                               aug_min_aspect_ratio=1.0, aug_max_aspect_ratio=1.0),
            "validation_data": dict(data, num_test_clips=1, num_test_crops=1)},
        "trainer": {
            "train_steps": train_steps, "steps_per_loop": 1, "summary_interval": 1,
            "checkpoint_interval": 1, "validation_interval": 100, "validation_steps": 1,
            "optimizer_config": {
                "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
                "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.05}},
                "warmup": {"type": None},
                "ema": ({"average_decay": AVERAGE_DECAY, "dynamic_decay": False}
                        if ema else None)}}})
    config.validate()
    return config


def run(config, model_dir, mode="train"):
    import lite_launcher as ll
    from lite_launcher.core import train_lib
    task = ll.get_task(config.task, logging_dir=model_dir)
    return train_lib.run_experiment(distribution_strategy=tf.distribute.get_strategy(),
                                    task=task, mode=mode, params=config, model_dir=model_dir)


def restored(config, prefix):
    """The task, a model and a built optimizer as the task makes them, read from `prefix`."""
    import lite_launcher as ll
    task = ll.get_task(config.task)
    model = task.build_model()
    optimizer = task.create_optimizer(config.trainer.optimizer_config, config.runtime)
    optimizer.build(model.trainable_variables)
    tf.train.Checkpoint(model=model, optimizer=optimizer).read(prefix).expect_partial()
    return task, model, optimizer


def values(variables):
    return [v.numpy().astype(np.float64) for v in variables]


def numpy_averages(history):
    """The moving averages after each step with a fixed decay; the first step copies."""
    averages = history[0]
    for weights in history[1:]:
        averages = [AVERAGE_DECAY * a + (1 - AVERAGE_DECAY) * w
                    for a, w in zip(averages, weights)]
    return averages


def evaluate(task, model, data_config):
    """The validation loss and accuracy of `model` on the one validation batch."""
    metrics = task.build_metrics(training=False)
    inputs = next(iter(task.build_inputs(data_config)))
    loss = task.validation_step(inputs, model, metrics)[task.loss]
    return float(loss), {m.name: float(m.result()) for m in metrics}


@pytest.fixture(scope="module")
def resumed(records, tiny_id, tmp_path_factory):
    """(model_dir, config, post-evaluation logs): 2 steps, then a resume to 3 with a
    post-evaluation."""
    import keras
    model_dir = str(tmp_path_factory.mktemp("video_resume_run") / "model")
    keras.utils.set_random_seed(0)
    run(make_config(records, 2), model_dir)
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-2")
    config = make_config(records, 3)
    _, eval_logs = run(config, model_dir, mode="train_and_post_eval")
    return model_dir, config, eval_logs


@pytest.mark.release(sibling=SIBLING)
def test_a_resumed_video_run_steps_on_from_the_restored_weights_and_momentum(resumed):
    from lite_launcher.common import keras_adapter
    model_dir, config, _ = resumed
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-3")
    reader = tf.train.load_checkpoint(f"{model_dir}/ckpt-3")
    assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 3
    task, model, optimizer = restored(config, f"{model_dir}/ckpt-2")
    assert int(optimizer.iterations) == 2
    weights = values(model.trainable_variables)
    momentum = values(keras_adapter.slot(optimizer, "momentums", v)
                      for v in model.trainable_variables)
    assert all(np.abs(m).max() > 0 for m in momentum)
    # The gradient of step 3: the restored model on the (always same) training batch.
    inputs = next(iter(task.build_inputs(config.task.train_data)))
    gradients, _, _ = task.compute_gradients(inputs, model, optimizer)
    lr = 0.05
    _, after, after_optimizer = restored(config, f"{model_dir}/ckpt-3")
    assert int(after_optimizer.iterations) == 3
    got_momentum = values(keras_adapter.slot(after_optimizer, "momentums", v)
                          for v in after.trainable_variables)
    for v, m, g, got in zip(model.trainable_variables, momentum, gradients, got_momentum):
        want = 0.9 * m - lr * g.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7, err_msg=v.path)
        # Without the restored momentum the step would be -lr * g alone.
        assert not np.allclose(got, -lr * g.numpy(), rtol=1e-4, atol=1e-7), v.path
    for w, m, got in zip(weights, got_momentum, values(after.trainable_variables)):
        np.testing.assert_allclose(got, w + m, rtol=1e-6, atol=1e-7)


@pytest.mark.release(sibling=SIBLING)
def test_with_ema_the_averages_continue_and_are_evaluated_and_exported(resumed):
    import lite_launcher as ll
    from lite_launcher import optimization
    from lite_launcher.core import export_lib
    model_dir, config, eval_logs = resumed
    history = [values(restored(config, f"{model_dir}/ckpt-{step}")[1].trainable_variables)
               for step in (1, 2, 3)]
    expected = numpy_averages(history)
    # The averages differ from the last weights (a raw model would fail below).
    assert max(np.abs(e - w).max() for e, w in zip(expected, history[-1])) > 1e-4
    _, raw, optimizer = restored(config, f"{model_dir}/ckpt-3")
    for got, want in zip(values(optimization.ema_variables(optimizer)), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)

    # What lite-export serves from this model_dir: the averages (batch-norm statistics as
    # they are: only trainable weights are averaged).
    task = ll.get_task(config.task)
    served = task.build_model()
    assert export_lib.restore_for_serving(task, served, config, f"{model_dir}/ckpt-3")
    for got, want in zip(values(served.trainable_variables), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    for got, want in zip(served.non_trainable_variables, raw.non_trainable_variables):
        np.testing.assert_array_equal(got.numpy(), want.numpy())

    # The post-evaluation of the resumed run evaluated that averaged model, not the raw one.
    loss, metrics = evaluate(task, served, config.task.validation_data)
    assert eval_logs["validation_loss"] == pytest.approx(loss, rel=1e-5)
    assert eval_logs["accuracy"] == metrics["accuracy"]
    raw_loss, _ = evaluate(task, raw, config.task.validation_data)
    assert abs(raw_loss - eval_logs["validation_loss"]) > 1e-4 * abs(raw_loss)
