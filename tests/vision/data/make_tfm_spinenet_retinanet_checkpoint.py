"""Writes tfm_checkpoints/retinanet_spinenet/: a RetinaNet on a narrow SpineNet-49 written by
TFM 2.20, and TFM's outputs on it.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_spinenet_retinanet_checkpoint.py

TFM's `retinanet_spinenet_coco` (SpineNet-49, identity decoder, swish, anchor size 3) at
128x128 with 3 classes and a 2-conv, 16-filter head. TFM's SpineNet config has no width field
(a `model_id` picks its sizes from `spinenet.SCALING_MAP`), so the generator adds one narrow
entry, NARROW_ID: SpineNet-49's blocks at 1/16 width with 16-channel endpoints, which keeps
the checkpoint under 1 MB. index.json records the entry (`sizes`); the test puts the same one
in lite's table.

The model is built, randomised, calibrated, run and saved as for the ResNet / MobileNet
RetinaNets (make_tfm_retinanet_checkpoints.make: TFM's Trainer layout, `ckpt-13`), its
BatchNorm statistics from 64 noise images (SpineNet's level 7 is 1x1 here: from 8 its
statistics are too noisy, and the head's scores saturate at 1.0 on the fixed image), so
`<name>/reference.npz` holds the same keys: the fixed image, TFM's served detections, raw
`cls_<level>` / `box_<level>` outputs, `backbone_<level>` / `decoder_<level>` features and
post-NMS detections.
"""

import json
import os

import numpy as np

from official.vision.modeling.backbones import spinenet
from make_tfm_retinanet_checkpoints import COMMON, HERE, SIZE, make

TARGET = os.path.join(HERE, "tfm_checkpoints", "retinanet_spinenet")
NARROW_ID = "49N"
SIZES = {"endpoints_num_filters": 16, "filter_size_scale": 0.0625, "resample_alpha": 0.5,
         "block_repeats": 1}
MODELS = {
    "retinanet_spinenet49_narrow": ("retinanet_spinenet_coco", dict(
        # No stochastic depth (the experiment's is 0.2): the calibration's training call would
        # drop blocks at random, and the statistics would not be those of inference.
        COMMON, backbone={"type": "spinenet", "spinenet": {
            "model_id": NARROW_ID, "stochastic_depth_drop_rate": 0.0}},
        head={"num_convs": 2, "num_filters": 16},
        norm_activation={"use_sync_bn": False})),
}


def main():
    spinenet.SCALING_MAP[NARROW_ID] = SIZES
    os.makedirs(TARGET, exist_ok=True)
    rng = np.random.default_rng(50)
    models = {}
    for name, (experiment, overrides) in MODELS.items():
        models[name] = make(name, experiment, overrides, rng, target=TARGET,
                            calibration_images=64)
        models[name]["sizes"] = {"spinenet": {NARROW_ID: SIZES}}
    with open(os.path.join(TARGET, "index.json"), "w") as f:
        json.dump({"input_size": SIZE, "models": models}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(TARGET)


if __name__ == "__main__":
    main()
