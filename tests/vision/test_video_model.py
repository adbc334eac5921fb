"""Video classification configs and models against TFM 2.20: the six experiments' values, every
config class's defaults, parameter counts of every experiment and every 3D ResNet model id,
and TFM-written checkpoints restored to TFM's logits (tests/vision/data/
make_tfm_video_reference.py wrote the numbers in TFM's venv)."""

import json
import os

import keras
import numpy as np
import pytest

import lite_launcher as ll
from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.configs import backbones_3d
from lite_launcher.vision.configs import video_classification as configs
from tfm_compare import as_plain_dict, differences

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
with open(os.path.join(DATA, "tfm_video_reference.json")) as _f:
    TFM = json.load(_f)
VIDEO = os.path.join(DATA, "tfm_video")
with open(os.path.join(VIDEO, "index.json")) as _f:
    SMALL = json.load(_f)
EXPERIMENTS = sorted(TFM["experiments"])


def test_the_six_experiments_are_registered_and_listed():
    assert len(EXPERIMENTS) == 6
    assert set(EXPERIMENTS) <= set(ll.registered_experiments())
    from lite_launcher.common import builtin_experiments
    assert all(builtin_experiments.BUILTIN_EXPERIMENTS[name] ==
               "lite_launcher.vision.configs.video_classification" for name in EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_values_are_tfm_s(name):
    config = ll.get_exp_config(name)
    config.validate() if config.task.train_data.num_classes > 0 else None
    missing, different = differences(TFM["experiments"][name],
                                     as_plain_dict(config, "task", "trainer", "runtime"))
    assert not missing, missing
    assert not different, different


DEFAULTS = {
    "DataConfig": configs.DataConfig, "VideoClassificationModel":
    configs.VideoClassificationModel, "Losses": configs.Losses, "Metrics": configs.Metrics,
    "VideoClassificationTask": configs.VideoClassificationTask,
    "ResNet3DBlock": backbones_3d.ResNet3DBlock, "ResNet3D": backbones_3d.ResNet3D,
    "ResNet3D50": backbones_3d.ResNet3D50, "ResNet3DRS": backbones_3d.ResNet3DRS,
    "Backbone3D/resnet_3d": lambda: backbones_3d.Backbone3D(type="resnet_3d"),
    "Backbone3D/resnet_3d_rs": lambda: backbones_3d.Backbone3D(type="resnet_3d_rs"),
}


def test_every_config_class_has_tfm_s_fields_and_defaults():
    assert sorted(DEFAULTS) == sorted(TFM["defaults"])
    for name, make in DEFAULTS.items():
        tfm = TFM["defaults"][name]
        lite = json.loads(json.dumps(make().as_dict(), default=list))
        missing, different = differences(tfm, lite, name)
        assert not missing and not different, (missing, different)
        # No field TFM lacks (the task's base fields are TFM's TaskConfig's too).
        assert set(lite) <= set(tfm), sorted(set(lite) - set(tfm))


def test_a_general_experiment_without_num_classes_is_refused_in_one_line():
    from lite_launcher.vision.configs.video_classification import check_buildable
    config = ll.get_exp_config("video_classification")
    config.validate()
    with pytest.raises(ConfigError, match=r"task.train_data.num_classes \(-1\)"):
        check_buildable(config.task)


@pytest.mark.parametrize("override, match", [
    ({"train_data": {"num_classes": 3}}, "must be equal"),
    ({"model": {"backbone": {"resnet_3d": {"block_specs": [
        {"temporal_kernel_sizes": [3]}] * 4}}}}, r"block_specs\[0\].temporal_kernel_sizes has 1"),
    ({"model": {"backbone": {"resnet_3d": {"model_id": 34}}}}, "model_id 34 is not one of"),
    ({"model": {"require_endpoints": ["6"]}}, "endpoints are '2', '3', '4', '5'"),
    ({"validation_data": {"num_test_crops": 2}}, "num_test_crops"),
    ({"train_data": {"compressed_input": True}}, "compressed_input = True is not implemented"),
    ({"train_data": {"file_type": "tfrecord_compressed"}}, "file_type"),
])
def test_bad_values_are_refused_naming_the_field(override, match):
    config = ll.get_exp_config("video_classification_kinetics400")
    config.task.override(override)
    with pytest.raises(ConfigError, match=match):
        config.validate()


# ----- parameter counts ---------------------------------------------------------------------


def _counts(model):
    return {"params": model.count_params(),
            "trainable_params": sum(int(np.prod(w.shape)) for w in model.trainable_weights),
            "backbone_params": model.backbone.count_params(), "l2_terms": len(model.losses)}


@pytest.fixture(scope="module")
def kinetics_backbone():
    """ResNet3D-50 with the Kinetics experiments' norm and L2 (all five ResNet3D-50
    experiments share it: they differ in the number of classes only)."""
    from lite_launcher.vision.modeling import video_classification_model as vcm
    config = ll.get_exp_config("video_classification_kinetics400")
    model = vcm.build_video_classification_model(
        vcm.feature_shape(config.task), config.task.model, 400,
        config.task.losses.l2_weight_decay)
    return model


def test_kinetics400_model_has_tfm_s_counts(kinetics_backbone):
    assert _counts(kinetics_backbone) == TFM["counts"]["video_classification_kinetics400"]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_resnet3d50_experiment_has_tfm_s_counts(name, kinetics_backbone):
    """The head on the shared backbone for each experiment's classes and input (the general
    experiment with TFM's generator's 10 classes; its L2 terms, none without weight decay,
    are not compared: the shared backbone carries the Kinetics L2)."""
    from lite_launcher.vision.modeling import video_classification_model as vcm
    config = ll.get_exp_config(name)
    task = config.task
    num_classes = task.train_data.num_classes if task.train_data.num_classes > 0 else 10
    model = vcm.VideoClassificationModel(
        kinetics_backbone.backbone, num_classes, vcm.feature_shape(task),
        dropout_rate=task.model.dropout_rate,
        kernel_regularizer=keras.regularizers.L2(task.losses.l2_weight_decay / 2)
        if task.losses.l2_weight_decay else None)
    expected, counts = dict(TFM["counts"][name]), _counts(model)
    if name == "video_classification":
        assert expected.pop("l2_terms") == 0 and task.losses.l2_weight_decay == 0
        counts.pop("l2_terms")
    assert counts == expected


def _block_sum(config, repeat_kernel_sizes, input_channels=3):
    """The parameters of a 3D ResNet from its stem and block plan: each distinct block built
    once (on its input width, never called) and counted per use."""
    from lite_launcher.vision.modeling.backbones import resnet_3d
    from lite_launcher.vision.modeling.layers.nn_layers import NormSettings
    # Zeros: only the shapes are counted (random draws for ~100M weights take seconds).
    settings = NormSettings(kernel_initializer="zeros")
    inputs = keras.Input((None, None, None, input_channels))
    total = keras.Model(inputs, resnet_3d.stem(inputs, config, settings)).count_params()
    channels, built = 64, _block_sum.cache
    for _, _, block_cls, kwargs in resnet_3d.block_plan(config, repeat_kernel_sizes):
        key = (channels, tuple(sorted(kwargs.items())))
        if key not in built:
            block = block_cls(settings=settings, **kwargs)
            block.build((None, None, None, None, channels))
            built[key] = block.count_params()
        total += built[key]
        channels = 4 * kwargs["filters"]
    return total


_block_sum.cache = {}


def test_every_model_id_of_both_backbones_has_tfm_s_count():
    ids = sorted(configs.RESNET_3D_MODEL_IDS)
    assert ids == sorted(int(k.split("/")[1]) for k in TFM["backbones"]
                         if k.startswith("resnet_3d/"))
    for model_id in ids:
        plan = [configs.ResNet3DBlock(**spec) for spec in TFM["backbone_overrides"][
            str(model_id)]]
        plain = configs.ResNet3D50(model_id=model_id, block_specs=tuple(plan))
        plain.check("resnet_3d")
        assert _block_sum(plain, False) == TFM["backbones"][f"resnet_3d/{model_id}"], model_id
        rs = configs.ResNet3DRS(model_id=model_id)
        rs.check("resnet_3d_rs", True)
        assert _block_sum(rs, True) == TFM["backbones"][f"resnet_3d_rs/{model_id}"], model_id


def test_the_block_sum_counts_a_built_backbone(kinetics_backbone):
    """The per-block count above adds up to the whole built ResNet3D-50 (so it counts what a
    build makes)."""
    config = ll.get_exp_config("video_classification_kinetics400").task.model.backbone
    assert _block_sum(config.resnet_3d, False) == kinetics_backbone.backbone.count_params()


# ----- TFM checkpoints ----------------------------------------------------------------------


def small_config(name, monkeypatch):
    """The experiment of SMALL[name] with its overrides, TFM's tiny model id registered."""
    from lite_launcher.vision.modeling.backbones import resnet_3d
    entry = SMALL[name]
    for model_id, specs in entry["resnet_3d_specs"].items():
        monkeypatch.setitem(resnet_3d.RESNET_SPECS, int(model_id), [tuple(s) for s in specs])
        monkeypatch.setitem(backbones_3d.RESNET_3D_REPEATS, int(model_id),
                            tuple(s[2] for s in specs))
    config = ll.get_exp_config(entry["experiment"])
    config.task.override(entry["task"], is_strict=True)
    data = {"num_classes": entry["num_classes"], "feature_shape": entry["clip"]}
    config.task.override({"train_data": data,
                          "validation_data": dict(data, num_test_clips=2)}, is_strict=True)
    config.task.init_checkpoint = os.path.join(VIDEO, name)
    config.validate()
    return config


@pytest.mark.parametrize("name", sorted(SMALL))
def test_tfm_checkpoint_restores_to_tfm_s_logits_and_features(name, monkeypatch):
    from lite_launcher.vision.tasks.video_classification import VideoClassificationTask
    config = small_config(name, monkeypatch)
    task = VideoClassificationTask(config.task)
    model = task.build_model()
    assert model.count_params() == SMALL[name]["params"]
    task.initialize(model)
    ref = np.load(os.path.join(VIDEO, name, "reference.npz"))
    logits = model({"image": ref["clips"]}, training=False)
    np.testing.assert_allclose(logits, ref["logits"], atol=1e-5, rtol=1e-5)
    features = model.backbone(ref["clips"], training=False)
    for level in "2345":
        np.testing.assert_allclose(features[level], ref[f"features_{level}"], atol=1e-5)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_losses_metrics_and_view_averaging_equal_tfm_s(name, monkeypatch):
    """On the restored model: TFM's task loss (softmax, label smoothing, L2 terms), its sparse
    loss, its multi-label per-clip losses (summed: what TFM differentiates) and its
    `inference_step` averaging 2 clips x 1 crop."""
    import tensorflow as tf
    from lite_launcher.vision.tasks.video_classification import VideoClassificationTask
    config = small_config(name, monkeypatch)
    task = VideoClassificationTask(config.task)
    model = task.build_model()
    task.initialize(model)
    ref = np.load(os.path.join(VIDEO, name, "reference.npz"))
    probs = tf.nn.softmax(ref["logits"])
    one_hot = tf.one_hot(ref["labels"], SMALL[name]["num_classes"])
    loss = task.build_losses(one_hot, probs, aux_losses=model.losses)
    np.testing.assert_allclose(loss, ref["loss"], rtol=1e-5)
    assert len(model.losses) > 0  # the L2 terms are in it
    np.testing.assert_allclose(task.inference_step({"image": ref["clips"]}, model),
                               ref["views_probs"], atol=1e-6)
    sparse = VideoClassificationTask(config.task.replace(losses={"one_hot": False}))
    np.testing.assert_allclose(sparse.build_losses(ref["labels"], probs), ref["sparse_loss"],
                               rtol=1e-5)
    multilabel = VideoClassificationTask(config.task.replace(
        train_data={"is_multilabel": True}))
    np.testing.assert_allclose(
        multilabel.build_losses(ref["multi_labels"], tf.sigmoid(ref["logits"])),
        ref["multilabel_loss"].sum(), rtol=1e-5)
    names = [m.name for m in multilabel.build_metrics()]
    assert names == ["accuracy", "top_1_accuracy", "top_5_accuracy", "ROC-AUC",
                     "RecallAtPrecision95", "PR-AUC"]
    assert [m.name for m in sparse.build_metrics()] == names[:3]


def test_freeze_backbone_and_backbone_only_init(monkeypatch):
    """`freeze_backbone` leaves the dense layer trainable alone; `init_checkpoint_modules:
    backbone` restores the backbone's TFM weights and leaves the head's initial ones."""
    from lite_launcher.vision.tasks.video_classification import VideoClassificationTask
    config = small_config("resnet3d_tiny", monkeypatch)
    frozen = VideoClassificationTask(config.task.replace(freeze_backbone=True)).build_model()
    assert [w.path for w in frozen.trainable_weights] == ["logits/kernel", "logits/bias"]
    task = VideoClassificationTask(config.task.replace(init_checkpoint_modules="backbone"))
    model = task.build_model()
    head = [w.numpy() for w in model.get_layer("logits").weights]
    task.initialize(model)
    ref = np.load(os.path.join(VIDEO, "resnet3d_tiny", "reference.npz"))
    features = model.backbone(ref["clips"], training=False)
    np.testing.assert_allclose(features["5"], ref["features_5"], atol=1e-5)
    for before, after in zip(head, model.get_layer("logits").weights):
        np.testing.assert_array_equal(before, after.numpy())


# ----- TFM's YAML ---------------------------------------------------------------------------

TFM_YAML = os.path.join(DATA, "k400_resnet3drs_50_tpu.yaml")


def _stripped_yaml(tmp_path):
    """TFM's YAML without its `num_channels` and `file_type` lines (see tfm_video_reference)."""
    lines = [line for line in open(TFM_YAML).read().splitlines(keepends=True)
             if not line.strip().startswith(("num_channels:", "file_type:"))]
    path = tmp_path / "k400_resnet3drs_50.yaml"
    path.write_text("".join(lines))
    return str(path)


def test_tfm_yaml_without_its_two_stray_keys_loads_with_tfm_s_values(tmp_path):
    from lite_launcher.core.base_config import load_config_file
    config = ll.get_exp_config("video_classification_kinetics400")
    config.override(load_config_file(_stripped_yaml(tmp_path)), is_strict=True)
    config.validate()
    assert config.task.train_data.feature_shape == (32, 224, 224, 3)  # !!python/tuple
    assert isinstance(config.task.validation_data.feature_shape, tuple)
    missing, different = differences(TFM["yaml"]["stripped"],
                                     as_plain_dict(config, "task", "trainer", "runtime"))
    assert not missing and not different, (missing, different)


def test_tfm_yaml_as_shipped_is_refused_in_one_line_naming_the_key(tmp_path):
    """TFM 2.20 stops on it with a KeyError traceback (`num_channels`); lite with exit 2."""
    from cli import run_lite_train_in_process
    assert "num_channels" in TFM["yaml"]["shipped_error"]
    run = run_lite_train_in_process(
        "--experiment", "video_classification_kinetics400", "--config_file", TFM_YAML,
        "--mode", "train", "--model_dir", str(tmp_path / "model"))
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "num_channels" in lines[0], run.stderr
    # Without num_channels, its file_type (sstable) is the next refusal, also one line.
    text = open(TFM_YAML).read().replace("    num_channels: 3\n", "")
    (tmp_path / "no_channels.yaml").write_text(text)
    run = run_lite_train_in_process(
        "--experiment", "video_classification_kinetics400", "--config_file",
        str(tmp_path / "no_channels.yaml"), "--mode", "train",
        "--model_dir", str(tmp_path / "model"))
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and "file_type 'sstable'" in lines[0], lines
    assert not os.path.exists(tmp_path / "model" / "checkpoint")


def test_other_python_yaml_tags_are_refused_in_one_line_and_never_run(tmp_path):
    from cli import run_lite_train_in_process
    marker = tmp_path / "ran"
    config = tmp_path / "evil.yaml"
    config.write_text(f"task: !!python/object/apply:os.system ['touch {marker}']\n")
    run = run_lite_train_in_process(
        "--experiment", "video_classification_kinetics400", "--config_file", str(config),
        "--mode", "train", "--model_dir", str(tmp_path / "model"))
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "!!python/object/apply:os.system is refused" in lines[0]
    assert not marker.exists()


def test_keras_file_round_trips_the_video_model(monkeypatch, tmp_path):
    """Every 3D block has get_config: `.keras` save / load gives the same logits."""
    from lite_launcher.vision.tasks.video_classification import VideoClassificationTask
    config = small_config("resnet3drs_tiny", monkeypatch)
    model = VideoClassificationTask(config.task).build_model()
    ref = np.load(os.path.join(VIDEO, "resnet3drs_tiny", "reference.npz"))
    path = str(tmp_path / "video.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded({"image": ref["clips"]}, training=False),
                               model({"image": ref["clips"]}, training=False), atol=1e-6)
    assert loaded.count_params() == model.count_params()


def test_input_image_size_takes_frames_height_width_for_video_only(monkeypatch):
    from lite_launcher.commands.export import parse_image_size
    from lite_launcher.vision.serving import video_classification as serving
    from lite_launcher.vision.tasks.video_classification import VideoClassificationTask
    assert parse_image_size("16,224,224") == [16, 224, 224]
    with pytest.raises(ConfigError, match="or three for video, frames,height,width"):
        parse_image_size("16,224,224,3")
    task = VideoClassificationTask(small_config("resnet3d_tiny", monkeypatch).task)
    module = serving.VideoClassificationModule(task, None, "image_tensor",
                                               input_image_size=[16, 40, 48])
    assert module.input_spec().shape.as_list() == [None, 16, 40, 48, 3]
    assert serving.VideoClassificationModule(task, None, "tf_example").input_spec().shape \
        .as_list() == [None]
    with pytest.raises(ConfigError, match="must be three positive integers for video"):
        serving.VideoClassificationModule(task, None, "image_tensor", input_image_size=[40, 48])
    with pytest.raises(ConfigError, match="'image_bytes' is not served by video"):
        serving.VideoClassificationModule(task, None, "image_bytes")
