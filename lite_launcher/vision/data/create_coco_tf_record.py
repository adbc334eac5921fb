r"""COCO annotations + an image folder -> sharded TFRecords in TFM's detection format (TFM's
official/vision/data/create_coco_tf_record, same flags and records).

    python -m lite_launcher.vision.data.create_coco_tf_record \
        --image_dir=IMAGES --object_annotations_file=instances.json \
        [--caption_annotations_file=captions.json] [--image_info_file=info.json] \
        --output_file_prefix=OUT/train --num_shards=32 [--include_masks]

One record per image of the image-info file (by default the object annotations file), in its
order, dealt round-robin into `PREFIX-%05d-of-%05d.tfrecord`. Each holds TFM's features:
`image/{height,width,filename,source_id,key/sha256,encoded,format}`, and for images with
usable boxes `image/object/bbox/{xmin,xmax,ymin,ymax}` (normalised), `image/object/class/
{text,label}`, `image/object/is_crowd`, `image/object/area`, with `--include_masks`
`image/object/mask` (one PNG per object, from the polygons or RLE through pycocotools), with
captions `image/caption`. Boxes of zero size or reaching past the image are skipped (counted).

Unlike TFM's, everything is checked before the first record is written: a JSON that does not
read, an image the JSON names that no --image_dir holds (or that two hold), pycocotools missing
with --include_masks, and with --include_masks an object (with a kept box) without a
segmentation, an RLE mask of another size than its image, or a polygon outside its image;
each is one line on stderr and exit code 2, and no shard is left behind. RLE with compressed
counts (a string) converts too (TFM's reads only lists).
TensorFlow is imported only once the checks pass. Panoptic masks are not supported.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

USER_ERROR_EXIT_CODE = 2


class InputError(ValueError):
    """Bad command-line input or annotations (one line, exit code 2)."""


def _is_rle(segmentation) -> bool:
    return isinstance(segmentation, dict) and "counts" in segmentation and "size" in segmentation


def coco_segmentation_to_mask_png(segmentation, height: int, width: int,
                                  is_crowd) -> bytes:
    """A COCO segmentation (polygons, or RLE with compressed or uncompressed counts) as a PNG
    of the 0/1 mask; an object's polygons are united."""
    from lite_launcher.vision.data import tfrecord_lib  # pylint: disable=import-outside-toplevel
    from lite_launcher.vision.evaluation import coco_utils  # pylint: disable=import-outside-toplevel
    _, _, mask_api = coco_utils.import_pycocotools()
    if _is_rle(segmentation) and not isinstance(segmentation["counts"], list):
        # Compressed counts (a string) decode as they are; frPyObjects reads only lists.
        counts = segmentation["counts"]
        rle = {"size": list(segmentation["size"]),
               "counts": counts.encode("ascii") if isinstance(counts, str) else counts}
    else:
        rle = mask_api.frPyObjects(segmentation, height, width)
    binary = mask_api.decode(rle)
    if binary.ndim == 3 and not is_crowd:
        binary = np.amax(binary, axis=2)
    elif binary.ndim == 3:
        binary = binary[..., 0]
    return tfrecord_lib.encode_mask_as_png(binary)


def _box_is_kept(annotation: dict, image_height: int, image_width: int) -> bool:
    """TFM's rule: boxes with no width or height, or reaching past the image, are skipped."""
    x, y, width, height = tuple(annotation["bbox"])
    return not (width <= 0 or height <= 0 or x + width > image_width
                or y + height > image_height)


# How far (pixels) a polygon vertex may lie outside the image before it is refused.
POLYGON_TOLERANCE = 1.0


def check_segmentation(annotation: dict, image: dict) -> None:
    """InputError (one line naming the annotation and image) unless `annotation` has a
    segmentation that fits `image`: RLE of the image's size, or polygons of >= 3 points
    inside the image (within POLYGON_TOLERANCE pixels)."""
    height, width = image["height"], image["width"]
    where = (f"annotation {annotation.get('id')} of image {image['file_name']!r} "
             f"(id {image['id']})")
    segmentation = annotation.get("segmentation")
    if not segmentation:
        raise InputError(f"--include_masks: {where} has no 'segmentation'; give every object "
                         f"a polygon or RLE mask, or convert without --include_masks.")
    if _is_rle(segmentation):
        size = [int(v) for v in segmentation["size"]]
        if size != [height, width]:
            raise InputError(f"--include_masks: {where} has an RLE mask of size {size[0]}x"
                             f"{size[1]} but the image is {height}x{width}; masks must be "
                             f"the image's size.")
        return
    polygons = segmentation if isinstance(segmentation, list) else None
    if polygons and not isinstance(polygons[0], list):
        polygons = [polygons]
    if not polygons or any(len(p) < 6 or len(p) % 2 for p in polygons):
        raise InputError(f"--include_masks: {where} has a segmentation that is neither RLE "
                         f"nor polygons of >= 3 (x, y) points.")
    points = np.concatenate([np.asarray(p, np.float64).reshape(-1, 2) for p in polygons])
    low, high = points.min(axis=0), points.max(axis=0)
    if (low < -POLYGON_TOLERANCE).any() or high[0] > width + POLYGON_TOLERANCE or (
            high[1] > height + POLYGON_TOLERANCE):
        raise InputError(f"--include_masks: {where} has a polygon outside the {height}x"
                         f"{width} image (x {low[0]:g}..{high[0]:g}, y {low[1]:g}.."
                         f"{high[1]:g}); polygon points are pixels of their image.")


def coco_annotations_to_lists(bbox_annotations: Sequence[dict], id_to_name_map: Dict[int, str],
                              image_height: int, image_width: int, include_masks: bool
                              ) -> Tuple[Dict[str, list], int]:
    """(feature lists, number skipped) of one image's COCO annotations.

    The lists are `xmin`, `xmax`, `ymin`, `ymax` (normalised by the image size), `is_crowd`,
    `category_id`, `category_names` (utf-8 bytes), `area`, and with `include_masks`
    `encoded_mask_png`. Boxes with no width or height, or reaching past the image, are
    skipped.
    """
    keys = ["xmin", "xmax", "ymin", "ymax", "is_crowd", "category_id", "category_names",
            "area"] + (["encoded_mask_png"] if include_masks else [])
    data = {key: [] for key in keys}
    skipped = 0
    for annotation in bbox_annotations:
        if not _box_is_kept(annotation, image_height, image_width):
            skipped += 1
            continue
        x, y, width, height = tuple(annotation["bbox"])
        data["xmin"].append(float(x) / image_width)
        data["xmax"].append(float(x + width) / image_width)
        data["ymin"].append(float(y) / image_height)
        data["ymax"].append(float(y + height) / image_height)
        data["is_crowd"].append(annotation["iscrowd"])
        category_id = int(annotation["category_id"])
        data["category_id"].append(category_id)
        data["category_names"].append(id_to_name_map[category_id].encode("utf8"))
        data["area"].append(annotation["area"])
        if include_masks:
            data["encoded_mask_png"].append(coco_segmentation_to_mask_png(
                annotation["segmentation"], image_height, image_width, annotation["iscrowd"]))
    return data, skipped


def bbox_annotations_to_feature_dict(bbox_annotations, image_height, image_width,
                                     id_to_name_map, include_masks) -> Tuple[dict, int]:
    """(the `image/object/*` features, number skipped) of one image's annotations; no
    features when every annotation was skipped."""
    from lite_launcher.vision.data import tfrecord_lib  # pylint: disable=import-outside-toplevel
    data, skipped = coco_annotations_to_lists(bbox_annotations, id_to_name_map, image_height,
                                              image_width, include_masks)
    if skipped == len(bbox_annotations):
        return {}, skipped
    feature = tfrecord_lib.convert_to_feature
    features = {f"image/object/bbox/{k}": feature(data[k])
                for k in ("xmin", "xmax", "ymin", "ymax")}
    features.update({
        "image/object/class/text": feature(data["category_names"]),
        "image/object/class/label": feature(data["category_id"]),
        "image/object/is_crowd": feature(data["is_crowd"]),
        "image/object/area": feature(data["area"], "float_list"),
    })
    if include_masks:
        features["image/object/mask"] = feature(data["encoded_mask_png"])
    return features, skipped


def encode_caption_annotations(caption_annotations: Sequence[dict]) -> List[bytes]:
    return [annotation["caption"].encode("utf8") for annotation in caption_annotations]


def create_tf_example(image: dict, image_path: str, bbox_annotations=None,
                      id_to_name_map=None, caption_annotations=None, include_masks=False):
    """(tf.train.Example, number of annotations skipped) of one COCO image entry (`id`,
    `file_name`, `height`, `width`) read from `image_path`."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from lite_launcher.vision.data import tfrecord_lib
    with tf.io.gfile.GFile(image_path, "rb") as f:
        encoded = f.read()
    # TFM labels every image 'jpg'; decoders sniff the real format.
    features = tfrecord_lib.image_info_to_feature_dict(
        image["height"], image["width"], image["file_name"], image["id"], encoded, "jpg")
    skipped = 0
    if bbox_annotations:
        object_features, skipped = bbox_annotations_to_feature_dict(
            bbox_annotations, image["height"], image["width"], id_to_name_map, include_masks)
        features.update(object_features)
    if caption_annotations:
        features["image/caption"] = tfrecord_lib.convert_to_feature(
            encode_caption_annotations(caption_annotations))
    return tf.train.Example(features=tf.train.Features(feature=features)), skipped


def _load_json(path: str, flag: str) -> dict:
    if "://" in path:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        opener = tf.io.gfile.GFile
    elif not os.path.isfile(path):
        raise InputError(f"{flag} {path!r} does not exist.")
    else:
        opener = open
    try:
        with opener(path, "r") as f:
            data = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{flag} {path!r} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or "images" not in data:
        raise InputError(f"{flag} {path!r} has no 'images' list; is it a COCO annotation "
                         f"file?")
    return data


def _by_image(annotations: Sequence[dict]) -> Dict[int, List[dict]]:
    grouped = collections.defaultdict(list)
    for annotation in annotations:
        grouped[annotation["image_id"]].append(annotation)
    return grouped


def _image_paths(images: Sequence[dict], image_dirs: Sequence[str]) -> List[str]:
    """Each image's file, found in exactly one of `image_dirs`; InputError naming the first
    image that is missing (or in several)."""
    paths = []
    for image in images:
        found = [os.path.join(d, image["file_name"]) for d in image_dirs
                 if os.path.isfile(os.path.join(d, image["file_name"]))]
        if not found:
            raise InputError(f"image {image['file_name']!r} (id {image['id']}) named by the "
                             f"annotations is not in --image_dir {', '.join(image_dirs)}.")
        if len(found) > 1:
            raise InputError(f"image {image['file_name']!r} is in more than one --image_dir: "
                             f"{', '.join(found)}.")
        paths.append(found[0])
    return paths


def create_tf_record_from_coco_annotations(images_info_file: str, image_dirs: Sequence[str],
                                           output_path: str, num_shards: int,
                                           object_annotations_file: Optional[str] = None,
                                           caption_annotations_file: Optional[str] = None,
                                           include_masks: bool = False,
                                           num_processes: Optional[int] = None) -> int:
    """Writes the shards (see the module docstring); returns the number of skipped
    annotations. InputError before anything is written when the inputs are bad."""
    if num_shards < 1:
        raise InputError(f"--num_shards ({num_shards}) must be >= 1.")
    if not image_dirs:
        raise InputError("--image_dir is missing: give the folder of the images.")
    images = _load_json(images_info_file, "--image_info_file")["images"]
    objects, id_to_name_map, captions = {}, None, {}
    if object_annotations_file:
        data = _load_json(object_annotations_file, "--object_annotations_file")
        objects = _by_image(data.get("annotations", []))
        id_to_name_map = {c["id"]: c["name"] for c in data.get("categories", [])}
        unknown = {a["category_id"] for group in objects.values() for a in group} - set(
            id_to_name_map)
        if unknown:
            raise InputError(f"--object_annotations_file {object_annotations_file!r}: "
                             f"annotations use category ids {sorted(unknown)} that its "
                             f"'categories' lack.")
    if caption_annotations_file:
        captions = _by_image(_load_json(caption_annotations_file,
                                        "--caption_annotations_file").get("annotations", []))
    if include_masks:
        from lite_launcher.vision.evaluation import coco_utils  # pylint: disable=import-outside-toplevel
        try:
            coco_utils.import_pycocotools()
        except coco_utils.MissingExtraError as e:
            raise InputError(f"--include_masks: {e}") from None
        for image in images:
            for annotation in objects.get(image["id"], []):
                if _box_is_kept(annotation, image["height"], image["width"]):
                    check_segmentation(annotation, image)
    paths = _image_paths(images, image_dirs)
    parent = os.path.dirname(os.path.abspath(output_path))
    from lite_launcher.vision.data import tfrecord_lib  # pylint: disable=import-outside-toplevel
    tfrecord_lib.check_and_make_dir(parent)
    items = ((image, path, objects.get(image["id"]), id_to_name_map,
              captions.get(image["id"]), include_masks) for image, path in zip(images, paths))
    return tfrecord_lib.write_tf_record_dataset(output_path, items, create_tf_example,
                                                num_shards, multiple_processes=num_processes)


def _flag_bool(text: str) -> bool:
    """absl-style boolean flag values (`--include_masks=true`)."""
    if text.lower() in ("1", "true", "t", "yes"):
        return True
    if text.lower() in ("0", "false", "f", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true / false)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; returns the exit code (2 with one line on stderr for bad input)."""
    parser = argparse.ArgumentParser(
        prog="python -m lite_launcher.vision.data.create_coco_tf_record",
        description="COCO JSON + images -> sharded TFRecords in TFM's detection format.")
    parser.add_argument("--image_dir", action="append", default=[],
                        help="Folder of the images (repeat for several).")
    parser.add_argument("--image_info_file", default="",
                        help="JSON whose 'images' the records follow (default: the object, "
                             "else the caption annotations file).")
    parser.add_argument("--object_annotations_file", default="",
                        help="COCO instances JSON: boxes and segmentations.")
    parser.add_argument("--caption_annotations_file", default="", help="COCO captions JSON.")
    parser.add_argument("--output_file_prefix", default="/tmp/train")
    parser.add_argument("--num_shards", type=int, default=32)
    parser.add_argument("--include_masks", type=_flag_bool, nargs="?", const=True,
                        default=False, help="Add instance masks (PNG) from the segmentations.")
    parser.add_argument("--num_processes", type=int, default=None,
                        help="Worker processes (default: none, convert in this process).")
    parser.add_argument("--logtostderr", action="store_true", help="Accepted; ignored.")
    args = parser.parse_args(argv)
    images_info_file = (args.image_info_file or args.object_annotations_file
                        or args.caption_annotations_file)
    try:
        if not images_info_file:
            raise InputError("All annotation files are missing: give "
                             "--object_annotations_file (or --image_info_file / "
                             "--caption_annotations_file).")
        skipped = create_tf_record_from_coco_annotations(
            images_info_file, args.image_dir, args.output_file_prefix, args.num_shards,
            args.object_annotations_file, args.caption_annotations_file, args.include_masks,
            args.num_processes)
    except InputError as e:
        sys.stderr.write(f"create_coco_tf_record: error: {e}\n")
        return USER_ERROR_EXIT_CODE
    print(f"Wrote {args.num_shards} shard(s) {args.output_file_prefix}-*-of-"
          f"{args.num_shards:05d}.tfrecord; skipped {skipped} annotation(s).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
