"""`python -m nsj_queue_lib.db_gen` (1.2.2's command, documented): the DDL of a queue and
its life, which lives in nsj_queue_lib.cli.db_gen.  Also 1.2.2's `DATABASE_TEMPLATE`."""

from __future__ import annotations

import sys

from nsj_queue_lib.cli.db_gen import main

__all__ = ["main"]


def __getattr__(name: str) -> str:
    # 1.2.2's template: the PostgreSQL DDL with #SCHEMA and #NOME_FILA to be replaced.
    if name != "DATABASE_TEMPLATE":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from nsj_queue_lib.db import schema as schema_mod
    from nsj_queue_lib.db.dialect import POSTGRES

    ddl = schema_mod.render(POSTGRES, "nsjq_schema_x", "nsjq_fila_x")
    return ddl.replace("nsjq_schema_x", "#SCHEMA").replace("nsjq_fila_x", "#NOME_FILA")


if __name__ == "__main__":
    sys.exit(main())
