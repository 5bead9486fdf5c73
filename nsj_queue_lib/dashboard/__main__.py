"""python -m nsj_queue_lib.dashboard"""
from __future__ import annotations

import sys

from nsj_queue_lib.dashboard import main

sys.exit(main())
