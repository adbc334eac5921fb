"""The suite's file order (tests/conftest.py): files longest first, by tests/file_seconds.json,
which tests/file_seconds.py writes from junit files."""

import os
import types

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


def test_xdists_scheduler_hands_out_the_files_in_collection_order(request):
    """pytest-xdist's own `--dist loadfile` scheduler, with the options as conftest leaves
    them, sends a worker its files in collection order; with xdist's default (reorder by number
    of tests) the one-test heavy file would come last."""
    # pytest-xdist is in [test]: the README's command runs on it.
    from xdist.scheduler import LoadFileScheduling  # pylint: disable=import-outside-toplevel

    class Worker:
        def __init__(self, name):
            self.gateway = types.SimpleNamespace(id=name)
            self.shutting_down = False
            self.sent = []

        def send_runtest_some(self, indices):
            self.sent.extend(indices)

        def shutdown(self):
            pass

    collection = ["heavy.py::t"] + [f"many.py::t{i}" for i in range(5)] + \
        [f"some.py::t{i}" for i in range(3)]

    def first_files_sent(reorder):
        option = types.SimpleNamespace(loadscopereorder=reorder, tx=["popen"])
        config = types.SimpleNamespace(option=option,
                                       getvalue=lambda name: getattr(option, name))
        if reorder is None:
            conftest.keep_the_file_order(config)
        scheduler = LoadFileScheduling(config)
        worker = Worker("gw0")
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
        scheduler.schedule()
        return list(dict.fromkeys(collection[i].split("::")[0] for i in worker.sent))

    assert request.config.option.loadscopereorder is False
    assert first_files_sent(reorder=None)[0] == "heavy.py"
    assert first_files_sent(reorder=True)[0] == "many.py"  # xdist's default: most tests first
