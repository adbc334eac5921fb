"""The data tool `python -m lite_launcher.vision.data.make_video_tfrecords`: clips on disk
(frame folders, video files through PyAV) -> SequenceExample shards the video input reads."""

import builtins
import os

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision.data import make_video_tfrecords as tool
from lite_launcher.vision.dataloaders import video_input
from video_clips import config


def _frames(seed, count, height=12, width=16):
    rng = np.random.RandomState(seed)
    return rng.randint(0, 256, size=(count, height, width, 3)).astype(np.uint8)


def _write_frame_folder(folder, frames, image_format):
    os.makedirs(folder)
    for index, frame in enumerate(frames):
        encode = tf.io.encode_png if image_format == "png" else tf.io.encode_jpeg
        with open(os.path.join(folder, f"{index:04d}.{image_format}"), "wb") as f:
            f.write(encode(frame).numpy())


def _read(paths):
    decoder = video_input.Decoder()
    decoder.add_context("clip/label/text", tf.io.FixedLenFeature((), tf.string))
    clips = {}
    for record in tf.data.TFRecordDataset(paths):
        decoded = decoder.decode(record)
        frames = tf.map_fn(lambda f: tf.io.decode_image(f, channels=3, expand_animations=False),
                           decoded["image/encoded"], fn_output_signature=tf.uint8).numpy()
        clips[decoded["clip/data_path"].numpy().decode()] = (
            frames, decoded["clip/label/index"].numpy().tolist(),
            decoded["clip/label/text"].numpy().decode(), decoded["image/encoded"].numpy())
    return clips


@pytest.fixture(name="clips_dir")
def _clips_dir(tmp_path):
    """walk/a (4 PNG frames), walk/b (3 JPEG frames), run/c (5 PNG frames), run/broken (a
    frame that is no image)."""
    root = tmp_path / "clips"
    _write_frame_folder(str(root / "walk" / "a"), _frames(1, 4), "png")
    _write_frame_folder(str(root / "walk" / "b"), _frames(2, 3), "jpg")
    _write_frame_folder(str(root / "run" / "c"), _frames(3, 5), "png")
    broken = root / "run" / "broken"
    _write_frame_folder(str(broken), _frames(4, 2), "png")
    (broken / "0002.png").write_bytes(b"\x89PNG but cut short")
    return root


def test_frame_folders_become_records_in_tfm_format(clips_dir, tmp_path, capsys):
    prefix = str(tmp_path / "out" / "clips")
    os.makedirs(os.path.dirname(prefix))
    assert tool.main(["--input_dir", str(clips_dir), "--output_prefix", prefix,
                      "--num_shards", "2", "--keep_format"]) == 0
    captured = capsys.readouterr()
    # The unreadable clip: one warning naming it, counted at the end.
    assert "skipped clip 'run/broken'" in captured.err and "0002.png" in captured.err
    assert "skipped 1 unreadable clip(s)" in captured.out
    shards = [f"{prefix}-0000{k}-of-00002" for k in range(2)]
    assert all(os.path.exists(s) for s in shards)
    assert open(f"{prefix}-labels.txt").read() == "run\nwalk\n"
    clips = _read(shards)
    assert sorted(clips) == ["run/c", "walk/a", "walk/b"]
    # PNG frames kept (lossless); JPEG files stored as they are.
    np.testing.assert_array_equal(clips["walk/a"][0], _frames(1, 4))
    np.testing.assert_array_equal(clips["run/c"][0], _frames(3, 5))
    assert clips["walk/a"][1:3] == ([1], "walk") and clips["run/c"][1:3] == ([0], "run")
    jpegs = [open(os.path.join(clips_dir, "walk", "b", f"{i:04d}.jpg"), "rb").read()
             for i in range(3)]
    assert list(clips["walk/b"][3]) == jpegs


def test_records_parse_as_video_clips(clips_dir, tmp_path):
    """Without --keep_format PNG frames become JPEGs; the parser reads the shards end to end."""
    prefix = str(tmp_path / "clips")
    paths, skipped = tool.make_video_tfrecords(str(clips_dir), prefix, warn=lambda m: None)
    assert skipped == ["run/broken"]
    assert all(f[:3] == b"\xff\xd8\xff" for f in _read(paths)["walk/a"][3])

    cfg = config(dict(feature_shape=(4, 8, 8, 3), num_test_clips=2, num_classes=2,
                      min_image_size=8), is_training=False, input_path=paths[0],
                 global_batch_size=3)
    features, labels = next(iter(video_input.build_dataset(cfg)))
    assert features["image"].shape == (6, 4, 8, 8, 3)
    assert sorted(labels.numpy().argmax(axis=1).tolist()) == [0, 1, 1]


def test_no_half_written_shard_when_interrupted(clips_dir, tmp_path, monkeypatch):
    prefix = str(tmp_path / "clips")
    calls = []

    def failing(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    original = tool.clip_example
    monkeypatch.setattr(tool, "clip_example", failing)
    with pytest.raises(KeyboardInterrupt):
        tool.make_video_tfrecords(str(clips_dir), prefix, num_shards=2, warn=lambda m: None)
    assert os.listdir(tmp_path) == ["clips"]  # the input folder only: no shard, no temporary


@pytest.mark.parametrize("args, message", [
    (["--num_shards", "0"], "--num_shards (0) must be >= 1"),
    (["--num_shards", "9"], "more than the 4 clips"),
])
def test_bad_arguments_are_one_line(clips_dir, tmp_path, capsys, args, message):
    code = tool.main(["--input_dir", str(clips_dir), "--output_prefix",
                      str(tmp_path / "o")] + args)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_no_readable_clip_writes_nothing(tmp_path, capsys):
    broken = tmp_path / "in" / "only" / "x"
    broken.mkdir(parents=True)
    (broken / "0.jpg").write_bytes(b"garbage")
    assert tool.main(["--input_dir", str(tmp_path / "in"), "--output_prefix",
                      str(tmp_path / "o")]) == 2
    assert "only 0 of the 1 clips could be read" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["in"]


def _block_av(monkeypatch):
    real_import = builtins.__import__

    def no_av(name, *args, **kwargs):
        if name == "av":
            raise ImportError("No module named 'av'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_av)


def test_video_files_without_pyav_are_refused_in_one_line(clips_dir, tmp_path, monkeypatch,
                                                          capsys):
    (clips_dir / "run" / "d.mp4").write_bytes(b"not decoded: refused before")
    _block_av(monkeypatch)
    code = tool.main(["--input_dir", str(clips_dir), "--output_prefix", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "'run/d.mp4' is a video file" in err and "pip install 'lite_launcher[video]'" in err
    assert not [f for f in os.listdir(tmp_path) if f.startswith("o")]


def _write_mp4(path, frames, rate=8):
    av = pytest.importorskip("av")
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=rate)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.options = {"qscale": "2"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def test_mp4_clips_decode_with_pyav(tmp_path, capsys):
    """An mp4 written by PyAV: every frame stored, close to the frames written (lossy codec);
    a file that does not decode is skipped with a warning naming it."""
    root = tmp_path / "in"
    (root / "wave").mkdir(parents=True)
    # Smooth frames (a lossy codec keeps them): a gradient moving one step a frame.
    ramp = np.linspace(0, 200, 32)[None, :, None] + np.zeros((32, 32, 3))
    frames = np.stack([np.roll(ramp, 2 * t, axis=1) for t in range(6)]).astype(np.uint8)
    _write_mp4(root / "wave" / "hello.mp4", frames)
    (root / "wave" / "bad.avi").write_bytes(b"RIFF not really a video")
    prefix = str(tmp_path / "v")
    assert tool.main(["--input_dir", str(root), "--output_prefix", prefix]) == 0
    assert "skipped clip 'wave/bad.avi'" in capsys.readouterr().err
    stored = _read([f"{prefix}-00000-of-00001"])["wave/hello.mp4"][0]
    assert stored.shape == frames.shape
    assert np.abs(stored.astype(float) - frames).mean() < 4.0
