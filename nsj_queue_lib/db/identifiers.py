"""SQL identifiers as the database sees them.

PostgreSQL folds an unquoted identifier to lower case and keeps a double-quoted
one as written; MySQL keeps both (backtick-quoted or plain).  Names given by
users (QUEUE_TABLE, QUEUE_SUBSCRIBER_TABLE, db_gen's arguments) are resolved
here once, to the exact name the database stores; everything downstream quotes
that resolved name.  Control characters (a trailing newline included) are
rejected in every form.
"""

from __future__ import annotations

import re
from typing import List, Tuple

from nsj_queue_lib.db.dialect import DIALECTS
from nsj_queue_lib.exceptions import ConfigError

MAX_IDENT_BYTES = 63  # PostgreSQL NAMEDATALEN - 1 (MySQL allows 64)

_UNQUOTED = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Inside quotes: anything printable except quote characters and the dot (the library
# splits 'schema.table' on dots).
_QUOTED_BAD = re.compile(r'["`.]')


def _fail(what: str, text: str, why: str) -> ConfigError:
    return ConfigError(f"{what}: {text!r} não é um identificador válido ({why}).")


def resolve_identifier(text: str, what: str, dialect_name: str = "postgres") -> str:
    """The identifier `text` (SQL syntax: plain or quoted) as the database stores it.

    PostgreSQL: `Fila_Teste` -> `fila_teste`, `"Fila_Teste"` -> `Fila_Teste`.
    MySQL: `Fila` and `` `Fila` `` -> `Fila`.  Raises ConfigError naming `what`.
    """
    if not isinstance(text, str) or text == "":
        raise ConfigError(f"{what}: identificador vazio.")
    if _CONTROL.search(text):
        raise _fail(what, text, "contém caracteres de controle, como quebra de linha")
    dialect = DIALECTS[dialect_name]
    quote = dialect.quote_char
    if len(text) >= 2 and text[0] == text[-1] and text[0] in ('"', "`"):
        if text[0] != quote:
            raise _fail(what, text, f"neste banco as aspas de identificador são {quote}")
        name = text[1:-1]
        if not name or _QUOTED_BAD.search(name):
            raise _fail(what, text, "entre aspas, use caracteres visíveis sem aspas nem ponto")
    elif _UNQUOTED.match(text):
        name = text.lower() if dialect.folds_lower else text
    else:
        raise _fail(what, text, "sem aspas, use letras, dígitos e '_', começando por letra "
                                "ou '_'")
    if len(name.encode("utf-8")) > MAX_IDENT_BYTES:
        raise _fail(what, text, f"mais de {MAX_IDENT_BYTES} bytes")
    return name


def split_qualified(text: str) -> List[str]:
    """Split 'schema.table' on dots outside quotes (the parts keep their quotes)."""
    parts, current, quote = [], [], ""
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
        elif ch in ('"', "`"):
            quote = ch
            current.append(ch)
        elif ch == ".":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def resolve_table(text: str, what: str, dialect_name: str = "postgres") -> str:
    """'table' or 'schema.table' resolved part by part; returned as 'schema.table'
    (or 'table') with the parts as the database stores them."""
    if not isinstance(text, str) or _CONTROL.search(text or ""):
        raise _fail(what, str(text), "contém caracteres de controle, como quebra de linha")
    parts = split_qualified(text.strip())
    if len(parts) > 2:
        raise ConfigError(f"{what}: {text!r} não é um nome de tabela válido "
                          "(esperado 'tabela' ou 'schema.tabela').")
    return ".".join(resolve_identifier(p, what, dialect_name) for p in parts)


def split_table(name: str) -> Tuple[str, str]:
    """(schema, table) of a resolved name; schema '' when not qualified."""
    schema, _, table = name.rpartition(".")
    return schema, table


def display(name: str, dialect_name: str = "postgres") -> str:
    """A resolved (possibly qualified) name written as SQL for messages: parts that
    would not read back the same unquoted are quoted (PostgreSQL: not lower case)."""
    dialect = DIALECTS[dialect_name]
    q = dialect.quote_char

    def part(p: str) -> str:
        plain = _UNQUOTED.match(p) and (not dialect.folds_lower or p == p.lower())
        return p if plain else f"{q}{p}{q}"

    return ".".join(part(p) for p in name.split("."))
