"""Turns a folder of clips (one sub-folder per class) into SequenceExample TFRecord shards in
TFM's video classification format.

    python -m lite_launcher.vision.data.make_video_tfrecords --input_dir DIR \
        --output_prefix OUT [--num_shards N] [--keep_format] [--seed S]

A clip is either a folder of frames (JPEG / PNG / BMP files, in name order) or a video file
(.mp4, .avi, .mov, .mkv, .webm, .m4v, .mpg, .mpeg, .wmv, .flv), decoded with PyAV: the optional
extra `lite_launcher[video]`; without it a folder holding video files is refused in one line
naming the extra, before anything is written. Class sub-folders are sorted by name and
numbered from 0; the names are written, one a line, to `OUT-labels.txt`.

Each record holds the context `clip/label/index` (int64), `clip/label/text` (the class name)
and `clip/data_path` (the clip's path under DIR), and the feature list `image/encoded`: one
JPEG per frame (JPEG files kept as they are; other frames encoded at quality 95, or with
`--keep_format` PNG files kept as they are and video frames stored as PNG). That is what TFM's
`video_input.Decoder` and lite's read.

A clip that cannot be read (a corrupt frame, an unreadable video, no frames, frames of
different sizes) is skipped with a warning naming it, and the count is printed at the end.
Clips are shuffled (seeded) and dealt round-robin into `OUT-00000-of-0000N`; the shards are
written to temporary files and renamed into place together once all are complete, so an
interrupted run leaves no half-written shard. Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
from typing import Iterator, List, Optional, Sequence, Tuple

from lite_launcher.common import atomic_write
from lite_launcher.common.errors import MissingExtraError, import_extra
from lite_launcher.vision.data.make_tfrecords import USER_ERROR_EXIT_CODE, InputError

FRAME_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp")
VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv",
                    ".flv")
JPEG_QUALITY = 95


class UnreadableClipError(Exception):
    """A clip that cannot become a record (skipped with a warning)."""


def _is_video(path: str) -> bool:
    return os.path.isfile(path) and path.lower().endswith(VIDEO_EXTENSIONS)


def list_clips(input_dir: str) -> Tuple[List[str], List[Tuple[str, int]]]:
    """(sorted class names, [(clip path, label)]) of `input_dir`: every frame folder and
    video file in each class folder."""
    if not os.path.isdir(input_dir):
        raise InputError(f"--input_dir {input_dir!r} is not a directory.")
    classes = sorted(d for d in os.listdir(input_dir)
                     if os.path.isdir(os.path.join(input_dir, d)) and not d.startswith("."))
    if not classes:
        raise InputError(f"--input_dir {input_dir!r} has no class sub-folders; put each "
                         f"class's clips in a sub-folder named after the class.")
    items = []
    for label, name in enumerate(classes):
        folder = os.path.join(input_dir, name)
        clips = [os.path.join(folder, entry) for entry in sorted(os.listdir(folder))
                 if not entry.startswith(".")]
        clips = [c for c in clips if os.path.isdir(c) or _is_video(c)]
        if not clips:
            raise InputError(f"class folder {folder!r} holds no clips (frame folders or "
                             f"{', '.join(VIDEO_EXTENSIONS)} files).")
        items += [(clip, label) for clip in clips]
    return classes, items


def import_av():
    """PyAV, or `MissingExtraError` in one line naming the extra."""
    return import_extra("av", "decoding video files needs PyAV", "video")


def _encode(tf, pixels, as_png: bool) -> bytes:
    if as_png:
        return tf.io.encode_png(pixels).numpy()
    return tf.io.encode_jpeg(pixels, quality=JPEG_QUALITY).numpy()


def _folder_frames(tf, folder: str, keep_format: bool) -> Iterator[Tuple[bytes, tuple]]:
    """(stored bytes, decoded shape) of each frame file of `folder`, in name order."""
    names = sorted(f for f in os.listdir(folder) if f.lower().endswith(FRAME_EXTENSIONS))
    for name in names:
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        try:
            pixels = tf.io.decode_image(data, channels=3, expand_animations=False)
        except (tf.errors.InvalidArgumentError, ValueError) as error:
            raise UnreadableClipError(f"frame {name!r} is not a readable image: "
                                      f"{' '.join(str(error).split())[:100]}") from None
        is_jpeg = data[:3] == b"\xff\xd8\xff"
        if not is_jpeg and not (keep_format and data[:4] == b"\x89PNG"):
            data = _encode(tf, pixels, as_png=False)
        yield data, tuple(pixels.shape)


def _video_frames(tf, path: str, keep_format: bool) -> Iterator[Tuple[bytes, tuple]]:
    """(stored bytes, shape) of each frame of the first video stream of `path` (PyAV)."""
    av = import_av()
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise UnreadableClipError("it has no video stream")
            for frame in container.decode(video=0):
                pixels = frame.to_ndarray(format="rgb24")
                yield _encode(tf, pixels, as_png=keep_format), pixels.shape
    except (av.FFmpegError, OSError, ValueError) as error:
        raise UnreadableClipError(f"it does not decode: {' '.join(str(error).split())[:100]}"
                                  ) from None


def clip_example(clip: str, label: int, class_name: str, data_path: str,
                 keep_format: bool = False):
    """The `tf.train.SequenceExample` of one clip; `UnreadableClipError` if it cannot be."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    example = tf.train.SequenceExample()
    context = example.context.feature
    context["clip/label/index"].int64_list.value[:] = [label]
    context["clip/label/text"].bytes_list.value[:] = [class_name.encode()]
    context["clip/data_path"].bytes_list.value[:] = [data_path.encode()]
    frames = example.feature_lists.feature_list["image/encoded"]
    read = _video_frames if _is_video(clip) else _folder_frames
    first_shape = None
    for data, shape in read(tf, clip, keep_format):
        if first_shape is None:
            first_shape = shape
        elif shape != first_shape:
            raise UnreadableClipError(f"frame {len(frames.feature)} is {shape[0]}x{shape[1]} "
                                      f"but the first is {first_shape[0]}x{first_shape[1]}")
        frames.feature.add().bytes_list.value[:] = [data]
    if first_shape is None:
        raise UnreadableClipError("it has no frames")
    return example


def _check_output(output_prefix: str, num_shards: int, num_items: int):
    if num_shards < 1:
        raise InputError(f"--num_shards ({num_shards}) must be >= 1.")
    if num_shards > num_items:
        raise InputError(f"--num_shards ({num_shards}) is more than the {num_items} clips.")
    parent = os.path.dirname(os.path.abspath(output_prefix))
    if not os.path.isdir(parent):
        raise InputError(f"--output_prefix {output_prefix!r}: directory {parent!r} does not "
                         f"exist.")


def make_video_tfrecords(input_dir: str, output_prefix: str, num_shards: int = 1,
                         keep_format: bool = False, seed: int = 0,
                         warn=None) -> Tuple[List[str], List[str]]:
    """Writes the shards and `output_prefix-labels.txt`; returns (shard paths, skipped clips).

    `warn(message)` reports each skipped clip (default: a line on stderr). Raises `InputError`
    for bad arguments, `MissingExtraError` when video files need PyAV and it is missing, and
    `InputError` when no clip could be read (then nothing is written)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    warn = warn or (lambda message: sys.stderr.write(f"make_video_tfrecords: warning: "
                                                     f"{message}\n"))
    classes, items = list_clips(input_dir)
    _check_output(output_prefix, num_shards, len(items))
    videos = [clip for clip, _ in items if _is_video(clip)]
    if videos:
        try:
            import_av()
        except MissingExtraError as error:
            raise MissingExtraError(f"{os.path.relpath(videos[0], input_dir)!r} is a video "
                                    f"file: {error}") from None
    random.Random(seed).shuffle(items)
    paths = [f"{output_prefix}-{k:05d}-of-{num_shards:05d}" for k in range(num_shards)]
    skipped: List[str] = []
    written = 0
    with contextlib.ExitStack() as stack:
        # Renamed into place together once every clip was written; an error removes them.
        temporaries = [stack.enter_context(atomic_write.atomic_path(p)) for p in paths]
        writers = [stack.enter_context(tf.io.TFRecordWriter(t)) for t in temporaries]
        for clip, label in items:
            data_path = os.path.relpath(clip, input_dir)
            try:
                example = clip_example(clip, label, classes[label], data_path, keep_format)
            except UnreadableClipError as error:
                warn(f"skipped clip {data_path!r}: {error}.")
                skipped.append(data_path)
                continue
            writers[written % num_shards].write(example.SerializeToString())
            written += 1
        if written < num_shards:
            raise InputError(f"only {written} of the {len(items)} clips could be read, fewer "
                             f"than --num_shards ({num_shards}); nothing was written.")
    atomic_write.write_text(f"{output_prefix}-labels.txt",
                            "".join(f"{name}\n" for name in classes))
    return paths, skipped


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lite_launcher.vision.data.make_video_tfrecords",
        description="Folder of clips (one sub-folder per class; a clip is a folder of frames "
                    "or a video file) -> SequenceExample TFRecord shards in TFM's video "
                    "classification format.")
    parser.add_argument("--input_dir", required=True,
                        help="One sub-folder per class, holding frame folders or video files.")
    parser.add_argument("--output_prefix", required=True,
                        help="Shards are written as PREFIX-00000-of-0000N.")
    parser.add_argument("--num_shards", type=int, default=1)
    parser.add_argument("--keep_format", action="store_true",
                        help="Store PNG frames as they are and video frames as PNG (default: "
                             "JPEG, which TFM's video configs name as input_image_format).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the clip shuffle.")
    args = parser.parse_args(argv)
    try:
        paths, skipped = make_video_tfrecords(args.input_dir, args.output_prefix,
                                              args.num_shards, args.keep_format, args.seed)
    except (InputError, MissingExtraError) as error:
        sys.stderr.write(f"make_video_tfrecords: error: {error}\n")
        return USER_ERROR_EXIT_CODE
    print(f"Wrote {len(paths)} shard(s): {paths[0]}" + (" ..." if len(paths) > 1 else "")
          + f"; skipped {len(skipped)} unreadable clip(s).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
