"""Writes tfm_segmentation_numbers.npz: TFM 2.20's semantic segmentation loss, IoU metrics and
input parser on fixed inputs, for tests/vision/test_segmentation_data.py.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_segmentation_numbers.py

The inputs (seeded numpy) are stored beside TFM's outputs, so the tests feed lite exactly what
TFM was fed:
- `loss/logits` [2, 6, 8, 4], `loss/masks` [2, 12, 16, 1] (ids 0..3, ~20% 255), and
  `loss/<case>`: `SegmentationLoss(...)` for each case in LOSS_CASES (its arguments are stored
  as `loss_args/<case>`, a JSON string). `loss/matting_*`: 2-class logits and a matting map.
- `iou/logits_{1,2}` [3, 8, 8, 4], `iou/masks_{1,2}` [3, 16, 16, 1], `iou/valid_{1,2}`,
  `iou/image_info_{1,2}` [3, 4, 2] (original sizes 11x13, 14x9, 16x16; one with an offset);
  `iou/<metric>_<rescale>_<steps>`: `MeanIoU` / `PerClassIoU` results after the first batch
  ("one") and after both ("two"), `rescale_predictions` False / True.
- `parser/image` [11, 13, 3], `parser/depth` [11, 13, 1], `parser/mask` [11, 13] (uint8; PNG
  encoded for the record), `parser/matting` [11, 13], and for each case in PARSER_CASES
  `parser/<case>/{image,masks,valid_masks,image_info}` (eval mode, or train mode without
  randomness); its Parser arguments are `parser_args/<case>`.
"""

import json
import os

import numpy as np
import tensorflow as tf
from official.vision.configs import semantic_segmentation as seg_config
from official.vision.dataloaders import segmentation_input
from official.vision.evaluation import segmentation_metrics
from official.vision.losses import segmentation_losses

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfm_segmentation_numbers.npz")

LOSS_CASES = {
    "plain": dict(label_smoothing=0.0, class_weights=None, ignore_label=255,
                  use_groundtruth_dimension=False),
    "gt_dimension": dict(label_smoothing=0.0, class_weights=None, ignore_label=255,
                         use_groundtruth_dimension=True),
    "smoothing": dict(label_smoothing=0.1, class_weights=None, ignore_label=255,
                      use_groundtruth_dimension=True),
    "class_weights": dict(label_smoothing=0.0, class_weights=[0.5, 1.0, 2.0, 3.0],
                          ignore_label=255, use_groundtruth_dimension=False),
    "top_k": dict(label_smoothing=0.0, class_weights=None, ignore_label=255,
                  use_groundtruth_dimension=True, top_k_percent_pixels=0.25),
    "top_k_resized_labels": dict(label_smoothing=0.0, class_weights=None, ignore_label=255,
                                 use_groundtruth_dimension=False, top_k_percent_pixels=0.5),
    "all": dict(label_smoothing=0.2, class_weights=[1.0, 0.3, 2.0, 0.7], ignore_label=255,
                use_groundtruth_dimension=True, top_k_percent_pixels=0.4),
    "binary_cross_entropy": dict(label_smoothing=0.1, class_weights=[1.0, 2.0, 1.0, 0.5],
                                 ignore_label=255, use_groundtruth_dimension=True,
                                 use_binary_cross_entropy=True),
}
MATTING_CASE = dict(label_smoothing=0.0, class_weights=None, ignore_label=255,
                    use_groundtruth_dimension=True, gt_is_matting_map=True)

PARSER_CASES = {
    "eval": dict(output_size=[16, 20], is_training=False),
    "eval_padded_groundtruth": dict(output_size=[16, 20], resize_eval_groundtruth=False,
                                    groundtruth_padded_size=[16, 16], is_training=False),
    "eval_no_aspect": dict(output_size=[16, 20], preserve_aspect_ratio=False,
                           is_training=False),
    "eval_centered": dict(output_size=[16, 20], centered_crop=True, is_training=False),
    "eval_depth_feature": dict(output_size=[16, 20], is_training=False,
                               additional_dense_features=[dict(
                                   feature_name="image/depth", num_channels=1, mean=[100.0],
                                   stddev=[50.0])]),
    "eval_matting": dict(output_size=[16, 20], gt_is_matting_map=True, is_training=False),
    # Train mode without randomness: no flip, no scale jitter, a crop the resized size.
    "train": dict(output_size=[16, 20], is_training=True),
    "train_crop_full": dict(output_size=[16, 20], crop_size=[16, 20], is_training=True),
    "train_centered": dict(output_size=[16, 20], centered_crop=True, is_training=True),
}


def loss_numbers(rng):
    logits = rng.normal(size=(2, 6, 8, 4)).astype(np.float32) * 2
    masks = rng.integers(0, 4, size=(2, 12, 16, 1)).astype(np.float32)
    masks[rng.random(masks.shape) < 0.2] = 255
    out = {"loss/logits": logits, "loss/masks": masks}
    for name, args in LOSS_CASES.items():
        loss = segmentation_losses.SegmentationLoss(**args)(tf.constant(logits),
                                                            tf.constant(masks))
        out[f"loss/{name}"] = np.float64(loss.numpy())
        out[f"loss_args/{name}"] = json.dumps(args)
    matting_logits = rng.normal(size=(2, 6, 8, 2)).astype(np.float32)
    matting = rng.random(size=(2, 12, 16, 1)).astype(np.float32)
    matting[0, :3] = 255
    out["loss/matting_logits"] = matting_logits
    out["loss/matting_masks"] = matting
    out["loss/matting"] = np.float64(segmentation_losses.SegmentationLoss(**MATTING_CASE)(
        tf.constant(matting_logits), tf.constant(matting)).numpy())
    out["loss_args/matting"] = json.dumps(MATTING_CASE)
    return out


def iou_batch(rng):
    sizes = [(11, 13), (14, 9), (16, 16)]
    masks = np.full((3, 16, 16, 1), 255, np.float32)
    info = []
    for b, (h, w) in enumerate(sizes):
        masks[b, :h, :w, 0] = rng.integers(0, 4, size=(h, w))
        masks[b, :h, :w][rng.random((h, w, 1)) < 0.1] = 255
        scale = min(16 / h, 16 / w)
        scaled = np.round(np.array([h, w]) * scale)
        info.append([[h, w], [16, 16], scaled / [h, w], [0, 0]])
    info[2][3] = [2, 3]  # A training-style offset, for the rescale path.
    logits = rng.normal(size=(3, 8, 8, 4)).astype(np.float32)
    # Predictions that agree with the masks often, so IoUs are not all small.
    target = np.clip(masks[:, ::2, ::2, 0], 0, 3).astype(int)
    logits += 2.5 * np.eye(4, dtype=np.float32)[target] * (rng.random((3, 8, 8, 1)) < 0.6)
    return logits, masks, masks != 255, np.array(info, np.float32)


def iou_numbers(rng):
    out = {}
    batches = [iou_batch(rng), iou_batch(rng)]
    for k, (logits, masks, valid, info) in enumerate(batches, 1):
        out.update({f"iou/logits_{k}": logits, f"iou/masks_{k}": masks,
                    f"iou/valid_{k}": valid, f"iou/image_info_{k}": info})
    for cls in (segmentation_metrics.MeanIoU, segmentation_metrics.PerClassIoU):
        for rescale in (False, True):
            metric = cls(num_classes=4, rescale_predictions=rescale, dtype=tf.float32)
            for step, (logits, masks, valid, info) in zip(("one", "two"), batches):
                metric.update_state({"masks": tf.constant(masks),
                                     "valid_masks": tf.constant(valid),
                                     "image_info": tf.constant(info)}, tf.constant(logits))
                out[f"iou/{cls.__name__}_{rescale}_{step}"] = metric.result().numpy()
    return out


def encode_png(array):
    return tf.io.encode_png(array).numpy()


def parser_numbers(rng):
    image = rng.integers(0, 256, size=(11, 13, 3), dtype=np.uint8)
    depth = rng.integers(0, 256, size=(11, 13, 1), dtype=np.uint8)
    mask = rng.integers(0, 5, size=(11, 13), dtype=np.uint8)
    mask[mask == 4] = 255
    matting = rng.integers(0, 256, size=(11, 13), dtype=np.uint8)
    out = {"parser/image": image, "parser/depth": depth, "parser/mask": mask,
           "parser/matting": matting}
    for name, args in PARSER_CASES.items():
        args = dict(args)
        is_training = args.pop("is_training")
        extra = args.pop("additional_dense_features", None)
        extra = [seg_config.DenseFeatureConfig(**f) for f in extra] if extra else None
        label = matting if args.get("gt_is_matting_map") else mask
        feature = {
            "image/encoded": encode_png(image), "image/height": 11, "image/width": 13,
            "image/segmentation/class/encoded": encode_png(label[..., None]),
            "image/depth": encode_png(depth)}
        example = tf.train.Example(features=tf.train.Features(feature={
            key: (tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
                  if isinstance(value, bytes)
                  else tf.train.Feature(int64_list=tf.train.Int64List(value=[value])))
            for key, value in feature.items()}))
        decoder = segmentation_input.Decoder(additional_dense_features=extra)
        parser = segmentation_input.Parser(additional_dense_features=extra, **args)
        parsed_image, labels = parser.parse_fn(is_training)(
            decoder.decode(tf.constant(example.SerializeToString())))
        out[f"parser/{name}/image"] = parsed_image.numpy()
        for key in ("masks", "valid_masks", "image_info"):
            out[f"parser/{name}/{key}"] = labels[key].numpy()
        stored = dict(PARSER_CASES[name])
        out[f"parser_args/{name}"] = json.dumps(stored)
    return out


def main():
    rng = np.random.default_rng(30)
    numbers = {}
    numbers.update(loss_numbers(rng))
    numbers.update(iou_numbers(rng))
    numbers.update(parser_numbers(rng))
    np.savez_compressed(OUT, **numbers)
    print(f"wrote {len(numbers)} arrays to {OUT}")


if __name__ == "__main__":
    main()
