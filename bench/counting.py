"""Client-side statement counter for benchmark worker processes.

`install()` wraps `psycopg2.connect` (and the connections and cursors of pymysql and, when
installed, mysqlclient) so that
every connection the process opens
(the library's and the task code's `bd_conn` alike) uses a cursor that counts
what it sends.  At exit the process writes one JSON file into
$NSJQ_BENCH_COUNT_DIR: round trips (calls of `execute`), statements (the SQL
statements inside them: "SET LOCAL ...; EXECUTE ..." is one round trip and two
statements; BEGIN and COMMIT count), connections opened and the most held at
once.  When the file "mark" appears in that directory the process also records
the counts of that instant ("at_mark"), so a run can leave start-up out.
Counting happens in the client, so it sees exactly what this process
sends, whatever else runs on the shared server (pg_stat_statements would need a
server restart to load, which is not allowed on the shared machine).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import threading
import time
from typing import Any, Dict

COUNTS: Dict[str, int] = {"round_trips": 0, "statements": 0, "connections_opened": 0,
                          "connections_open": 0, "connections_max": 0}
_lock = threading.Lock()
_DOLLAR = re.compile(r"\$[A-Za-z_][A-Za-z_0-9]*\$|\$\$")


def statements_in(sql: Any) -> int:
    """Statements in one query string (';'-separated, quotes and $tag$ quotes respected:
    a DO block is one statement)."""
    text = sql.decode() if isinstance(sql, bytes) else str(sql)
    count, current, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        dollar = _DOLLAR.match(text, i) if ch == "$" else None
        if ch in ("'", '"') or dollar:
            tag = dollar.group(0) if dollar else ch
            end = text.find(tag, i + len(tag))
            end = len(text) if end < 0 else end + len(tag)
            current += text[i:end]
            i = end
            continue
        if ch == ";":
            count += bool(current.strip())
            current = ""
        else:
            current += ch
        i += 1
    return count + bool(current.strip())


def _add(key: str, n: int = 1) -> None:
    with _lock:
        COUNTS[key] += n
        if key == "connections_open":
            COUNTS["connections_max"] = max(COUNTS["connections_max"], COUNTS[key])


def install() -> None:
    import psycopg2
    import psycopg2.extensions

    class CountingCursor(psycopg2.extensions.cursor):
        def execute(self, query: Any, vars: Any = None) -> Any:
            _count(query)
            return super().execute(query, vars)

        def executemany(self, query: Any, vars_list: Any) -> Any:
            rows = list(vars_list)
            _add("round_trips", len(rows))
            _add("statements", statements_in(query) * len(rows))
            return super().executemany(query, rows)

    class CountingConnection(psycopg2.extensions.connection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.cursor_factory = CountingCursor
            _add("connections_opened")
            _add("connections_open")
            self._counted_open = True

        def close(self) -> None:
            if getattr(self, "_counted_open", False):
                self._counted_open = False
                _add("connections_open", -1)
            super().close()

    original = psycopg2.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("connection_factory", CountingConnection)
        return original(*args, **kwargs)

    psycopg2.connect = connect
    _install_pymysql()
    _install_mysqlclient()
    atexit.register(_dump)
    threading.Thread(target=_watch_mark, name="bench-count-mark", daemon=True).start()


def _install_pymysql() -> None:
    """The same count for pymysql (MySQL / MariaDB): every cursor's execute, and the
    connections opened (pymysql sends BEGIN and COMMIT as queries too)."""
    import pymysql.connections
    import pymysql.cursors

    _wrap_dbapi(pymysql.cursors.Cursor, pymysql.connections.Connection)


def _install_mysqlclient() -> None:
    """The same count for mysqlclient (MySQLdb), when it is installed (DB_MYSQL_DRIVER)."""
    try:
        import MySQLdb.connections
        import MySQLdb.cursors
    except ImportError:
        return
    _wrap_dbapi(MySQLdb.cursors.BaseCursor, MySQLdb.connections.Connection)
    # A statement whose answer the library awaits in Python (mysql_driver.fetch_one_awaited:
    # the idle turn's GET_LOCK) is sent without a cursor.
    original_send = MySQLdb.connections.Connection.send_query

    def send_query(self: Any, query: Any) -> Any:
        _count(query.decode(self.encoding) if isinstance(query, bytes) else query)
        return original_send(self, query)

    MySQLdb.connections.Connection.send_query = send_query


def _wrap_dbapi(cursor_class: Any, connection_class: Any) -> None:
    """Count every execute of `cursor_class` (every cursor class of the driver inherits
    it) and the connections of `connection_class` opened and still open."""
    original_execute = cursor_class.execute

    def execute(self: Any, query: Any, args: Any = None) -> Any:
        _count(query)
        return original_execute(self, query, args)

    cursor_class.execute = execute
    original_init = connection_class.__init__
    original_close = connection_class.close

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        _add("connections_opened")
        _add("connections_open")
        self._counted_open = True

    def close(self: Any) -> None:
        if getattr(self, "_counted_open", False):
            self._counted_open = False
            _add("connections_open", -1)
        original_close(self)

    connection_class.__init__ = init
    connection_class.close = close


def _count(query: Any) -> None:
    if AT_MARK and os.environ.get("NSJQ_BENCH_COUNT_TEXT"):
        key = " ".join(str(query).split())[:70]
        with _lock:
            TEXTS[key] = TEXTS.get(key, 0) + 1
    _add("round_trips")
    _add("statements", statements_in(query))


AT_MARK: Dict[str, int] = {}
TEXTS: Dict[str, int] = {}  # with NSJQ_BENCH_COUNT_TEXT: round trips by statement start


def _watch_mark() -> None:
    # Instrumentation only (not library behaviour): look for the mark file every 20 ms.
    directory = os.environ.get("NSJQ_BENCH_COUNT_DIR", "")
    mark = os.path.join(directory, "mark")
    while not os.path.exists(mark):
        time.sleep(0.02)
    with _lock:
        AT_MARK.update(COUNTS)
        # from here on, "connections_max" is the most held at once after the mark
        COUNTS["connections_max"] = COUNTS["connections_open"]


def _dump() -> None:
    directory = os.environ.get("NSJQ_BENCH_COUNT_DIR")
    if not directory:
        return
    path = os.path.join(directory, f"counts-{os.getpid()}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(dict(COUNTS, at_mark=AT_MARK or None, texts=TEXTS), fh)


def summary(directory: str, top: int = 15) -> str:
    """Round trips by statement start, summed over the processes of a kept count
    directory (NSJQ_BENCH_KEEP=1 with NSJQ_BENCH_COUNT_TEXT=1), counted after the mark."""
    import glob

    texts: Dict[str, int] = {}
    statements = round_trips = 0
    for path in glob.glob(os.path.join(directory, "counts-*.json")):
        with open(path, encoding="utf-8") as fh:
            counts = json.load(fh)
        mark = counts.get("at_mark") or {}
        statements += counts["statements"] - mark.get("statements", 0)
        round_trips += counts["round_trips"] - mark.get("round_trips", 0)
        for key, n in counts.get("texts", {}).items():
            texts[key] = texts.get(key, 0) + n
    lines = [f"{statements} statements, {round_trips} round trips"]
    lines += [f"{n:8d}  {key}" for key, n in sorted(texts.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(lines)


if __name__ == "__main__":  # python bench/counting.py DIR: what a kept run sent
    import sys

    print(summary(sys.argv[1]))
