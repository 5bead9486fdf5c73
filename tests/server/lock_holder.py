"""Child process for the tests: takes a lock through `SocketLocker` and then idles.

    python tests/server/lock_holder.py HOST PORT TOKEN KEY0 KEY1

Prints ``LOCKED`` (or ``FAILED``) and then sleeps until killed.
"""

from __future__ import annotations

import sys
import time

from nsj_queue_lib.client.lock_client import SocketLocker


def main() -> int:
    host, port, token, key0, key1 = sys.argv[1:6]
    locker = SocketLocker(host, int(port), token or None, 2.0)
    ok = locker.try_lock((int(key0), int(key1)))
    print("LOCKED" if ok else "FAILED", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    sys.exit(main())
