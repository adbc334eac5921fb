"""Balanced positive / negative subsampling with static shapes, as TFM's
`ops/sampling_ops.py` (`BalancedPositiveNegativeSampler` with `is_static=True`, the one its
box sampler uses).

The rule, for a sample of size S out of N >= S candidates, given a random permutation:

1. if fewer than S candidates are allowed, the first not-allowed ones (in index order) are
   allowed too, as negatives, until S are;
2. in the permuted order, positives are taken last-first and negatives first-first: up to
   `int(S * positive_fraction)` positives, then S minus that many from the far end of the
   sorted list (negatives, or, when too few, not-allowed entries and remaining positives);
3. an entry with nothing to give marks the permutation's first entry (TFM's index-0 fill).

When every allowed candidate fits (at most S of them, positives at most the fraction), the
result does not depend on the permutation.
"""

import tensorflow as tf


def random_permutations(batch_size, size):
    """[batch_size, size] int32: an independent random permutation of range(size) per row (the
    one source of randomness of the sampler; tests replace it)."""
    return tf.argsort(tf.random.uniform([batch_size, size]), axis=-1, stable=True)


def static_subsample(indicator, labels, sample_size, positive_fraction, permutations=None):
    """Batched static-shape balanced sampling (see the module docstring).

    Args:
      indicator: [B, N] bool, the entries that may be sampled.
      labels: [B, N] bool, True for positives.
      sample_size: S (Python int, <= N).
      positive_fraction: the largest share of positives, in [0, 1].
      permutations: [B, N] int32 permutations; `random_permutations` when None.

    Returns:
      [B, N] bool, the sampled entries (S of them, fewer only through step 3's fill).
    """
    num_entries = indicator.shape[-1]
    if num_entries is not None and sample_size > num_entries:
        raise ValueError(f"cannot sample {sample_size} of {num_entries} entries: lower the "
                         f"sample size (num_sampled_rois) to at most {num_entries}")
    if permutations is None:
        permutations = random_permutations(tf.shape(indicator)[0], tf.shape(indicator)[1])
    num_entries = tf.shape(indicator)[1]
    num_allowed = tf.reduce_sum(tf.cast(indicator, tf.int32), axis=1, keepdims=True)
    filler = tf.cumsum(tf.cast(tf.logical_not(indicator), tf.int32), axis=1)
    indicator = indicator | (filler <= sample_size - num_allowed)

    indicator = tf.gather(indicator, permutations, batch_dims=1)
    labels = tf.gather(labels, permutations, batch_dims=1)
    # Positives as +position, negatives as -position (1-based), not allowed as 0; sorted
    # descending this puts positives first (last position first) and negatives last.
    position = tf.range(1, num_entries + 1)[None, :]
    signed = tf.where(indicator, tf.where(labels, position, -position), 0)
    ordered = tf.nn.top_k(signed, k=num_entries, sorted=True).values
    num_positive = tf.minimum(int(sample_size * positive_fraction),
                              tf.reduce_sum(tf.cast(ordered > 0, tf.int32), axis=1,
                                            keepdims=True))
    slots = tf.range(sample_size)[None, :]
    taken = tf.gather(ordered, tf.where(slots < num_positive, slots,
                                        num_entries - sample_size + slots), batch_dims=1)
    picked = tf.maximum(tf.abs(taken) - 1, 0)
    sampled = tf.reduce_max(tf.one_hot(picked, num_entries, dtype=tf.int32), axis=1) > 0
    # Back from permuted positions to the original entries.
    return tf.gather(sampled, tf.argsort(permutations, axis=-1), batch_dims=1)


class BalancedPositiveNegativeSampler:
    """TFM's sampler object: `subsample(indicator, batch_size, labels)` on one image's [N]
    vectors. Only the static-shape sampler (`is_static=True`) is provided, the one Mask R-CNN
    uses."""

    def __init__(self, positive_fraction=0.5, is_static=False):
        if not 0 <= positive_fraction <= 1:
            raise ValueError(f"positive_fraction ({positive_fraction}) must be in [0, 1]")
        if not is_static:
            raise ValueError("only the static sampler is provided: pass is_static=True")
        self._positive_fraction = positive_fraction

    def subsample(self, indicator, batch_size, labels, scope=None):
        """[N] bool indicator and labels -> [N] bool, `batch_size` entries sampled."""
        del scope
        for name, tensor in (("indicator", indicator), ("labels", labels)):
            if len(tensor.shape) != 1 or tensor.dtype != tf.bool:
                raise ValueError(f"{name} must be a 1-D bool tensor; got {tensor.dtype.name} "
                                 f"of shape {list(tensor.shape)}")
        if not isinstance(batch_size, int):
            raise ValueError(f"batch_size must be a Python int; got {batch_size!r}")
        return static_subsample(indicator[None], labels[None], batch_size,
                                self._positive_fraction)[0]
