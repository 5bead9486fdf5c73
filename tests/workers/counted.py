"""The scripted worker with every statement it sends counted (bench/counting.py), for
tests that pin statements per task (python -m tests.workers.counted): the counts go to
$NSJQ_BENCH_COUNT_DIR at exit, those after the file "mark" appeared kept apart."""

from __future__ import annotations

from bench import counting

counting.install()

from tests.workers.scripted import ScriptedWorker  # noqa: E402 (after the counter)

if __name__ == "__main__":
    ScriptedWorker().run()
