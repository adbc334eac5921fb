"""TFDS datasets in a tutorial's shape without network: `tfds.testing.mock_data` serving the
examples a test gives, with split metadata, for the TFM tutorials that call `tfds.load`.

TFDS's own random mock examples do not fit the tutorials: the pip package ships no metadata, so
`ds_info.splits` is empty (the tutorials read `splits['test'].num_examples` and slice
'test[50%:80%]'), class names are missing, and oxford_iiit_pet's random image and mask get
different sizes. Its generator is also a Python call per example, slow behind a training
shuffle buffer of 10,000."""

import contextlib
import functools
import os

import tensorflow as tf
import tensorflow_datasets as tfds


def write_metadata(data_dir, name, split_sizes, class_names=None):
    """TFDS's dataset_info.json for `name` under data_dir with {split: num_examples}; each
    ClassLabel feature in class_names ({feature: names}) gets those names."""
    builder = tfds.builder(name, data_dir=data_dir)
    for feature, names in (class_names or {}).items():
        builder.info.features[feature].names = names
    builder.info.set_splits(tfds.core.SplitDict([
        tfds.core.SplitInfo(name=split, shard_lengths=[size], num_bytes=0)
        for split, size in split_sizes.items()]))
    os.makedirs(builder.data_dir, exist_ok=True)
    builder.info.write_to_directory(builder.data_dir)


@contextlib.contextmanager
def mock_tfds(data_dir, name, split_sizes, examples_by_split, class_names=None):
    """Within the context `tfds.load(name, split=S)` gives `examples_by_split[S]` (a list of
    {feature: numpy array} in order; S as the caller spells it, e.g. 'test[50%:80%]') and
    `ds_info.splits` has split_sizes."""
    write_metadata(data_dir, name, split_sizes, class_names)

    def as_dataset(builder, split, decoders=None, read_config=None, **kwargs):
        del read_config, kwargs
        assert builder.name == name and decoders is None, (builder.name, decoders)
        examples = examples_by_split[str(split)]
        return functools.reduce(tf.data.Dataset.concatenate,
                                [tf.data.Dataset.from_tensors(e) for e in examples])

    with tfds.testing.mock_data(data_dir=data_dir, as_dataset_fn=as_dataset):
        yield
