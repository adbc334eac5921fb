"""Detection records in: lite's TfExampleDecoder (+ label map) and create_coco_tf_record against
TFM 2.20's on the same records and COCO JSON (data/tfm_coco_reference.json, made by
data/make_tfm_coco_reference.py), and their bad-input one-liners."""

import base64
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.common import errors
from lite_launcher.vision.data import create_coco_tf_record, tfrecord_lib
from lite_launcher.vision.dataloaders import tf_example_decoder, tf_example_label_map_decoder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from missing_module import block_import  # noqa: E402

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "tfm_coco_reference.json")
with open(REFERENCE) as _f:
    REF = json.load(_f)
DECODER = REF["decoder"]
CONVERTER = REF["converter"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _record(name):
    return tf.constant(base64.b64decode(DECODER["records"][name]))


def _assert_decoded_equal(lite, tfm):
    assert sorted(lite) == sorted(tfm)
    for key, expected in tfm.items():
        value = lite[key].numpy()
        if isinstance(expected, str):
            assert value == base64.b64decode(expected), key
        elif isinstance(expected, list):
            assert [bytes(v) for v in value.ravel()] == [base64.b64decode(e) for e in expected]
        else:
            assert str(value.dtype) == expected["dtype"], key
            assert list(value.shape) == expected["shape"], key
            np.testing.assert_array_equal(value.ravel(), np.asarray(
                expected["values"], dtype=value.dtype), err_msg=key)


@pytest.mark.parametrize("option", sorted(DECODER["options"]))
@pytest.mark.parametrize("record", ["full", "sparse", "empty"])
def test_decoder_output_equals_tfms(option, record):
    kwargs = DECODER["options"][option]
    # "sparse" has a box but no mask: TFM decodes zero masks, lite's check refuses the record
    # (test_a_box_without_its_mask_is_a_bad_record), so compare with the check off.
    validate = not (record == "sparse" and kwargs.get("include_mask"))
    decoder = tf_example_decoder.TfExampleDecoder(**kwargs, validate=validate)
    _assert_decoded_equal(decoder.decode(_record(record)),
                          DECODER["outputs"][option][record])


@pytest.mark.parametrize("record", ["full", "sparse"])
def test_label_map_decoder_output_equals_tfms(tmp_path, record):
    label_map = tmp_path / "label_map.csv"
    label_map.write_text(DECODER["label_map_csv"])
    decoder = tf_example_label_map_decoder.TfExampleDecoderLabelMap(str(label_map))
    _assert_decoded_equal(decoder.decode(_record(record)),
                          DECODER["outputs"]["label_map"][record])


def _example(**overrides):
    features = {
        "image/encoded": [tf.io.encode_png(tf.zeros([4, 4, 3], tf.uint8)).numpy()],
        "image/source_id": [b"42"],
        "image/object/bbox/ymin": [0.1], "image/object/bbox/xmin": [0.2],
        "image/object/bbox/ymax": [0.5], "image/object/bbox/xmax": [0.6],
        "image/object/class/label": [1],
    }
    features.update(overrides)
    features = {k: tfrecord_lib.convert_to_feature(v) for k, v in features.items() if v}
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def _bad_record_line(decoder, serialized):
    """The one line the driver makes of the decode's failure in a tf.data pipeline."""
    dataset = tf.data.Dataset.from_tensors(serialized).map(decoder.decode)
    with pytest.raises(tf.errors.InvalidArgumentError) as failure:
        next(iter(dataset))
    error = errors.input_record_error(str(failure.value))
    assert error is not None and "\n" not in str(error)
    return str(error)


@pytest.mark.parametrize("overrides, expected", [
    ({"image/object/bbox/xmax": [1.5]}, "record 42 has boxes outside [0, 1] in "
                                        "image/object/bbox/* (ymin, xmin, ymax, xmax): "
                                        "[0.1 0.2 0.5 1.5]"),
    ({"image/object/bbox/ymin": [0.7]}, "record 42 has boxes with ymin > ymax or xmin > "
                                        "xmax in image/object/bbox/* (ymin, xmin, ymax, "
                                        "xmax): [0.7 0.2 0.5 0.6]"),
    ({"image/object/class/label": []}, "record 42 has 1 boxes but 0 labels in "
                                       "image/object/class/label"),
])
def test_bad_records_fail_in_one_line_naming_record_and_field(overrides, expected):
    line = _bad_record_line(tf_example_decoder.TfExampleDecoder(), _example(**overrides))
    assert expected in line, line


def test_a_box_without_its_mask_is_a_bad_record():
    line = _bad_record_line(tf_example_decoder.TfExampleDecoder(include_mask=True),
                            _example())
    assert "record 42 has 1 boxes but 0 masks in image/object/mask" in line, line


def test_label_map_decoder_names_an_unknown_class(tmp_path):
    label_map = tmp_path / "map.csv"
    label_map.write_text("1,dog\n")
    decoder = tf_example_label_map_decoder.TfExampleDecoderLabelMap(str(label_map))
    line = _bad_record_line(decoder, _example(**{"image/object/class/text": [b"yak"]}))
    assert "record 42 names classes" in line and "yak" in line


def test_a_bad_label_map_is_one_line(tmp_path):
    label_map = tmp_path / "map.csv"
    label_map.write_text("1,dog\ncat\n")
    with pytest.raises(errors.ConfigError, match="row 2 is \\['cat'\\]; each row must be"):
        tf_example_label_map_decoder.TfExampleDecoderLabelMap(str(label_map))


def test_record_checks_add_no_branch_functions_to_the_map():
    # tf.debugging.Assert's guarding cond would add two functions per check, each optimised
    # again at every iterator creation (every evaluation).
    decoder = tf_example_decoder.TfExampleDecoder(include_mask=True)
    unchecked = tf_example_decoder.TfExampleDecoder(include_mask=True, validate=False)
    graphs = [tf.function(d.decode).get_concrete_function(
        tf.TensorSpec([], tf.string)).graph.as_graph_def() for d in (decoder, unchecked)]
    assert [len(g.library.function) for g in graphs] == [len(graphs[1].library.function)] * 2
    assert sum(node.op == "Assert" for node in graphs[0].node) == 6


def test_validation_off_decodes_as_tfm_does():
    decoded = tf_example_decoder.TfExampleDecoder(validate=False).decode(
        _example(**{"image/object/bbox/xmax": [1.5]}))
    assert decoded["groundtruth_boxes"].numpy()[0, 3] == 1.5


# ----- converter ---------------------------------------------------------------------------


def _write_coco(tmp_path):
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    for name, data in CONVERTER["images"].items():
        (image_dir / name).write_bytes(base64.b64decode(data))
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps(CONVERTER["object_annotations"]))
    captions = tmp_path / "captions.json"
    captions.write_text(json.dumps(CONVERTER["caption_annotations"]))
    return image_dir, instances, captions


def _features(example):
    out = {}
    for key, value in sorted(example.features.feature.items()):
        kind = value.WhichOneof("kind")
        values = list(getattr(value, kind).value)
        out[key] = [kind, [base64.b64encode(v).decode() for v in values]
                    if kind == "bytes_list" else values]
    return out


def _png_pixels(encoded):
    return tf.io.decode_png(base64.b64decode(encoded)).numpy()


@pytest.mark.parametrize("include_masks", [False, True])
def test_converter_records_equal_tfms(tmp_path, include_masks):
    image_dir, instances, captions = _write_coco(tmp_path)
    prefix = tmp_path / "out" / "coco"
    assert create_coco_tf_record.main([
        f"--image_dir={image_dir}", f"--object_annotations_file={instances}",
        f"--caption_annotations_file={captions}", f"--output_file_prefix={prefix}",
        "--num_shards=2", f"--include_masks={include_masks}", "--logtostderr"]) == 0
    expected_shards = CONVERTER["shards"][f"include_masks={include_masks}"]
    assert sorted(os.listdir(prefix.parent)) == sorted(expected_shards)
    for shard, expected_records in expected_shards.items():
        records = [_features(tf.train.Example.FromString(r.numpy()))
                   for r in tf.data.TFRecordDataset(str(prefix.parent / shard))]
        assert len(records) == len(expected_records)
        for lite, tfm in zip(records, expected_records):
            lite_masks, tfm_masks = lite.pop("image/object/mask", None), tfm.pop(
                "image/object/mask", None)
            assert lite == tfm
            assert (lite_masks is None) == (tfm_masks is None)
            if tfm_masks:  # PNG bytes differ by encoder: compare the pixels
                assert len(lite_masks[1]) == len(tfm_masks[1])
                for ours, theirs in zip(lite_masks[1], tfm_masks[1]):
                    np.testing.assert_array_equal(_png_pixels(ours), _png_pixels(theirs))
                    assert _png_pixels(theirs).max() == 1


def test_coco_annotations_to_lists_equals_tfms():
    data, skipped = create_coco_tf_record.coco_annotations_to_lists(
        CONVERTER["object_annotations"]["annotations"][:4], {1: "circle", 5: "square"},
        12, 16, include_masks=False)
    expected = CONVERTER["coco_annotations_to_lists"]
    data["category_names"] = [base64.b64encode(n).decode() for n in data["category_names"]]
    assert data == expected["data"] and skipped == expected["num_skipped"] == 2


def test_a_missing_image_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    image_dir, instances, _ = _write_coco(tmp_path)
    os.remove(image_dir / "img3.png")
    out = tmp_path / "out"
    out.mkdir()
    code = create_coco_tf_record.main([
        f"--image_dir={image_dir}", f"--object_annotations_file={instances}",
        f"--output_file_prefix={out / 'coco'}", "--num_shards=2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "image 'img3.png' (id 3) named by the annotations is not in --image_dir" in err
    assert os.listdir(out) == []


def test_a_failure_while_writing_leaves_no_shard(tmp_path):
    def fail_on_second(value):
        if value == 2:
            raise RuntimeError("boom")
        return tf.train.Example(), 0

    with pytest.raises(RuntimeError, match="boom"):
        tfrecord_lib.write_tf_record_dataset(str(tmp_path / "x"), [1, 2, 3], fail_on_second,
                                             2, unpack_arguments=False)
    assert os.listdir(tmp_path) == []


def test_the_converter_starts_without_tensorflow():
    code = ("import sys; from lite_launcher.vision.data import create_coco_tf_record as c; "
            "assert c.main(['--image_dir=/nowhere']) == 2; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": ROOT}, check=True)
    assert result.stdout.strip() == "[]"
    assert result.stderr.strip() == ("create_coco_tf_record: error: All annotation files are "
                                     "missing: give --object_annotations_file (or "
                                     "--image_info_file / --caption_annotations_file).")


@pytest.mark.parametrize("value, kind, expected", [
    (3, "int64_list", [3]), ([1.5, 2.0], "float_list", [1.5, 2.0]),
    (np.int32(7), "int64_list", [7]), ([b"a", b"b"], "bytes_list", [b"a", b"b"]),
])
def test_convert_to_feature_infers_the_type(value, kind, expected):
    feature = tfrecord_lib.convert_to_feature(value)
    assert feature.WhichOneof("kind") == kind
    assert list(getattr(feature, kind).value) == expected


def test_include_masks_without_pycocotools_names_the_extra(tmp_path, capsys, monkeypatch):
    image_dir, instances, _ = _write_coco(tmp_path)
    block_import(monkeypatch, "pycocotools")
    code = create_coco_tf_record.main([
        f"--image_dir={image_dir}", f"--object_annotations_file={instances}",
        f"--output_file_prefix={tmp_path / 'out'}", "--num_shards=1", "--include_masks"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--include_masks:" in err and "pip install 'lite_launcher[detection]'" in err
    assert not list(tmp_path.glob("out*"))
