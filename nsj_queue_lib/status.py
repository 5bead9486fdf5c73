"""`python -m nsj_queue_lib.status` (a documented command): the queue status report, which lives in
nsj_queue_lib.observability.status."""

from __future__ import annotations

import sys

from nsj_queue_lib.observability.status import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
