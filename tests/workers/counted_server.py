"""The queue server with every statement it sends counted (bench/counting.py), for tests
that pin statements per task across the whole fleet (python -m tests.workers.counted_server).
"""

from __future__ import annotations

import runpy

from bench import counting

counting.install()

if __name__ == "__main__":
    runpy.run_module("nsj_queue_lib.server.server_main", run_name="__main__")
