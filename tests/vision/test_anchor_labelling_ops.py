"""How lite labels anchors and pads targets (issue 55, detection input): the same values as the ops it replaced,
in fewer and cheaper ops. The values against TFM are pinned by test_detection_ops.py and the
parser tests (test_retinanet_input.py, test_maskrcnn_data.py); here the structural choices:
RPN sampling selects with two partial top-k's (no full sort of every anchor), the matcher
buckets the similarities in one op and forces matches by a segment minimum (no rows x cols
one-hot), box targets are encoded per ground truth, then gathered, bit for bit as
`box_ops.encode_boxes` of the gathered boxes, and the ground truths (Mask R-CNN's mask targets:
100 x 112 x 112 an image) are padded to the instance count by one op."""

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision.ops import anchor, box_matcher, box_ops, preprocess_ops


def _op_types(concrete):
    """Op types of a traced function and of the functions it calls (cond branches)."""
    graph_def = concrete.graph.as_graph_def()
    types = [node.op for node in graph_def.node]
    for function in graph_def.library.function:
        types += [node.op for node in function.node_def]
    return types


def _anchors(size=(96, 128)):
    return anchor.build_anchor_generator(2, 5, 1, [0.5, 1.0, 2.0], 3.0)(list(size))


def _boxes(rng, count, size=(96, 128)):
    corner = rng.uniform(0.0, 0.6, (count, 2))
    extent = rng.uniform(0.0, 0.4, (count, 2))
    return tf.constant(np.concatenate([corner, corner + extent], 1) * (size + size), tf.float32)


def test_rpn_sampling_sorts_no_anchor_list_whole():
    labeler = anchor.RpnAnchorLabeler(rpn_batch_size_per_im=256)
    anchors = _anchors()
    concrete = tf.function(lambda boxes: labeler.label_anchors(anchors, boxes, None)) \
        .get_concrete_function(tf.TensorSpec([None, 4], tf.float32))
    # One top-k of at most 128 positives, one of the negatives that fill the batch; ranking
    # every anchor took four full sorts (two argsorts per pick).
    assert _op_types(concrete).count("TopKV2") == 2


@pytest.mark.parametrize("deterministic", [True, False])
def test_rpn_pick_keeps_the_largest_keys_ties_to_the_lower_index(deterministic):
    rng = np.random.default_rng(5)
    labeler = anchor.RpnAnchorLabeler(seed=3, deterministic=deterministic)
    for _ in range(20):
        size = int(rng.integers(1, 400))
        candidates = rng.random(size) < rng.random()
        count = int(rng.integers(0, size + 50))
        tf.random.set_seed(7)
        picked = labeler._pick(tf.constant(candidates), tf.constant(count)).numpy()  # pylint: disable=protected-access
        if deterministic:  # the lowest indices among the candidates
            expected = np.zeros(size, bool)
            expected[np.flatnonzero(candidates)[:count]] = True
            np.testing.assert_array_equal(picked, expected)
        assert picked.sum() == min(count, candidates.sum())
        assert not (picked & ~candidates).any()


def test_matcher_forces_matches_without_a_rows_by_columns_one_hot():
    matcher = box_matcher.BoxMatcher([0.4, 0.5], [-1, -2, 1], force_match_for_each_col=True)
    concrete = tf.function(matcher).get_concrete_function(
        tf.TensorSpec([None, None, None], tf.float32))
    types = _op_types(concrete)
    assert "OneHot" not in types
    assert types.count("Bucketize") == 1 and types.count("UnsortedSegmentMin") == 1


def _matcher_reference(similarity, thresholds, indicators):
    """TFM's rule in NumPy: best column per row, its range's indicator; then each column's
    best row (first on ties) takes it, the lowest column winning a contested row."""
    matched = similarity.argmax(-1)
    best = similarity.max(-1)
    edges = [-np.inf] + thresholds + [np.inf]
    labels = np.zeros_like(matched)
    for value, low, high in zip(indicators, edges[:-1], edges[1:]):
        labels[(best >= np.float32(low)) & (best < np.float32(high))] = value
    for b in range(similarity.shape[0]):
        for column in reversed(range(similarity.shape[2])):
            row = similarity[b, :, column].argmax()
            matched[b, row], labels[b, row] = column, indicators[-1]
    return matched, labels


def test_matcher_equals_the_rule_with_ties_contested_rows_and_values_on_the_thresholds():
    rng = np.random.default_rng(9)
    thresholds, indicators = [0.4, 0.5], [-1, -2, 1]
    matcher = box_matcher.BoxMatcher(thresholds, indicators, force_match_for_each_col=True)
    for _ in range(10):
        # Values on a 0.1 grid up to 0.9: ties everywhere, values equal to each threshold.
        similarity = (np.round(rng.random((2, 60, 5)) * 9) / 10).astype(np.float32)
        similarity[:, 3, :] = 1.0  # one row every column picks: column 0 keeps it
        matched, labels = matcher(tf.constant(similarity))
        want_matched, want_labels = _matcher_reference(similarity, thresholds, indicators)
        np.testing.assert_array_equal(matched.numpy(), want_matched)
        np.testing.assert_array_equal(labels.numpy(), want_labels)
        assert (matched.numpy()[:, 3] == 0).all()


@pytest.mark.parametrize("count", [0, 1, 4])
@pytest.mark.parametrize("weights", [None, [10.0, 10.0, 5.0, 5.0]])
def test_encoded_targets_are_encode_boxes_of_the_matched_boxes_bit_for_bit(count, weights):
    rng = np.random.default_rng(count)
    anchors = anchor.flatten_multilevel_boxes(_anchors())
    gt_boxes = _boxes(rng, count)
    num_anchors = int(anchors.shape[0])
    match = tf.constant(rng.integers(0, max(count, 1), num_anchors), tf.int32)
    unmatched = tf.constant(rng.random(num_anchors) < 0.7 if count else
                            np.ones(num_anchors, bool))
    got = anchor.encode_matched_boxes(gt_boxes, match, unmatched, anchors, weights)
    gathered = tf.gather(tf.concat([gt_boxes, tf.zeros([1, 4])], 0),
                         tf.where(unmatched, count, match))
    want = box_ops.encode_boxes(gathered, anchors, weights)
    assert got.shape == (num_anchors, 4)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_padding_to_the_instance_count_writes_the_result_once():
    masks = tf.TensorSpec([None, 112, 112], tf.float32)
    concrete = tf.function(
        lambda m: preprocess_ops.clip_or_pad_to_fixed_size(m, 100, -1)).get_concrete_function(
        masks)
    types = _op_types(concrete)
    # One Pad (PadV2) of the kept rows, no filled block concatenated to them.
    assert types.count("PadV2") == 1 and "Fill" not in types
    padded = concrete(tf.ones([3, 112, 112]))
    assert padded.shape == (100, 112, 112)
    assert (padded.numpy()[:3] == 1).all() and (padded.numpy()[3:] == -1).all()
