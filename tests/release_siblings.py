"""The `release` tests and the sibling each names: `@pytest.mark.release(sibling="NODE_ID")`,
a test of the README's command (not `release`) that runs the same code path on a smaller case.
Checked by tests/conftest.py whenever a collection holds the whole suite, and listed by
tests/test_release_siblings.py."""

import os

# Every test file: a collection holding all of them can check every sibling.
TESTS = os.path.dirname(os.path.abspath(__file__))

# The two-stage variants whose own branch a Mask R-CNN sibling would not run: a `release` test
# of one of them (its node id holds the key) names the suite test of that variant.
CASCADE_RCNN_SIBLING = ("tests/vision/test_two_stage_variants.py::test_cascade_rcnn_serves_"
                        "tfms_detections_then_trains_its_three_stages_and_evaluates")
FASTER_RCNN_SIBLING = ("tests/vision/test_two_stage_variants.py::test_faster_rcnn_serves_"
                       "tfms_box_detections_then_trains_and_evaluates_boxes")
BRANCH_SIBLINGS = {"cascade": CASCADE_RCNN_SIBLING, "fasterrcnn": FASTER_RCNN_SIBLING,
                   "include_mask_false": FASTER_RCNN_SIBLING}


def sibling_of(name, default):
    """The sibling a release test of model or experiment `name` names: its variant's suite
    test (`BRANCH_SIBLINGS`), else `default`."""
    for key, sibling in BRANCH_SIBLINGS.items():
        if key in name:
            return sibling
    return default


def listing(items):
    """[(release test's node id, the sibling it names or None)] in collection order."""
    return [(item.nodeid, item.get_closest_marker("release").kwargs.get("sibling"))
            for item in items if item.get_closest_marker("release") is not None]


def problems(items, whole_suite=True):
    """One line per release test that names no sibling, names another than its variant's
    (`BRANCH_SIBLINGS`), or (with the whole suite collected) names one that is not collected
    or is itself `release`."""
    by_id = {item.nodeid: item for item in items}
    found = []
    for nodeid, sibling in listing(items):
        if not sibling:
            found.append(f"{nodeid}: names no sibling; mark it "
                         f"@pytest.mark.release(sibling=\"tests/...py::test_...\")")
        elif sibling_of(nodeid, sibling) != sibling:
            found.append(f"{nodeid}: runs a two-stage variant; its sibling must be "
                         f"{sibling_of(nodeid, sibling)}, not {sibling}")
        elif whole_suite and sibling not in by_id:
            found.append(f"{nodeid}: its sibling {sibling} does not exist")
        elif whole_suite and by_id[sibling].get_closest_marker("release") is not None:
            found.append(f"{nodeid}: its sibling {sibling} is itself `release`")
    return found


def test_files():
    """Every test file under tests/, relative to the repository root."""
    root = os.path.dirname(TESTS)
    return {os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            for folder, _, names in os.walk(TESTS) for name in names
            if name.startswith("test_") and name.endswith(".py")}


def holds_whole_suite(items, args):
    """Whether the collection holds every test file in full (no node ids, no -k narrowing
    happens before this check)."""
    collected = {item.nodeid.split("::")[0] for item in items}
    return not any("::" in arg for arg in args) and test_files() <= collected
