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
            indicators = tf.zeros([batch_size, num_rows], tf.int32)
            for value, low, high in zip(self.indicators, self.thresholds[:-1],
                                        self.thresholds[1:]):
                in_range = tf.cast((best >= tf.cast(low, best.dtype))
                                   & (best < tf.cast(high, best.dtype)), tf.int32)
                indicators = indicators * (1 - in_range) + value * in_range
            if self._force_match_for_each_col:
                # Best row per column, one-hot over rows; a row claimed by several columns
                # keeps the first of them (argmax over the one-hot picks the first 1).
                best_rows = tf.argmax(similarity_matrix, axis=1, output_type=tf.int32)
                claims = tf.one_hot(best_rows, depth=num_rows)  # [B, cols, rows]
                claims = tf.transpose(claims, [0, 2, 1])  # [B, rows, cols]
                forced_col = tf.argmax(claims, axis=-1, output_type=tf.int32)
                forced = tf.reduce_max(claims, axis=-1) > 0
                matched = tf.where(forced, forced_col, matched)
                indicators = tf.where(forced, tf.fill(tf.shape(indicators),
                                                      self.indicators[-1]), indicators)
            return matched, indicators

        matched, indicators = tf.cond(tf.greater(num_cols, 0), with_columns, no_columns)
        if unbatched:
            matched, indicators = tf.squeeze(matched, 0), tf.squeeze(indicators, 0)
        return matched, indicators
