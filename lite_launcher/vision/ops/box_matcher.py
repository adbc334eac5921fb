"""Threshold-based matching of rows (anchors) to columns (ground truths), as TFM's
`ops/box_matcher.py`."""

import tensorflow as tf


class BoxMatcher:
    """Matches each row of a similarity matrix to its best column and labels the match by
    where the best similarity falls among sorted `thresholds`.

    `indicators[i]` labels similarities in [thresholds[i-1], thresholds[i]) (with -inf and
    +inf added at the ends). RetinaNet uses thresholds [unmatched, matched] with indicators
    [-1 (negative), -2 (ignored), 1 (positive)]. With `force_match_for_each_col`, every column
    (ground truth) is also given to its best row, labelled `indicators[-1]`; when a column's
    similarities tie, the first row wins, and when two columns pick the same row the first
    column wins (TFM's one-hot argmax rule).
    """

    def __init__(self, thresholds, indicators, force_match_for_each_col=False):
        thresholds = list(thresholds)
        if any(low > high for low, high in zip(thresholds[:-1], thresholds[1:])):
            raise ValueError(f"thresholds must be sorted ascending; got {thresholds}")
        if len(indicators) != len(thresholds) + 1:
            raise ValueError(f"indicators needs one entry more than thresholds; got indicators "
                             f"{list(indicators)} for thresholds {thresholds}")
        self.indicators = list(indicators)
        self.thresholds = [-float("inf")] + thresholds + [float("inf")]
        self._force_match_for_each_col = force_match_for_each_col

    def __call__(self, similarity_matrix):
        """[rows, cols] or [B, rows, cols] -> (matched column per row, indicator per row), each
        int32 [rows] or [B, rows]. With zero columns, every row is column 0 with indicator -1."""
        unbatched = len(similarity_matrix.shape) == 2
        if unbatched:
            similarity_matrix = tf.expand_dims(similarity_matrix, 0)
        shape = similarity_matrix.shape.as_list()
        batch_size = shape[0] or tf.shape(similarity_matrix)[0]
        num_rows = shape[1] or tf.shape(similarity_matrix)[1]
        num_cols = shape[2] if shape[2] is not None else tf.shape(similarity_matrix)[2]

        def no_columns():
            return (tf.zeros([batch_size, num_rows], tf.int32),
                    -tf.ones([batch_size, num_rows], tf.int32))

        def with_columns():
            matched = tf.argmax(similarity_matrix, axis=-1, output_type=tf.int32)
            best = tf.reduce_max(similarity_matrix, axis=-1)
            # The range [thresholds[i-1], thresholds[i]) each best similarity falls in, by
            # one bucketing op (Bucketize puts a value equal to a boundary above it, as the
            # ranges do), then its indicator.
            ranges = tf.raw_ops.Bucketize(input=best, boundaries=self.thresholds[1:-1])
            indicators = tf.gather(tf.constant(self.indicators, tf.int32), ranges)
            if self._force_match_for_each_col:
                forced_col, forced = self._force_match(similarity_matrix, batch_size,
                                                       num_rows, num_cols)
                matched = tf.where(forced, forced_col, matched)
                indicators = tf.where(forced, tf.fill(tf.shape(indicators),
                                                      self.indicators[-1]), indicators)
            return matched, indicators

        matched, indicators = tf.cond(tf.greater(num_cols, 0), with_columns, no_columns)
        if unbatched:
            matched, indicators = tf.squeeze(matched, 0), tf.squeeze(indicators, 0)
        return matched, indicators

    @staticmethod
    def _force_match(similarity_matrix, batch_size, num_rows, num_cols):
        """(column forced onto each row, whether one is) [B, rows]: every column's best row
        (the first on ties) takes that column; a row several columns pick keeps the lowest
        of them. One segment minimum over the columns, where a one-hot [B, cols, rows] of
        the picks would cost rows x cols (76k anchors x 100 boxes on COCO)."""
        best_rows = tf.argmax(similarity_matrix, axis=1, output_type=tf.int32)  # [B, cols]
        row_offsets = tf.range(batch_size, dtype=tf.int32)[:, None] * num_rows
        columns = tf.broadcast_to(tf.range(num_cols, dtype=tf.int32)[None],
                                  tf.shape(best_rows))
        # Rows no column picks get int32's maximum (the empty segment's minimum).
        lowest = tf.math.unsorted_segment_min(
            tf.reshape(columns, [-1]), tf.reshape(best_rows + row_offsets, [-1]),
            num_segments=batch_size * num_rows)
        lowest = tf.reshape(lowest, [batch_size, num_rows])
        forced = lowest < num_cols
        return tf.where(forced, lowest, 0), forced
