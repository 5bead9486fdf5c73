"""The fast tier (`make check`, -m "not process") cannot take in a test that starts a
worker, a server or a listening socket: such a test gets the `process` marker from its
fixtures or its source, and one that escapes it fails (tests/fixtures/tiers.py)."""

from __future__ import annotations

import textwrap

import pytest

from tests.fixtures import tiers

CONFTEST = 'pytest_plugins = ["tests.fixtures.tiers"]\n'


def _run(pytester: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_sample=textwrap.dedent(body))
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_a_test_naming_a_spawning_helper_is_left_out_of_the_fast_tier(pytester):
    result = _run(pytester, """
        def test_with_a_worker(tmp_path):
            q = None
            if q is not None:
                q.start_ready_worker()

        def test_with_the_database_only():
            assert True
        """, "-m", "not process")
    result.assert_outcomes(passed=1, deselected=1)


def test_a_fixture_that_starts_a_server_marks_its_tests(pytester):
    pytester.makeconftest(CONFTEST + textwrap.dedent("""
        import pytest

        @pytest.fixture
        def http_endpoint():
            yield None
        """))
    pytester.makepyfile(test_sample="def test_uses_it(http_endpoint):\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-m", "process")
    result.assert_outcomes(passed=1)


def test_an_unmarked_test_that_starts_a_python_process_fails(pytester):
    result = _run(pytester, """
        import sys
        import importlib

        def test_sneaky():  # (names nothing the source scan knows)
            run = getattr(importlib.import_module("sub" + "process"), "run")
            run([sys.executable, "-c", "pass"])
        """, "-m", "not process")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(["*processo iniciado num teste sem o marcador 'process'*"])


def test_an_unmarked_test_that_listens_on_a_socket_fails(pytester):
    result = _run(pytester, """
        import socket

        def test_sneaky():
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                sock.listen()
        """)
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(["*socket em escuta num teste sem o marcador 'process'*"])


def test_programs_that_are_not_ours_stay_allowed(pytester):
    result = _run(pytester, """
        import subprocess

        def test_runs_true():
            assert subprocess.run(["true"]).returncode == 0
        """)
    result.assert_outcomes(passed=1)


SAMPLE = """
from tests.fixtures.queue import Queue

class Fleet:  # a test module's helper class that starts workers
    def __init__(self, q):
        self.worker = q.start_ready_worker()

def make_fleet(q):
    return Fleet(q)

def uses_fleet(q):
    return make_fleet(q)

def uses_the_queue_helper_only(server):
    return Queue.create(server)
"""


def test_helpers_are_followed_by_name_into_tests_modules():
    # (compiled here: naming them in this test's own code would mark this test)
    sample: dict = {"__name__": "tests.unit.sample"}
    exec(compile(SAMPLE, "tests/unit/sample.py", "exec"), sample)
    assert tiers._spawns(sample["uses_fleet"]) is True
    assert tiers._spawns(sample["uses_the_queue_helper_only"]) is False
