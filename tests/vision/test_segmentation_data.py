"""Semantic segmentation data, loss and metrics against TFM 2.20's numbers
(tests/vision/data/make_tfm_segmentation_numbers.py wrote them with TFM itself) and numpy."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision import segmentation_input as si
from lite_launcher.vision import segmentation_losses as sl
from lite_launcher.vision import segmentation_metrics as sm

HERE = os.path.dirname(os.path.abspath(__file__))
NUMBERS = np.load(os.path.join(HERE, "data", "tfm_segmentation_numbers.npz"))


def tfm(key):
    return NUMBERS[key]


def tfm_args(key):
    return json.loads(str(NUMBERS[key]))


# ----- loss -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["plain", "gt_dimension", "smoothing", "class_weights", "top_k",
                                  "top_k_resized_labels", "all", "binary_cross_entropy",
                                  "matting"])
def test_loss_equals_tfm(case):
    prefix = "loss/matting_" if case == "matting" else "loss/"
    loss_fn = sl.SegmentationLoss(**tfm_args(f"loss_args/{case}"))
    loss = loss_fn(tf.constant(tfm(prefix + "logits")), tf.constant(tfm(prefix + "masks")))
    assert abs(float(loss) - float(tfm(f"loss/{case}"))) < 1e-6


def test_loss_ignores_ignore_label_pixels():
    # Changing the logits only at ignored pixels does not change the loss (logits at the
    # masks' size, so no resize mixes pixels).
    masks = tfm("loss/masks")
    logits = np.random.default_rng(0).normal(size=masks.shape[:3] + (4,)).astype(np.float32)
    loss_fn = sl.SegmentationLoss(0.1, None, 255, use_groundtruth_dimension=True)
    moved = np.where(masks == 255, logits + 5 * np.arange(4), logits).astype(np.float32)
    assert float(loss_fn(tf.constant(logits), tf.constant(masks))) == pytest.approx(
        float(loss_fn(tf.constant(moved), tf.constant(masks))), abs=1e-6)


def test_loss_rejects_class_weights_of_another_length():
    loss_fn = sl.SegmentationLoss(0.0, [1.0, 2.0], 255, True)
    with pytest.raises(ValueError, match="class_weights has 2 entries; the model has 4"):
        loss_fn(tf.constant(tfm("loss/logits")), tf.constant(tfm("loss/masks")))


# ----- IoU metrics ----------------------------------------------------------------------------

def iou_labels(k):
    return {"masks": tf.constant(tfm(f"iou/masks_{k}")),
            "valid_masks": tf.constant(tfm(f"iou/valid_{k}")),
            "image_info": tf.constant(tfm(f"iou/image_info_{k}"))}


@pytest.mark.parametrize("metric_class", [sm.MeanIoU, sm.PerClassIoU])
@pytest.mark.parametrize("rescale", [False, True])
def test_iou_equals_tfm_after_each_step(metric_class, rescale):
    metric = metric_class(num_classes=4, rescale_predictions=rescale, dtype=tf.float32)
    for k, step in ((1, "one"), (2, "two")):
        metric.update_state(iou_labels(k), tf.constant(tfm(f"iou/logits_{k}")))
        np.testing.assert_allclose(metric.result().numpy(),
                                   tfm(f"iou/{metric_class.__name__}_{rescale}_{step}"),
                                   atol=1e-6, rtol=0)


def numpy_confusion(masks, valid, logits, num_classes):
    predictions = logits.argmax(-1)[..., None]
    cm = np.zeros((num_classes, num_classes))
    np.add.at(cm, (masks[valid].astype(int), predictions[valid]), 1)
    return cm


def full_size_batch(seed, batch=3, size=8, num_classes=4):
    """Logits at the masks' size (so no resize is involved) and masks with ignored pixels."""
    rng = np.random.default_rng(seed)
    masks = rng.integers(0, num_classes, (batch, size, size, 1)).astype(np.float32)
    masks[rng.random(masks.shape) < 0.15] = 255
    logits = rng.normal(size=(batch, size, size, num_classes)).astype(np.float32)
    info = np.tile(np.array([[size, size], [size, size], [1, 1], [0, 0]], np.float32),
                   (batch, 1, 1))
    return masks, masks != 255, logits, info


def as_labels(masks, valid, info):
    return {"masks": tf.constant(masks), "valid_masks": tf.constant(valid),
            "image_info": tf.constant(info)}


def numpy_iou(cm):
    tp = np.diag(cm)
    union = cm.sum(0) + cm.sum(1) - tp
    return np.where(union > 0, tp / np.maximum(union, 1), 0.0), union > 0


@pytest.mark.parametrize("rescale", [False, True])
def test_two_update_states_equal_one_on_the_concatenation_and_numpy(rescale):
    first, second = full_size_batch(1), full_size_batch(2)
    both = [np.concatenate(pair) for pair in zip(first, second)]
    stepwise = sm.PerClassIoU(num_classes=4, rescale_predictions=rescale)
    for masks, valid, logits, info in (first, second):
        stepwise.update_state(as_labels(masks, valid, info), tf.constant(logits))
    at_once = sm.PerClassIoU(num_classes=4, rescale_predictions=rescale)
    at_once.update_state(as_labels(both[0], both[1], both[3]), tf.constant(both[2]))
    np.testing.assert_array_equal(stepwise.total_cm.numpy(), at_once.total_cm.numpy())
    cm = numpy_confusion(both[0], both[1], both[2], 4)
    np.testing.assert_array_equal(at_once.total_cm.numpy(), cm)
    iou, present = numpy_iou(cm)
    np.testing.assert_allclose(stepwise.result().numpy(), iou, atol=1e-6)
    mean_iou = sm.MeanIoU(num_classes=4, rescale_predictions=rescale)
    mean_iou.update_state(as_labels(both[0], both[1], both[3]), tf.constant(both[2]))
    assert float(mean_iou.result()) == pytest.approx(iou[present].mean(), abs=1e-6)


def test_reset_state_starts_a_new_evaluation():
    masks, valid, logits, info = full_size_batch(3)
    metric = sm.PerClassIoU(num_classes=4)
    metric.update_state(as_labels(masks, valid, info), tf.constant(logits))
    metric.reset_state()
    assert metric.total_cm.numpy().sum() == 0
    metric.update_state(as_labels(masks, valid, info), tf.constant(logits))
    assert metric.total_cm.numpy().sum() == valid.sum()


def test_iou_sums_over_two_mirrored_replicas():
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    assert len(devices) == 2, "tests/conftest.py sets up two logical CPUs"
    strategy = tf.distribute.MirroredStrategy(devices)
    first, second = full_size_batch(4), full_size_batch(5)
    with strategy.scope():
        metric = sm.PerClassIoU(num_classes=4)

    def per_replica(context):
        masks, valid, logits, info = (first, second)[context.replica_id_in_sync_group]
        return as_labels(masks, valid, info), tf.constant(logits)

    labels, logits = strategy.experimental_distribute_values_from_function(per_replica)
    strategy.run(tf.function(metric.update_state), args=(labels, logits))
    both = [np.concatenate(pair) for pair in zip(first, second)]
    np.testing.assert_array_equal(metric.total_cm.numpy(),
                                  numpy_confusion(both[0], both[1], both[2], 4))
    one_device = sm.PerClassIoU(num_classes=4)
    one_device.update_state(as_labels(both[0], both[1], both[3]), tf.constant(both[2]))
    np.testing.assert_allclose(metric.result().numpy(), one_device.result().numpy(), atol=0)


def test_counts_stay_exact_past_float32_integers():
    # 2**24 pixels of class 0 already counted (set directly: a 4096x4096 batch took 10 s),
    # then one more: a float32 count would stay at 2**24.
    metric = sm.MeanIoU(num_classes=2)
    metric.total_cm.assign([[2.0 ** 24, 0.0], [0.0, 0.0]])
    one = {"masks": tf.zeros([1, 1, 1, 1]), "valid_masks": tf.ones([1, 1, 1, 1], bool),
           "image_info": tf.zeros([1, 4, 2])}
    metric.update_state(one, tf.constant([[[[1.0, 0.0]]]]))
    assert int(metric.total_cm.numpy()[0, 0]) == 2 ** 24 + 1


def test_rescaled_predictions_count_only_the_original_image():
    # Ground truth padded with a valid class (not ignore_label): with rescale_predictions only
    # the original 5x6 image of each 8x8 mask is counted, as TFM masks by image_info.
    masks, valid, logits, _ = full_size_batch(6)
    valid = np.ones_like(valid)
    masks = np.where(masks == 255, 1, masks).astype(np.float32)
    info = np.tile(np.array([[5, 6], [8, 8], [1, 1], [0, 0]], np.float32), (3, 1, 1))
    metric = sm.PerClassIoU(num_classes=4, rescale_predictions=True)
    metric.update_state(as_labels(masks, valid, info), tf.constant(logits))
    np.testing.assert_array_equal(
        metric.total_cm.numpy(),
        numpy_confusion(masks[:, :5, :6], valid[:, :5, :6], logits[:, :5, :6], 4))


def test_metric_config_round_trips():
    metric = sm.PerClassIoU(num_classes=5, rescale_predictions=True, name="per_class_iou")
    clone = sm.PerClassIoU.from_config(metric.get_config())
    assert (clone.num_classes, clone.name, clone.get_config()["rescale_predictions"]) == (
        5, "per_class_iou", True)


# ----- parser ---------------------------------------------------------------------------------

def png(array):
    if array.ndim == 2:
        array = array[..., None]
    return tf.io.encode_png(array).numpy()


def record(image, mask, extra=None, filename="a.png", height=None, width=None):
    def b(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def i(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    feature = {"image/encoded": b(png(image)), "image/height": i(height or image.shape[0]),
               "image/width": i(width or image.shape[1]), "image/filename": b(filename.encode())}
    if mask is not None:
        feature[si.MASK_KEY] = b(png(mask))
    for key, value in (extra or {}).items():
        feature[key] = b(png(value))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


PARSER_CASES = ["eval", "eval_padded_groundtruth", "eval_no_aspect", "eval_centered",
                "eval_depth_feature", "eval_matting", "train", "train_crop_full",
                "train_centered"]


@pytest.mark.parametrize("case", PARSER_CASES)
def test_parser_equals_tfm(case):
    args = tfm_args(f"parser_args/{case}")
    is_training = args.pop("is_training")
    extra = [si.DenseFeature(**f) for f in args.pop("additional_dense_features", [])]
    mask = tfm("parser/matting") if args.get("gt_is_matting_map") else tfm("parser/mask")
    serialized = record(tfm("parser/image"), mask, {"image/depth": tfm("parser/depth")})
    decoded = si.Decoder(additional_dense_features=extra).decode(serialized)
    image, labels = si.Parser(additional_dense_features=extra or None, **args).parse_fn(
        is_training)(decoded)
    np.testing.assert_allclose(image.numpy(), tfm(f"parser/{case}/image"), atol=1e-5, rtol=0)
    for key in ("masks", "valid_masks", "image_info"):
        expected = tfm(f"parser/{case}/{key}")
        assert labels[key].dtype.as_numpy_dtype == expected.dtype, key
        np.testing.assert_array_equal(labels[key].numpy(), expected, err_msg=key)


def test_padding_is_ignore_label():
    # 11x13 into 16x20 keeps the aspect: 16x19, so column 19 is padding.
    mask = np.zeros((11, 13), np.uint8)
    image = np.full((11, 13, 3), 128, np.uint8)
    parser = si.Parser(output_size=[16, 20], ignore_label=7)
    for training in (False, True):
        _, labels = parser.parse_fn(training)(si.Decoder().decode(record(image, mask)))
        masks = labels["masks"].numpy()[..., 0]
        assert (masks[:, 19] == 7).all() and (masks[:, :19] == 0).all()
        assert not labels["valid_masks"].numpy()[:, 19].any()
        assert labels["valid_masks"].numpy()[:, :19].all()


def parse_flip_pairs(seed_count=12, **parser_args):
    """(image, mask) of a record with an asymmetric image and mask, parsed with flips on."""
    y, x = np.meshgrid(np.arange(16), np.arange(20), indexing="ij")
    image = np.stack([x * 12, y * 15, np.zeros_like(x)], -1).astype(np.uint8)
    mask = (x // 5).astype(np.uint8)  # classes 0..3 from left to right
    decoded = si.Decoder().decode(record(image, mask))
    parser = si.Parser(output_size=[16, 20], aug_rand_hflip=True, **parser_args)
    parse = parser.parse_fn(True)
    results = []
    for seed in range(seed_count):
        tf.random.set_seed(seed)
        image_out, labels = parse(decoded)
        results.append((image_out.numpy(), labels["masks"].numpy()[..., 0]))
    return results


def test_horizontal_flip_flips_image_and_mask_together():
    flipped_count = 0
    for image, mask in parse_flip_pairs():
        # The red channel grows left to right unless flipped; the mask must agree.
        image_flipped = image[0, 0, 0] > image[0, -1, 0]
        mask_flipped = mask[0, 0] > mask[0, -1]
        assert image_flipped == mask_flipped
        flipped_count += image_flipped
    assert 0 < flipped_count < 12


def test_scale_jitter_and_crop_keep_image_and_mask_aligned():
    # With scale jitter, random offsets and flips, each pixel's mask class still matches the
    # column band of the image (red channel = 12 * original column, band = column // 5).
    mean, std = np.array(si.MEAN_RGB), np.array(si.STDDEV_RGB)
    sizes = set()
    for image, mask in parse_flip_pairs(aug_scale_min=0.5, aug_scale_max=2.0, crop_size=None):
        valid = mask != 255
        column = (image[..., 0] * std[0] + mean[0]) / 12
        band = np.clip(np.round(column) // 5, 0, 3)
        assert np.mean(band[valid] == mask[valid]) > 0.85
        sizes.add(int(valid.sum()))
        assert image.shape == (16, 20, 3)
    assert len(sizes) > 1  # the jitter changed the scale


def test_training_crop_size():
    image = np.full((30, 40, 3), 100, np.uint8)
    mask = np.ones((30, 40), np.uint8)
    parser = si.Parser(output_size=[24, 32], crop_size=[16, 16])
    out, labels = parser.parse_fn(True)(si.Decoder().decode(record(image, mask)))
    assert out.shape == (16, 16, 3) and labels["masks"].shape == (16, 16, 1)
    assert (labels["masks"].numpy() == 1).all()
    np.testing.assert_array_equal(labels["image_info"].numpy()[:2], [[16, 16], [16, 16]])


def test_image_feature_names_the_image_key():
    image = tfm("parser/image")
    serialized = record(np.zeros_like(image), tfm("parser/mask"), {"image/rgb": image})
    feature = si.DenseFeature(feature_name="image/rgb")
    decoded = si.Decoder(image_feature=feature).decode(serialized)
    out, _ = si.Parser(output_size=[16, 20], image_feature=feature).parse_fn(False)(decoded)
    np.testing.assert_allclose(out.numpy(), tfm("parser/eval/image"), atol=1e-5)


def test_record_without_mask_is_named():
    decoded = si.Decoder().decode(record(tfm("parser/image"), None, filename="cat_7.jpg"))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"has no[\s\S]*cat_7.jpg"):
        si.Parser(output_size=[16, 20]).parse_fn(False)(decoded)


def test_record_with_mask_of_another_size_is_named():
    serialized = record(tfm("parser/image"), np.zeros((5, 5), np.uint8), filename="dog.png")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"mask of record[\s\S]*dog.png"):
        si.Parser(output_size=[16, 20]).parse_fn(True)(si.Decoder().decode(serialized))


def test_eval_groundtruth_larger_than_padded_size_is_named():
    serialized = record(tfm("parser/image"), tfm("parser/mask"), filename="big.png")
    parser = si.Parser(output_size=[16, 16], resize_eval_groundtruth=False,
                       groundtruth_padded_size=[8, 16])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"big.png[\s\S]*larger than groundtruth_padded_size"):
        parser.parse_fn(False)(si.Decoder().decode(serialized))


def test_unresized_eval_groundtruth_needs_a_padded_size():
    with pytest.raises(ValueError, match="groundtruth_padded_size"):
        si.Parser(output_size=[16, 16], resize_eval_groundtruth=False)


def test_parser_runs_in_a_dataset():
    serialized = record(tfm("parser/image"), tfm("parser/mask"))
    parser = si.Parser(output_size=[16, 20], aug_rand_hflip=True, aug_scale_min=0.8,
                       aug_scale_max=1.25)
    dataset = tf.data.Dataset.from_tensors(serialized).repeat(4).map(
        si.Decoder().decode).map(parser.parse_fn(True)).batch(2)
    for images, labels in dataset:
        assert images.shape == (2, 16, 20, 3) and labels["masks"].shape == (2, 16, 20, 1)
        assert labels["image_info"].shape == (2, 4, 2)


# ----- make_tfrecords --mask_dir --------------------------------------------------------------

def write_file(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def image_mask_folders(root, sizes=((11, 13), (8, 9), (10, 10)), num_classes=3):
    """images/ (PNG) + masks/ (1-channel PNG, ids 0..num_classes-1 and 255); the arrays."""
    rng = np.random.default_rng(7)
    arrays = {}
    for k, (h, w) in enumerate(sizes):
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        mask = rng.integers(0, num_classes, (h, w), dtype=np.uint8)
        mask[0, 0] = 255
        write_file(os.path.join(root, "images", f"im{k}.png"), png(image))
        write_file(os.path.join(root, "masks", f"im{k}.png"), png(mask))
        arrays[f"im{k}.png"] = (image, mask)
    return os.path.join(root, "images"), os.path.join(root, "masks"), arrays


def mask_mode_args(image_dir, mask_dir, prefix, *extra):
    return ["--image_dir", image_dir, "--mask_dir", mask_dir, "--num_classes", "3",
            "--output_prefix", prefix] + list(extra)


def test_make_tfrecords_mask_mode_round_trip(tmp_path):
    from lite_launcher.vision import make_tfrecords  # pylint: disable=import-outside-toplevel
    image_dir, mask_dir, arrays = image_mask_folders(str(tmp_path))
    prefix = str(tmp_path / "seg")
    assert make_tfrecords.main(mask_mode_args(image_dir, mask_dir, prefix, "--num_shards", "2",
                                              "--keep_format")) == 0
    shards = sorted(str(p) for p in tmp_path.glob("seg-*"))
    assert [os.path.basename(s) for s in shards] == ["seg-00000-of-00002",
                                                     "seg-00001-of-00002"]
    decoder = si.Decoder()
    seen = set()
    for serialized in tf.data.TFRecordDataset(shards):
        example = tf.train.Example.FromString(serialized.numpy()).features.feature
        assert example["image/segmentation/class/format"].bytes_list.value == [b"png"]
        decoded = decoder.decode(serialized)
        name = decoded["image/filename"].numpy().decode()
        image, mask = arrays[name]
        seen.add(name)
        np.testing.assert_array_equal(tf.io.decode_png(decoded["image/encoded"]).numpy(), image)
        np.testing.assert_array_equal(tf.io.decode_png(decoded[si.MASK_KEY]).numpy()[..., 0],
                                      mask)
        assert (int(decoded["image/height"]), int(decoded["image/width"])) == mask.shape
        # The records feed the parser: the 255 pixel stays ignored.
        _, labels = si.Parser(output_size=[mask.shape[0], mask.shape[1]]).parse_fn(False)(
            decoded)
        np.testing.assert_array_equal(labels["masks"].numpy()[..., 0], mask)
    assert seen == set(arrays)


def test_make_tfrecords_mask_mode_reencodes_images_as_jpeg_by_default(tmp_path):
    from lite_launcher.vision import make_tfrecords  # pylint: disable=import-outside-toplevel
    image_dir, mask_dir, _ = image_mask_folders(str(tmp_path), sizes=((6, 7),))
    assert make_tfrecords.main(mask_mode_args(image_dir, mask_dir, str(tmp_path / "j"))) == 0
    serialized = next(iter(tf.data.TFRecordDataset(str(tmp_path / "j-00000-of-00001"))))
    feature = tf.train.Example.FromString(serialized.numpy()).features.feature
    assert feature["image/format"].bytes_list.value == [b"jpeg"]
    assert feature["image/encoded"].bytes_list.value[0][:3] == b"\xff\xd8\xff"
    assert feature[si.MASK_KEY].bytes_list.value[0][:4] == b"\x89PNG"  # masks stay lossless


def break_size(root):
    write_file(os.path.join(root, "masks", "im1.png"), png(np.zeros((8, 8), np.uint8)))
    return "'" + os.path.join(root, "masks", "im1.png") + "' is 8x8 but its image"


def break_class_id(root):
    mask = np.zeros((10, 10), np.uint8)
    mask[3, 4] = 3
    write_file(os.path.join(root, "masks", "im2.png"), png(mask))
    return "'" + os.path.join(root, "masks", "im2.png") + "' holds class id 3, but --num_classes"


def break_missing(root):
    os.remove(os.path.join(root, "masks", "im0.png"))
    return "'" + os.path.join(root, "images", "im0.png") + "' has no mask: expected"


def break_channels(root):
    write_file(os.path.join(root, "masks", "im1.png"), png(np.zeros((8, 9, 3), np.uint8)))
    return "has 3 channels; masks must be 1-channel PNGs"


def break_num_classes(root):
    return "--num_classes (0) must be >= 1 with --mask_dir"


@pytest.mark.parametrize("break_input", [break_size, break_class_id, break_missing,
                                         break_channels, break_num_classes])
def test_make_tfrecords_mask_mode_bad_input(tmp_path, capsys, break_input):
    from lite_launcher.vision import make_tfrecords  # pylint: disable=import-outside-toplevel
    image_dir, mask_dir, _ = image_mask_folders(str(tmp_path))
    prefix = str(tmp_path / "seg")
    # An earlier run's shards stay as they were.
    assert make_tfrecords.main(mask_mode_args(image_dir, mask_dir, prefix)) == 0
    before = (tmp_path / "seg-00000-of-00001").read_bytes()
    capsys.readouterr()
    message = break_input(str(tmp_path))
    args = mask_mode_args(image_dir, mask_dir, prefix, "--num_shards", "2")
    if break_input is break_num_classes:
        args[args.index("--num_classes") + 1] = "0"
    assert make_tfrecords.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.glob("seg*")) == ["seg-00000-of-00001"]
    assert (tmp_path / "seg-00000-of-00001").read_bytes() == before


def test_make_tfrecords_writes_all_shards_or_none(tmp_path, monkeypatch):
    from lite_launcher.vision import make_tfrecords  # pylint: disable=import-outside-toplevel
    image_dir, mask_dir, _ = image_mask_folders(str(tmp_path))
    real_writer = tf.io.TFRecordWriter
    opened = []

    def failing_writer(path):
        opened.append(path)
        if len(opened) == 2:
            raise OSError("disk full")
        return real_writer(path)

    monkeypatch.setattr(tf.io, "TFRecordWriter", failing_writer)
    with pytest.raises(OSError, match="disk full"):
        make_tfrecords.make_segmentation_tfrecords(image_dir, mask_dir, 3,
                                                   str(tmp_path / "seg"), num_shards=2)
    assert len(opened) == 2 and not list(tmp_path.glob("seg*"))


def test_build_dataset_reads_make_tfrecords_shards(tmp_path):
    # The task's own data config (TFM's segmentation DataConfig field names and defaults).
    import types  # pylint: disable=import-outside-toplevel
    from lite_launcher.vision import make_tfrecords  # pylint: disable=import-outside-toplevel
    from lite_launcher.vision.segmentation_configs import (  # noqa: E402
        DataConfig as SegData)

    image_dir, mask_dir, _ = image_mask_folders(str(tmp_path))
    prefix = str(tmp_path / "seg")
    assert make_tfrecords.main(mask_mode_args(image_dir, mask_dir, prefix)) == 0
    task_config = types.SimpleNamespace(
        losses=types.SimpleNamespace(ignore_label=255, gt_is_matting_map=False))
    train = SegData(input_path=prefix + "*", global_batch_size=2, is_training=True,
                    output_size=[16, 16], aug_scale_min=0.5, aug_scale_max=2.0)
    images, labels = next(iter(si.build_dataset(train, task_config)))
    assert images.shape == (2, 16, 16, 3) and labels["masks"].shape == (2, 16, 16, 1)
    evaluation = SegData(input_path=prefix + "*", global_batch_size=3, is_training=False,
                         output_size=[16, 16], resize_eval_groundtruth=False,
                         groundtruth_padded_size=[16, 16], drop_remainder=False)
    batches = list(si.build_dataset(evaluation, task_config))
    assert [b[1]["masks"].shape[0] for b in batches] == [3]
    # Unresized ground truth keeps the original sizes, padded with ignore_label.
    info = batches[0][1]["image_info"].numpy()
    assert sorted(map(tuple, info[:, 0].astype(int).tolist())) == [(8, 9), (10, 10), (11, 13)]
