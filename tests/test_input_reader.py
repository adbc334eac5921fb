"""InputReader: file matching, sharding across input pipelines, shuffling, batching, errors."""

import os

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.core.config_definitions import DataConfig
from lite_launcher.core.input_reader import (InputReader, match_files, per_replica_batch_size,
                                        pick_dataset_fn)


def _write_int_files(directory, num_files, per_file):
    """Writes TFRecord files whose records are the decimal strings of 0..num_files*per_file-1."""
    paths = []
    for f in range(num_files):
        path = os.path.join(str(directory), f"data-{f:03d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in range(per_file):
                writer.write(str(f * per_file + i).encode())
        paths.append(path)
    return paths


def _decode(record):
    return tf.strings.to_number(record, tf.int64)


def _context(pipeline_id, num_pipelines=2, replicas=2):
    return tf.distribute.InputContext(num_input_pipelines=num_pipelines,
                                      input_pipeline_id=pipeline_id,
                                      num_replicas_in_sync=replicas)


def _values(dataset, max_batches=None):
    batches = dataset if max_batches is None else dataset.take(max_batches)
    return np.concatenate([b.numpy().ravel() for b in batches]).tolist()


def _reader(input_path, **data):
    data.setdefault("global_batch_size", 2)
    return InputReader(DataConfig(input_path=input_path, **data), decoder_fn=_decode)


# ----- file matching -------------------------------------------------------


def test_match_files_sorts_globs_and_accepts_commas_and_lists(tmp_path):
    paths = _write_int_files(tmp_path, 3, 1)
    pattern = os.path.join(str(tmp_path), "data-*.tfrecord")
    assert match_files(pattern) == paths
    assert match_files(f"{paths[2]}, {paths[0]}") == [paths[2], paths[0]]
    assert match_files([paths[1], f"{paths[0]},{paths[2]}"]) == [paths[1], paths[0], paths[2]]


def test_missing_file_and_empty_pattern_name_the_path(tmp_path):
    missing = os.path.join(str(tmp_path), "nope.tfrecord")
    with pytest.raises(ConfigError, match="nope.tfrecord.*does not exist"):
        _reader(missing)
    pattern = os.path.join(str(tmp_path), "none-*.tfrecord")
    with pytest.raises(ConfigError, match=r"none-\*\.tfrecord.*does not match any files"):
        _reader(pattern)
    with pytest.raises(ConfigError, match="input_path is empty"):
        _reader("").read()
    with pytest.raises(ConfigError, match="names no files"):
        _reader(" , ")


# ----- sharding ------------------------------------------------------------


@pytest.mark.parametrize("num_files,per_file", [(4, 5), (1, 20), (1, 19)],
                         ids=["file_sharding", "element_sharding", "element_sharding_odd"])
def test_two_pipelines_see_every_element_once_per_epoch(tmp_path, num_files, per_file):
    _write_int_files(tmp_path, num_files, per_file)
    pattern = os.path.join(str(tmp_path), "*.tfrecord")
    shards = [_values(_reader(pattern, is_training=False, drop_remainder=False,
                              global_batch_size=2).read(_context(i)))
              for i in range(2)]
    total = num_files * per_file
    assert sorted(shards[0] + shards[1]) == list(range(total))
    assert abs(len(shards[0]) - len(shards[1])) <= 1


def test_file_sharding_gives_each_pipeline_whole_files(tmp_path):
    _write_int_files(tmp_path, 4, 5)
    pattern = os.path.join(str(tmp_path), "*.tfrecord")
    shard = _values(_reader(pattern, is_training=False).read(_context(1)))
    # Pipeline 1 of 2 reads files 1 and 3.
    assert sorted(shard) == list(range(5, 10)) + list(range(15, 20))


def test_fewer_files_than_pipelines_shards_elements(tmp_path):
    _write_int_files(tmp_path, 3, 4)
    pattern = os.path.join(str(tmp_path), "*.tfrecord")
    shards = [_values(_reader(pattern, is_training=False, drop_remainder=False,
                              global_batch_size=4).read(_context(i, num_pipelines=4, replicas=4)))
              for i in range(4)]
    assert sorted(sum(shards, [])) == list(range(12))
    assert [len(s) for s in shards] == [3, 3, 3, 3]


@pytest.mark.parametrize("num_files", [4, 1])
def test_training_shards_stay_disjoint_while_repeating(tmp_path, num_files):
    _write_int_files(tmp_path, num_files, 20 // num_files)
    pattern = os.path.join(str(tmp_path), "*.tfrecord")
    seen = []
    for i in range(2):
        # No seed: each pipeline shuffles differently, and the shards must still not overlap.
        reader = _reader(pattern, is_training=True, shuffle_buffer_size=8, global_batch_size=2)
        seen.append(set(_values(reader.read(_context(i)), max_batches=50)))  # 5 epochs
    assert not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(20))


def test_sharding_off_gives_every_pipeline_everything(tmp_path):
    _write_int_files(tmp_path, 4, 5)
    pattern = os.path.join(str(tmp_path), "*.tfrecord")
    for i in range(2):
        values = _values(_reader(pattern, is_training=False, sharding=False).read(_context(i)))
        assert sorted(values) == list(range(20))


# ----- shuffling, repeat, cache --------------------------------------------


def test_training_with_a_seed_repeats_its_order_run_to_run(tmp_path):
    _write_int_files(tmp_path, 4, 25)
    pattern = os.path.join(str(tmp_path), "*.tfrecord")

    def order(seed):
        return _values(_reader(pattern, is_training=True, seed=seed, shuffle_buffer_size=50,
                               cycle_length=2, deterministic=True).read(), max_batches=100)

    first = order(7)
    assert first == order(7)
    assert first != order(8)
    assert first[:100] != sorted(first[:100])  # it is shuffled
    assert len(first) == 200 and set(first) == set(range(100))  # repeats past one epoch


def test_evaluation_reads_once_in_file_order(tmp_path):
    _write_int_files(tmp_path, 1, 7)
    values = _values(_reader(os.path.join(str(tmp_path), "*.tfrecord"), is_training=False,
                             global_batch_size=3, drop_remainder=False).read())
    assert values == list(range(7))


def test_cache_still_repeats_and_shuffles_training_data(tmp_path):
    _write_int_files(tmp_path, 2, 5)
    pattern = os.path.join(str(tmp_path), "*.tfrecord")
    values = _values(_reader(pattern, is_training=True, cache=True, seed=1,
                             shuffle_buffer_size=10).read(), max_batches=15)
    assert len(values) == 30
    assert set(values) == set(range(10))
    assert values[:10] != list(range(10))


def test_deterministic_option_is_set(tmp_path):
    _write_int_files(tmp_path, 1, 2)
    pattern = os.path.join(str(tmp_path), "*.tfrecord")
    assert _reader(pattern, deterministic=False).read().options().deterministic is False
    assert _reader(pattern, deterministic=True).read().options().deterministic is True


# ----- batching --------------------------------------------------------------


def test_global_batch_is_split_per_replica(tmp_path):
    _write_int_files(tmp_path, 1, 20)
    pattern = os.path.join(str(tmp_path), "*.tfrecord")
    reader = _reader(pattern, is_training=False, global_batch_size=8, drop_remainder=True)
    batches = list(reader.read(_context(0, num_pipelines=1, replicas=2)))
    assert [b.shape[0] for b in batches] == [4] * 5
    reader = _reader(pattern, is_training=False, global_batch_size=8, drop_remainder=False)
    assert [b.shape[0] for b in reader.read()] == [8, 8, 4]
    reader = _reader(pattern, is_training=False, global_batch_size=8, drop_remainder=True)
    assert [b.shape[0] for b in reader.read()] == [8, 8]


def test_uneven_batch_split_names_batch_size_and_replicas(tmp_path):
    _write_int_files(tmp_path, 1, 4)
    reader = _reader(os.path.join(str(tmp_path), "*.tfrecord"), global_batch_size=10)
    with pytest.raises(ConfigError, match=r"global_batch_size \(10\).*replicas in sync \(4\)"):
        reader.read(_context(0, num_pipelines=1, replicas=4))
    assert per_replica_batch_size(12, _context(0, num_pipelines=1, replicas=4)) == 3
    assert per_replica_batch_size(10) == 10


def test_zero_batch_size_is_an_error(tmp_path):
    _write_int_files(tmp_path, 1, 4)
    reader = _reader(os.path.join(str(tmp_path), "*.tfrecord"), global_batch_size=0)
    with pytest.raises(ConfigError, match=r"global_batch_size \(0\)"):
        reader.read()


def test_parser_transform_and_postprocess_functions_run_in_order(tmp_path):
    _write_int_files(tmp_path, 1, 6)
    calls = []

    def transform_and_batch(dataset, input_context):
        calls.append(input_context)
        return dataset.batch(3)

    reader = InputReader(
        DataConfig(input_path=os.path.join(str(tmp_path), "*.tfrecord"), global_batch_size=99,
                   is_training=False),
        decoder_fn=_decode, parser_fn=lambda x: x * 10,
        transform_and_batch_fn=transform_and_batch, postprocess_fn=lambda b: b + 1)
    batches = [b.numpy().tolist() for b in reader.read()]
    assert batches == [[1, 11, 21], [31, 41, 51]]
    assert calls == [None]


def test_an_in_memory_source_dataset_is_sharded_and_batched():
    params = DataConfig(global_batch_size=4, is_training=False, drop_remainder=False)
    source = tf.data.Dataset.range(10)
    shards = [_values(InputReader(params).read(_context(i), dataset=source)) for i in range(2)]
    assert shards == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]


def test_compressed_tfrecords_are_read_with_pick_dataset_fn(tmp_path):
    path = os.path.join(str(tmp_path), "data.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for i in range(5):
            writer.write(str(i).encode())
    params = DataConfig(input_path=path, global_batch_size=5, is_training=False,
                        file_type="tfrecord_compressed")
    reader = InputReader(params, dataset_fn=pick_dataset_fn(params.file_type), decoder_fn=_decode)
    assert _values(reader.read()) == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match="'csv'"):
        pick_dataset_fn("csv")
