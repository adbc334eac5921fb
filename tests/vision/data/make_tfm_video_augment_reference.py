"""Writes tfm_video_augment_reference.npz: TFM 2.20's AutoAugment / RandAugment ops
(official.vision.ops.augment) applied to one clip, as TFM's video parser applies its augmenter
to the whole [T, H, W, C] clip.

Run once with TFM 2.20 (tf-models-official 2.20, tensorflow 2.20, tf_keras):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_video_augment_reference.py

The clip: uint8 [3, 16, 20, 3], NumPy RandomState(11) on a coarse grid upsampled (nearest) so
that the frames have edges and flat parts. Keys: `clip`, and one `<op>` per entry of OPS (the
op's output on the clip, with the argument written there; geometric ops get the policies'
grey replace value [128] * 3).
"""

import os

import numpy as np
import tensorflow as tf

from official.vision.ops import augment

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(HERE, "tfm_video_augment_reference.npz")
REPLACE = [128] * 3

# name -> (TFM function, arguments after the clip)
OPS = {
    "autocontrast": (augment.autocontrast, ()),
    "equalize": (augment.equalize, ()),
    "invert": (augment.invert, ()),
    "grayscale": (augment.grayscale, ()),
    "posterize_3": (augment.posterize, (3,)),
    "solarize_100": (augment.solarize, (100,)),
    "solarize_add_40": (augment.solarize_add, (40, 128)),
    "color_0.4": (augment.color, (0.4,)),
    "contrast_1.5": (augment.contrast, (1.5,)),
    "brightness_1.3": (augment.brightness, (1.3,)),
    "sharpness_0.3": (augment.sharpness, (0.3,)),
    "sharpness_1.7": (augment.sharpness, (1.7,)),
    "rotate_25": (augment.wrapped_rotate, (25.0, REPLACE)),
    "translate_x_4": (augment.translate_x, (4, REPLACE)),
    "translate_y_-3": (augment.translate_y, (-3, REPLACE)),
    "shear_x_0.2": (augment.shear_x, (0.2, REPLACE)),
    "shear_y_-0.15": (augment.shear_y, (-0.15, REPLACE)),
}


def make_clip():
    coarse = np.random.RandomState(11).randint(0, 256, size=(3, 4, 5, 3)).astype(np.uint8)
    return np.repeat(np.repeat(coarse, 4, axis=1), 4, axis=2)


def main():
    clip = make_clip()
    out = {"clip": clip}
    for name, (fn, args) in OPS.items():
        result = fn(tf.constant(clip), *args).numpy()
        assert result.shape == clip.shape and result.dtype == np.uint8, name
        out[name] = result
    np.savez_compressed(OUTPUT, **out)
    print(f"wrote {OUTPUT} ({os.path.getsize(OUTPUT)} bytes), {len(out)} arrays")


if __name__ == "__main__":
    main()
