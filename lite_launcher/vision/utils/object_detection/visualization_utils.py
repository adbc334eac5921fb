"""Drawing detections on images: boxes, class labels with scores, and instance masks on a uint8
[h, w, 3] NumPy image (TFM's official/vision/utils/object_detection/visualization_utils, its
main functions and arguments).

NumPy draws the boxes and masks; Pillow, when installed, draws the label text (without it the
labels are left out and everything else is drawn). matplotlib is not used. Colours are TFM's
names (`STANDARD_COLORS`, picked by class id), 'red', 'black', or (r, g, b) tuples.
"""

from __future__ import annotations

import collections
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

Color = Union[str, Tuple[int, int, int]]

# TFM's palette (CSS colour names) with their RGB values; a class id picks
# STANDARD_COLORS[id % len(STANDARD_COLORS)].
_RGB = {
    "AliceBlue": 0xF0F8FF, "Chartreuse": 0x7FFF00, "Aqua": 0x00FFFF, "Aquamarine": 0x7FFFD4,
    "Azure": 0xF0FFFF, "Beige": 0xF5F5DC, "Bisque": 0xFFE4C4, "BlanchedAlmond": 0xFFEBCD,
    "BlueViolet": 0x8A2BE2, "BurlyWood": 0xDEB887, "CadetBlue": 0x5F9EA0,
    "AntiqueWhite": 0xFAEBD7, "Chocolate": 0xD2691E, "Coral": 0xFF7F50,
    "CornflowerBlue": 0x6495ED, "Cornsilk": 0xFFF8DC, "Crimson": 0xDC143C, "Cyan": 0x00FFFF,
    "DarkCyan": 0x008B8B, "DarkGoldenRod": 0xB8860B, "DarkGrey": 0xA9A9A9, "DarkKhaki": 0xBDB76B,
    "DarkOrange": 0xFF8C00, "DarkOrchid": 0x9932CC, "DarkSalmon": 0xE9967A,
    "DarkSeaGreen": 0x8FBC8F, "DarkTurquoise": 0x00CED1, "DarkViolet": 0x9400D3,
    "DeepPink": 0xFF1493, "DeepSkyBlue": 0x00BFFF, "DodgerBlue": 0x1E90FF, "FireBrick": 0xB22222,
    "FloralWhite": 0xFFFAF0, "ForestGreen": 0x228B22, "Fuchsia": 0xFF00FF, "Gainsboro": 0xDCDCDC,
    "GhostWhite": 0xF8F8FF, "Gold": 0xFFD700, "GoldenRod": 0xDAA520, "Salmon": 0xFA8072,
    "Tan": 0xD2B48C, "HoneyDew": 0xF0FFF0, "HotPink": 0xFF69B4, "IndianRed": 0xCD5C5C,
    "Ivory": 0xFFFFF0, "Khaki": 0xF0E68C, "Lavender": 0xE6E6FA, "LavenderBlush": 0xFFF0F5,
    "LawnGreen": 0x7CFC00, "LemonChiffon": 0xFFFACD, "LightBlue": 0xADD8E6,
    "LightCoral": 0xF08080, "LightCyan": 0xE0FFFF, "LightGoldenRodYellow": 0xFAFAD2,
    "LightGray": 0xD3D3D3, "LightGrey": 0xD3D3D3, "LightGreen": 0x90EE90, "LightPink": 0xFFB6C1,
    "LightSalmon": 0xFFA07A, "LightSeaGreen": 0x20B2AA, "LightSkyBlue": 0x87CEFA,
    "LightSlateGray": 0x778899, "LightSlateGrey": 0x778899, "LightSteelBlue": 0xB0C4DE,
    "LightYellow": 0xFFFFE0, "Lime": 0x00FF00, "LimeGreen": 0x32CD32, "Linen": 0xFAF0E6,
    "Magenta": 0xFF00FF, "MediumAquaMarine": 0x66CDAA, "MediumOrchid": 0xBA55D3,
    "MediumPurple": 0x9370DB, "MediumSeaGreen": 0x3CB371, "MediumSlateBlue": 0x7B68EE,
    "MediumSpringGreen": 0x00FA9A, "MediumTurquoise": 0x48D1CC, "MediumVioletRed": 0xC71585,
    "MintCream": 0xF5FFFA, "MistyRose": 0xFFE4E1, "Moccasin": 0xFFE4B5, "NavajoWhite": 0xFFDEAD,
    "OldLace": 0xFDF5E6, "Olive": 0x808000, "OliveDrab": 0x6B8E23, "Orange": 0xFFA500,
    "OrangeRed": 0xFF4500, "Orchid": 0xDA70D6, "PaleGoldenRod": 0xEEE8AA, "PaleGreen": 0x98FB98,
    "PaleTurquoise": 0xAFEEEE, "PaleVioletRed": 0xDB7093, "PapayaWhip": 0xFFEFD5,
    "PeachPuff": 0xFFDAB9, "Peru": 0xCD853F, "Pink": 0xFFC0CB, "Plum": 0xDDA0DD,
    "PowderBlue": 0xB0E0E6, "Purple": 0x800080, "Red": 0xFF0000, "RosyBrown": 0xBC8F8F,
    "RoyalBlue": 0x4169E1, "SaddleBrown": 0x8B4513, "Green": 0x008000, "SandyBrown": 0xF4A460,
    "SeaGreen": 0x2E8B57, "SeaShell": 0xFFF5EE, "Sienna": 0xA0522D, "Silver": 0xC0C0C0,
    "SkyBlue": 0x87CEEB, "SlateBlue": 0x6A5ACD, "SlateGray": 0x708090, "SlateGrey": 0x708090,
    "Snow": 0xFFFAFA, "SpringGreen": 0x00FF7F, "SteelBlue": 0x4682B4, "GreenYellow": 0xADFF2F,
    "Teal": 0x008080, "Thistle": 0xD8BFD8, "Tomato": 0xFF6347, "Turquoise": 0x40E0D0,
    "Violet": 0xEE82EE, "Wheat": 0xF5DEB3, "White": 0xFFFFFF, "WhiteSmoke": 0xF5F5F5,
    "Yellow": 0xFFFF00, "YellowGreen": 0x9ACD32, "Black": 0x000000,
}
STANDARD_COLORS = [name for name in _RGB if name != "Black"]
_BY_LOWER_NAME = {name.lower(): value for name, value in _RGB.items()}


def _rgb(color: Color) -> Tuple[int, int, int]:
    """(r, g, b) of a colour name of the palette (any case) or an (r, g, b) tuple."""
    if isinstance(color, str):
        value = _BY_LOWER_NAME.get(color.lower())
        if value is None:
            raise ValueError(f"unknown colour {color!r}: use a name of STANDARD_COLORS, "
                             f"'red', 'black', or an (r, g, b) tuple.")
        return (value >> 16) & 255, (value >> 8) & 255, value & 255
    r, g, b = color
    return int(r), int(g), int(b)


def _check_image(image: np.ndarray) -> None:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or (
            image.shape[-1] != 3):
        raise ValueError(f"image must be a uint8 NumPy array [height, width, 3]; got "
                         f"{getattr(image, 'dtype', type(image))} "
                         f"{getattr(image, 'shape', '')}.")


def draw_mask_on_image_array(image: np.ndarray, mask: np.ndarray, color: Color = "red",
                             alpha: float = 0.4) -> None:
    """Blends `color` into `image` (in place) where the 0/1 uint8 `mask` [h, w] is 1:
    pixel = (1 - alpha) * pixel + alpha * color."""
    _check_image(image)
    mask = np.asarray(mask)
    if mask.dtype != np.uint8:
        raise ValueError(f"mask must be uint8 (0 / 1); got {mask.dtype}.")
    if np.any((mask != 0) & (mask != 1)):
        raise ValueError("mask values must be 0 or 1.")
    if mask.shape != image.shape[:2]:
        raise ValueError(f"the image is {image.shape[:2]} but the mask is {mask.shape}.")
    weight = (alpha * mask)[..., None]
    blended = image * (1.0 - weight) + np.asarray(_rgb(color), np.float64) * weight
    np.copyto(image, np.round(blended).astype(np.uint8))


def _draw_labels(image: np.ndarray, left: float, top: float, bottom: float, color: Color,
                 display_str_list: Sequence[str]) -> None:
    """Label strings in black on `color` above the box (below it when there is no room), with
    Pillow; nothing without Pillow."""
    try:
        from PIL import Image, ImageDraw, ImageFont  # pylint: disable=import-outside-toplevel
    except ImportError:
        return
    if not display_str_list:
        return
    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    heights = [font.getbbox(text)[3] for text in display_str_list]
    total = 1.1 * sum(heights)  # a 5 % margin above and below each line
    text_bottom = top if top > total else bottom + total
    for text in reversed(list(display_str_list)):
        width, height = font.getbbox(text)[2:4]
        margin = np.ceil(0.05 * height)
        draw.rectangle([(left, text_bottom - height - 2 * margin), (left + width, text_bottom)],
                       fill=_rgb(color))
        draw.text((left + margin, text_bottom - height - margin), text, fill=(0, 0, 0),
                  font=font)
        text_bottom -= height + 2 * margin
    np.copyto(image, np.asarray(canvas))


def draw_bounding_box_on_image_array(image: np.ndarray, ymin: float, xmin: float, ymax: float,
                                     xmax: float, color: Color = "red", thickness: int = 4,
                                     display_str_list: Sequence[str] = (),
                                     use_normalized_coordinates: bool = True) -> None:
    """Draws a box outline `thickness` pixels wide, centred on the box's edges, on `image` (in
    place), and its label strings (one a line) above it.

    Coordinates are fractions of the image size when `use_normalized_coordinates`, else
    pixels.
    """
    _check_image(image)
    height, width = image.shape[:2]
    if use_normalized_coordinates:
        ymin, ymax, xmin, xmax = ymin * height, ymax * height, xmin * width, xmax * width
    rgb = np.asarray(_rgb(color), np.uint8)
    low = thickness // 2

    def band(position, size):
        start = int(round(position)) - low
        return slice(min(max(start, 0), size), min(max(start + thickness, 0), size))

    rows = slice(min(max(int(round(ymin)) - low, 0), height),
                 min(max(int(round(ymax)) - low + thickness, 0), height))
    cols = slice(min(max(int(round(xmin)) - low, 0), width),
                 min(max(int(round(xmax)) - low + thickness, 0), width))
    image[band(ymin, height), cols] = rgb
    image[band(ymax, height), cols] = rgb
    image[rows, band(xmin, width)] = rgb
    image[rows, band(xmax, width)] = rgb
    _draw_labels(image, xmin, ymin, ymax, color, display_str_list)


def visualize_boxes_and_labels_on_image_array(
        image: np.ndarray, boxes: np.ndarray, classes: np.ndarray,
        scores: Optional[np.ndarray], category_index: Dict[int, dict],
        instance_masks: Optional[np.ndarray] = None,
        instance_boundaries: Optional[np.ndarray] = None, keypoints=None,
        use_normalized_coordinates: bool = False, max_boxes_to_draw: Optional[int] = 20,
        min_score_thresh: float = 0.5, agnostic_mode: bool = False, line_thickness: int = 4,
        groundtruth_box_visualization_color: Color = "black", skip_scores: bool = False,
        skip_labels: bool = False) -> np.ndarray:
    """Draws boxes (ymin, xmin, ymax, xmax) with "name: score%" labels and masks on `image`
    in place, and returns it (TFM's function, same arguments).

    Boxes scoring above `min_score_thresh` among the first `max_boxes_to_draw` (None: all) are
    drawn in their class's colour (`STANDARD_COLORS[class % len]`; 'DarkOrange' in
    `agnostic_mode`, which also drops the class names); with `scores` None they are ground
    truth, drawn in `groundtruth_box_visualization_color` without labels. Boxes at the same
    place share one outline and stack their labels. `category_index` maps class id ->
    {'id', 'name'} (unknown ids read 'N/A'). `instance_masks` / `instance_boundaries` are
    [N, h, w] 0/1 uint8, blended at 0.4 in the box's colour / drawn solid red. Keypoints are
    not drawn (ValueError if given).
    """
    _check_image(image)
    if keypoints is not None:
        raise ValueError("keypoints are not drawn by lite_launcher's visualization_utils; "
                         "pass keypoints=None.")
    boxes = np.asarray(boxes)
    display_strings = collections.defaultdict(list)
    colors: Dict[tuple, Color] = {}
    masks, boundaries = {}, {}
    limit = boxes.shape[0] if not max_boxes_to_draw else min(max_boxes_to_draw, boxes.shape[0])
    for i in range(limit):
        if scores is not None and not scores[i] > min_score_thresh:
            continue
        box = tuple(boxes[i].tolist())
        if instance_masks is not None:
            masks[box] = instance_masks[i]
        if instance_boundaries is not None:
            boundaries[box] = instance_boundaries[i]
        if scores is None:
            colors[box] = groundtruth_box_visualization_color
            continue
        text = ""
        if not skip_labels and not agnostic_mode:
            text = str(category_index.get(classes[i], {"name": "N/A"})["name"])
        if not skip_scores:
            percent = f"{int(100 * scores[i])}%"
            text = f"{text}: {percent}" if text else percent
        display_strings[box].append(text)
        colors[box] = ("DarkOrange" if agnostic_mode
                       else STANDARD_COLORS[int(classes[i]) % len(STANDARD_COLORS)])
    for box, color in colors.items():
        if box in masks:
            draw_mask_on_image_array(image, masks[box], color=color)
        if box in boundaries:
            draw_mask_on_image_array(image, boundaries[box], color="red", alpha=1.0)
        draw_bounding_box_on_image_array(
            image, *box, color=color, thickness=line_thickness,
            display_str_list=display_strings[box],
            use_normalized_coordinates=use_normalized_coordinates)
    return image


def encode_image_array_as_png_str(image: np.ndarray) -> bytes:
    """The PNG bytes of a uint8 [h, w, 3] image."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.io.encode_png(np.asarray(image, np.uint8)).numpy()


def save_image_array_as_png(image: np.ndarray, output_path: str) -> None:
    """Writes a uint8 [h, w, 3] image to `output_path` as PNG."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.io.write_file(output_path, encode_image_array_as_png_str(image))


__all__ = ["STANDARD_COLORS", "draw_mask_on_image_array", "draw_bounding_box_on_image_array",
           "visualize_boxes_and_labels_on_image_array", "encode_image_array_as_png_str",
           "save_image_array_as_png"]
