"""`python -m nsj_queue_lib.health` (a documented command): the container probe, which lives in
nsj_queue_lib.observability.health."""

from __future__ import annotations

import sys

from nsj_queue_lib.observability.health import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
