"""`InputReader`: turns a `DataConfig` and a few functions into a batched `tf.data.Dataset`.

Follows the behaviour of TFM's official/core/input_reader.py for file inputs:

  files -> [shard] -> [shuffle files] -> read (interleave) -> [shuffle] -> decode -> parse
        -> [cache] -> batch per replica -> postprocess -> prefetch

with training data repeated forever and evaluation data read once. With `tfds_name` the
source is a TensorFlow Datasets split instead of files (TFM's `_read_tfds`: `tfds_split`,
`tfds_data_dir`, `tfds_as_supervised`, `tfds_skip_decoding_feature`), read through the
optional extra `lite_launcher[tfds]`; `decoder_fn` then receives TFDS's elements (a dict of
its feature names, or `(input, label)` with `tfds_as_supervised`). The tf.data service is not
supported.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Union

import tensorflow as tf

from lite_launcher.common import autograph_policy
from lite_launcher.common.errors import MissingExtraError
from lite_launcher.core.base_config import ConfigError

_GLOB_CHARS = ("*", "?", "[")


def match_files(input_path: Union[Sequence[str], str]) -> List[str]:
    """Expands `input_path` into a list of files.

    `input_path` is a path or glob pattern, several of them separated by commas, or a list of
    such strings. Glob matches are sorted, so the file order does not depend on the file
    system; the order of the patterns themselves is kept. A pattern that matches nothing or
    a plain path that does not exist raises `ConfigError` naming it.
    """
    if isinstance(input_path, str):
        entries = [input_path]
    elif isinstance(input_path, (list, tuple)) and all(isinstance(p, str) for p in input_path):
        entries = list(input_path)
    else:
        raise ConfigError(
            f"input_path must be a path / glob pattern, comma-separated patterns, or a list of "
            f"them; got {type(input_path).__name__} ({input_path!r}).")
    files: List[str] = []
    for entry in entries:
        for pattern in entry.split(","):
            pattern = pattern.strip()
            if not pattern:
                continue
            if any(c in pattern for c in _GLOB_CHARS):
                matched = sorted(tf.io.gfile.glob(pattern))
                if not matched:
                    raise ConfigError(f"input_path pattern {pattern!r} does not match any files.")
                files.extend(matched)
            elif tf.io.gfile.exists(pattern):
                files.append(pattern)
            else:
                raise ConfigError(f"input_path file {pattern!r} does not exist.")
    if not files:
        raise ConfigError(
            f"input_path {input_path!r} names no files; set it to a file, a glob pattern or a "
            f"list of them.")
    return files


def per_replica_batch_size(global_batch_size: int,
                           input_context: Optional[tf.distribute.InputContext] = None) -> int:
    """`global_batch_size` divided by the replicas in sync; raises `ConfigError` if uneven."""
    if input_context is None:
        return global_batch_size
    replicas = input_context.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ConfigError(
            f"global_batch_size ({global_batch_size}) is not divisible by the number of "
            f"replicas in sync ({replicas}); choose a multiple of {replicas}.")
    return global_batch_size // replicas


def pick_dataset_fn(file_type: str) -> Callable[..., tf.data.Dataset]:
    """The record reader for `DataConfig.file_type`: 'tfrecord' or 'tfrecord_compressed' (GZIP)."""
    if file_type == "tfrecord":
        return tf.data.TFRecordDataset
    if file_type == "tfrecord_compressed":
        return lambda filenames: tf.data.TFRecordDataset(filenames, compression_type="GZIP")
    raise ConfigError(
        f"file_type {file_type!r} is not supported; use 'tfrecord' or 'tfrecord_compressed'.")


def _num_pipelines(input_context) -> int:
    return input_context.num_input_pipelines if input_context else 1


def _map(dataset: tf.data.Dataset, fn) -> tf.data.Dataset:
    if fn is None:
        return dataset
    # A lite_launcher parser is traced unconverted; a user's is converted (autograph_policy).
    return dataset.map(autograph_policy.for_tracing(fn), num_parallel_calls=tf.data.AUTOTUNE)


class InputReader:
    """Builds the `tf.data.Dataset` of one `DataConfig`.

    Args:
      params: the `DataConfig`. `input_path` names the files (see `match_files`); they are
        matched here, so a missing file is reported before any dataset is built.
      dataset_fn: reads records from files. It is called either with one file name (a scalar
        string tensor, when files are sharded and interleaved) or with the list of all files
        (when there is a single file or fewer files than input pipelines), as
        `tf.data.TFRecordDataset` accepts.
      decoder_fn: maps one serialized record to tensors (e.g. parses a `tf.train.Example`).
      parser_fn: maps the decoded tensors to the model's (features, labels).
      transform_and_batch_fn: `(dataset, input_context) -> dataset`; replaces the default
        batching (per-replica batch size, `drop_remainder`).
      postprocess_fn: maps each batch.
    """

    def __init__(self, params, dataset_fn=tf.data.TFRecordDataset,
                 decoder_fn: Optional[Callable[..., Any]] = None,
                 parser_fn: Optional[Callable[..., Any]] = None,
                 transform_and_batch_fn: Optional[Callable[..., tf.data.Dataset]] = None,
                 postprocess_fn: Optional[Callable[..., Any]] = None):
        self._params = params
        self._tfds_builder = None
        if getattr(params, "tfds_name", ""):
            # As TFM: a TFDS name wins over input_path. Checked here, before any dataset.
            self._tfds_builder = tfds_builder(params)
            self._files = None
        else:
            # Files are optional only for callers that pass their own source dataset to read().
            self._files = match_files(params.input_path) if params.input_path else None
        self._dataset_fn = dataset_fn
        self._decoder_fn = decoder_fn
        self._parser_fn = parser_fn
        self._transform_and_batch_fn = transform_and_batch_fn
        self._postprocess_fn = postprocess_fn

    @property
    def files(self) -> Optional[List[str]]:
        """The matched input files (None when `input_path` is empty)."""
        return None if self._files is None else list(self._files)

    @property
    def _is_training(self) -> bool:
        return bool(self._params.is_training)

    def _repeat_source(self) -> bool:
        # With cache, the repeat comes after cache() so that the files are read only once.
        return self._is_training and not self._params.cache

    def _shard_files_then_read(self, files, input_context) -> tf.data.Dataset:
        p = self._params
        dataset = tf.data.Dataset.from_tensor_slices(files)
        # Shard before shuffling: the shards are then disjoint whatever the seed, even when
        # every input pipeline shuffles its files differently.
        if p.sharding and _num_pipelines(input_context) > 1:
            dataset = dataset.shard(input_context.num_input_pipelines,
                                    input_context.input_pipeline_id)
        if self._is_training:
            dataset = dataset.shuffle(len(files), seed=p.seed,
                                      reshuffle_each_iteration=not p.cache)
        if self._repeat_source():
            dataset = dataset.repeat()
        return dataset.interleave(
            self._dataset_fn,
            cycle_length=p.cycle_length,
            block_length=p.block_length,
            num_parallel_calls=p.cycle_length or tf.data.AUTOTUNE,
            deterministic=p.deterministic)

    def _shard_elements(self, dataset: tf.data.Dataset, input_context) -> tf.data.Dataset:
        # Every pipeline reads all the data and keeps every n-th element; tf.distribute must
        # not shard it a second time.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        dataset = dataset.with_options(options)
        if self._params.sharding and _num_pipelines(input_context) > 1:
            dataset = dataset.shard(input_context.num_input_pipelines,
                                    input_context.input_pipeline_id)
        if self._repeat_source():
            dataset = dataset.repeat()
        return dataset

    def _read_source(self, input_context) -> tf.data.Dataset:
        files = self._files
        if len(files) > 1 and len(files) >= _num_pipelines(input_context):
            return self._shard_files_then_read(files, input_context)
        return self._shard_elements(self._dataset_fn(files), input_context)

    def _read_tfds(self, input_context) -> tf.data.Dataset:
        """The TFDS split, sharded per input pipeline and repeated for training (TFM's)."""
        tfds = import_tfds()
        p = self._params
        builder = self._tfds_builder
        split = p.tfds_split
        try:
            # TFDS's mock data (tfds.testing.mock_data) may leave the splits empty: one file.
            num_shards = (len(builder.info.splits[split].file_instructions)
                          if builder.info.splits else 1)
        except (KeyError, ValueError) as error:
            splits = ", ".join(sorted(builder.info.splits)) or "(none)"
            raise ConfigError(f"tfds_split {split!r} is not a split of TFDS dataset "
                              f"{p.tfds_name!r}; its splits: {splits}.") from error
        # Fewer files than input pipelines: every pipeline reads all and keeps its share.
        shard_in_memory = input_context is not None and (
            num_shards < input_context.num_input_pipelines)
        read_config = tfds.ReadConfig(
            interleave_cycle_length=p.cycle_length, interleave_block_length=p.block_length,
            input_context=None if shard_in_memory else input_context, shuffle_seed=p.seed,
            skip_prefetch=True)
        decoders = {name.strip(): tfds.decode.SkipDecoding()
                    for name in p.tfds_skip_decoding_feature.split(",") if name.strip()}
        dataset = builder.as_dataset(split=split, shuffle_files=self._is_training,
                                     as_supervised=p.tfds_as_supervised,
                                     decoders=decoders or None, read_config=read_config)
        if shard_in_memory:
            dataset = dataset.shard(input_context.num_input_pipelines,
                                    input_context.input_pipeline_id)
        return dataset.repeat() if self._repeat_source() else dataset

    def read(self, input_context: Optional[tf.distribute.InputContext] = None,
             dataset: Optional[tf.data.Dataset] = None) -> tf.data.Dataset:
        """Returns the batched dataset of this input pipeline.

        Args:
          input_context: given by `strategy.distribute_datasets_from_function`; selects this
            pipeline's shard (when `params.sharding`) and the per-replica batch size.
          dataset: an unbatched source dataset to use instead of reading `input_path` (e.g.
            in-memory arrays). It is sharded by element and repeated like a single file, and
            `decoder_fn` and everything after it apply as usual.
        """
        p = self._params
        batch_size = None
        if self._transform_and_batch_fn is None:
            if p.global_batch_size < 1:
                raise ConfigError(
                    f"global_batch_size ({p.global_batch_size}) must be a positive integer.")
            batch_size = per_replica_batch_size(p.global_batch_size, input_context)
        if dataset is not None:
            dataset = self._shard_elements(dataset, input_context)
        elif self._tfds_builder is not None:
            dataset = self._read_tfds(input_context)
        elif self._files is None:
            raise ConfigError(
                "input_path is empty: set it to the input files (a path, glob pattern or "
                "list of them).")
        else:
            dataset = self._read_source(input_context)

        if self._is_training and not p.cache:
            dataset = dataset.shuffle(p.shuffle_buffer_size, seed=p.seed)
        dataset = _map(dataset, self._decoder_fn)
        dataset = _map(dataset, self._parser_fn)
        if p.cache:
            dataset = dataset.cache()
            if self._is_training:
                dataset = dataset.repeat().shuffle(p.shuffle_buffer_size, seed=p.seed)

        if self._transform_and_batch_fn is not None:
            dataset = self._transform_and_batch_fn(dataset, input_context)
        else:
            dataset = dataset.batch(batch_size, drop_remainder=p.drop_remainder)
        dataset = _map(dataset, self._postprocess_fn)

        if p.deterministic is not None:
            options = tf.data.Options()
            options.deterministic = p.deterministic
            dataset = dataset.with_options(options)
        dataset = _with_autotune_options(dataset, p)
        return dataset.prefetch(p.prefetch_buffer_size or tf.data.AUTOTUNE)


TFDS_INSTALL_HINT = "pip install 'lite_launcher[tfds]'"


def import_tfds():
    """The `tensorflow_datasets` module; `MissingExtraError` in one line naming the extra when
    it is not installed."""
    try:
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise MissingExtraError(f"tfds_name needs TensorFlow Datasets, which is not installed "
                                f"({error}): {TFDS_INSTALL_HINT}") from None
    return tfds


def tfds_builder(params):
    """The TFDS builder of `params.tfds_name` in `params.tfds_data_dir` (TFDS's default
    directory when empty). A name TFDS does not know is a `ConfigError` in one line; a known
    dataset not yet prepared there is downloaded and prepared, as TFM's `tfds.load(...,
    download=True)` does."""
    tfds = import_tfds()
    try:
        builder = tfds.builder(params.tfds_name, data_dir=params.tfds_data_dir or None)
    except tfds.core.registered.DatasetNotFoundError:
        raise ConfigError(f"tfds_name {params.tfds_name!r} is not a TensorFlow Datasets "
                          f"dataset; tfds.list_builders() names them.") from None
    if not params.tfds_split:
        raise ConfigError(f"tfds_split is empty: name the split of {params.tfds_name!r} to "
                          f"read (e.g. 'train').")
    builder.download_and_prepare()
    return builder


def _with_autotune_options(dataset: tf.data.Dataset, params) -> tf.data.Dataset:
    """TFM's `autotune_algorithm` (an AutotuneAlgorithm name) and `ram_budget` (GiB)."""
    algorithm = getattr(params, "autotune_algorithm", None)
    ram_budget = getattr(params, "ram_budget", None)
    if not algorithm and not ram_budget:
        return dataset
    options = tf.data.Options()
    if algorithm:
        options.autotune.autotune_algorithm = tf.data.experimental.AutotuneAlgorithm[algorithm]
    if ram_budget:
        options.autotune.ram_budget = ram_budget * 1024 * 1024 * 1024
    return dataset.with_options(options)
