"""Gathers per-anchor targets from ground truths by match index, as TFM's
`ops/target_gather.py`."""

import tensorflow as tf


class TargetGather:
    """`labels[match_indices]`, with `mask_val` wherever `mask` is True (unmatched anchors)."""

    def __call__(self, labels, match_indices, mask=None, mask_val=0.0):
        """labels [N] / [N, D] with match_indices [M] (and mask of the result's shape) ->
        [M] / [M, D]; or batched labels [B, N, D] with match_indices [B, M] -> [B, M, D].
        Zero labels (N == 0) give `mask_val` everywhere."""
        rank = len(labels.shape)
        if rank > 3:
            raise ValueError(f"labels must be rank 1 to 3 ([N], [N, D] or [B, N, D]); got {rank}")
        if rank == 3:
            return self._gather_batched(labels, match_indices, mask, mask_val)
        return self._gather_unbatched(labels, match_indices, mask, mask_val)

    @staticmethod
    def _fill(like, labels, mask_val):
        return tf.cast(mask_val, labels.dtype) * tf.ones_like(like, dtype=labels.dtype)

    def _gather_unbatched(self, labels, match_indices, mask, mask_val):
        def no_labels():
            shape = [match_indices.shape[0]] + ([labels.shape[-1]] if len(labels.shape) > 1
                                                else [])
            return tf.cast(mask_val, labels.dtype) * tf.ones(shape, labels.dtype)

        def gather():
            targets = tf.gather(labels, match_indices)
            if mask is None:
                return targets
            return tf.where(mask, self._fill(mask, labels, mask_val), targets)

        return tf.cond(tf.shape(labels)[0] > 0, gather, no_labels)

    def _gather_batched(self, labels, match_indices, mask, mask_val):
        def no_labels():
            shape = tf.concat([tf.shape(match_indices), tf.shape(labels)[2:]], axis=0)
            return tf.cast(mask_val, labels.dtype) * tf.ones(shape, labels.dtype)

        def gather():
            targets = tf.gather(labels, match_indices, axis=1, batch_dims=1)
            if mask is None:
                return targets
            return tf.where(mask, self._fill(mask, labels, mask_val), targets)

        return tf.cond(tf.shape(labels)[1] > 0, gather, no_labels)
