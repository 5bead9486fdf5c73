"""python -m nsj_queue_lib: the same command line as `nsj-queue`."""

from __future__ import annotations

import sys

from nsj_queue_lib.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m nsj_queue_lib"))
