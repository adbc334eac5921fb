"""Writes tfm_2_20_sharpness.json: TFM 2.20's RandAugment `Sharpness` on a fixed image.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_sharpness.py

The image is drawn from numpy's default_rng(0) (uint8, 12x10x3) and stored beside TFM's
outputs; for every RandAugment level 0..10 the output is what TFM's `augment.sharpness` makes
with the factor TFM's level-to-argument map gives (`_enhance_level_to_arg`), and, for the
factors 0.0, 1.0 and 2.0 themselves, the same op at that factor.
"""

import json
import os

import numpy as np
import tensorflow as tf
from official.vision.ops import augment

image = np.random.default_rng(0).integers(0, 256, size=(12, 10, 3), dtype=np.uint8)
levels = {}
for level in range(11):
    (factor,) = augment._enhance_level_to_arg(level)
    levels[str(level)] = {"factor": factor,
                          "output": augment.sharpness(tf.constant(image), factor).numpy().tolist()}
factors = {str(f): augment.sharpness(tf.constant(image), f).numpy().tolist()
           for f in (0.0, 1.0, 2.0)}
out = {"tensorflow": tf.__version__, "image": image.tolist(), "levels": levels,
       "factors": factors}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfm_2_20_sharpness.json")
with open(path, "w") as f:
    json.dump(out, f, separators=(",", ":"))
print("wrote", path)
