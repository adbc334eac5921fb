"""The suite's file order (tests/conftest.py): files longest first, by tests/file_seconds.json,
which tests/file_seconds.py writes from junit files."""

import os

import conftest
import file_seconds


def test_every_timed_file_exists_and_they_are_handed_out_longest_first():
    for path in conftest.FILE_SECONDS:
        assert os.path.exists(os.path.join(conftest.ROOT, path)), path
    seconds = [conftest.FILE_SECONDS[path] for path in conftest.LONGEST_FILES_FIRST]
    assert seconds == sorted(seconds, reverse=True) and len(seconds) >= 40


def test_the_session_runs_the_timed_files_first_longest_first(request):
    # The session's items: sorted and deselected, as the workers take them.
    files = list(dict.fromkeys(os.path.relpath(str(item.path), conftest.ROOT)
                               for item in request.session.items))
    timed = [path in conftest.FILE_SECONDS for path in files]
    assert timed == sorted(timed, reverse=True)  # every timed file before every other
    listed = [path for path in files if path in conftest.FILE_SECONDS]
    assert listed == [path for path in conftest.LONGEST_FILES_FIRST if path in listed]


def test_file_seconds_sums_each_tests_smallest_time(tmp_path):
    def junit(name, times):
        cases = "".join(f'<testcase classname="tests.test_trainer" name="{test}" time="{t}"/>'
                        for test, t in times.items())
        path = tmp_path / name
        path.write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>")
        return str(path)

    runs = [junit("a.xml", {"t1": 4.0, "t2": 3.0}), junit("b.xml", {"t1": 2.5, "t2": 9.0})]
    assert file_seconds.file_seconds(runs) == {"tests/test_trainer.py": 5.5}
    # Below MIN_SECONDS a file is left to collection order.
    assert file_seconds.file_seconds([junit("c.xml", {"t1": 1.0})]) == {}
