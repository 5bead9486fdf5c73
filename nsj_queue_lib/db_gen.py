"""`python -m nsj_queue_lib.db_gen` (1.2.2's command, documented): the DDL of a queue and
its life, which lives in nsj_queue_lib.cli.db_gen."""

from __future__ import annotations

import sys

from nsj_queue_lib.cli.db_gen import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
