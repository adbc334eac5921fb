"""Every `release` test names a sibling in the README's command (`-m "not release"`) that runs
the same code path on a smaller case; tests/release_siblings.py holds the check, which
tests/conftest.py also applies to every collection of the whole suite."""

import os
import subprocess
import sys
import types

import release_siblings
from conftest import ALL_ITEMS, ROOT

RELEASE_COUNT = 136  # the release set's size: a test moved in or out changes it here


def _collected(request):
    """Every test of the suite with its marks: this session's collection when it holds the
    whole suite (the README's command), else a `--collect-only` of tests/ in a subprocess."""
    items, whole = request.config.stash[ALL_ITEMS]
    if whole:
        return [(item.nodeid, item.get_closest_marker("release")) for item in items]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         "-m", "release", "tests"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    # conftest's check runs in that collection: any problem fails it with one line a test.
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [(line, True) for line in result.stdout.splitlines() if "::" in line]


def test_every_release_test_names_an_existing_sibling_outside_release(request):
    collected = _collected(request)
    release = [nodeid for nodeid, mark in collected if mark]
    assert len(release) == RELEASE_COUNT, release
    items, whole = request.config.stash[ALL_ITEMS]
    if whole:
        assert release_siblings.problems(items) == []
        listing = release_siblings.listing(items)
        print("\n".join(f"{test}\n    sibling: {sibling}" for test, sibling in listing))
        assert len({sibling for _, sibling in listing}) >= 10


def _item(nodeid, sibling=None, release=True):
    mark = types.SimpleNamespace(kwargs={} if sibling is None else {"sibling": sibling})
    return types.SimpleNamespace(
        nodeid=nodeid, get_closest_marker=lambda name: mark if release else None)


def test_the_check_names_each_release_test_without_a_runnable_sibling():
    items = [_item("t.py::test_long", "t.py::test_short"), _item("t.py::test_short", release=False),
             _item("t.py::test_bare"), _item("t.py::test_gone", "t.py::test_removed"),
             _item("t.py::test_chain", "t.py::test_long")]
    assert release_siblings.problems(items) == [
        't.py::test_bare: names no sibling; mark it '
        '@pytest.mark.release(sibling="tests/...py::test_...")',
        "t.py::test_gone: its sibling t.py::test_removed does not exist",
        "t.py::test_chain: its sibling t.py::test_long is itself `release`"]
    # A partial collection (one file, a node id) checks only that a sibling is named.
    assert release_siblings.problems(items, whole_suite=False) == [
        release_siblings.problems(items)[0]]



def test_a_two_stage_variant_must_name_its_own_branchs_sibling():
    """A `release` test of the cascade or of Faster R-CNN names that variant's suite test; a
    Mask R-CNN sibling (which runs neither the stage loop nor the box-only task) is refused."""
    mask_rcnn = "tests/vision/test_maskrcnn_model.py::test_small[small_maskrcnn]"
    items = [_item("m.py::test_counts[cascadercnn_spinenet_coco]", mask_rcnn),
             _item("m.py::test_counts[small_fasterrcnn]", release_siblings.FASTER_RCNN_SIBLING),
             _item("m.py::test_counts[maskrcnn_resnetfpn_coco]", mask_rcnn),
             _item("t.py::test_include_mask_false_trains", mask_rcnn)]
    assert release_siblings.problems(items, whole_suite=False) == [
        f"m.py::test_counts[cascadercnn_spinenet_coco]: runs a two-stage variant; its sibling "
        f"must be {release_siblings.CASCADE_RCNN_SIBLING}, not {mask_rcnn}",
        f"t.py::test_include_mask_false_trains: runs a two-stage variant; its sibling must be "
        f"{release_siblings.FASTER_RCNN_SIBLING}, not {mask_rcnn}"]
