"""What the subcommands share: exit codes, settings, the admin object, JSON output,
and the translation of errors into one Portuguese line and an exit code."""

from __future__ import annotations

import argparse
import datetime as _dt
import decimal
import getpass
import json
import socket
import sys
import textwrap
from typing import Any, Callable, Optional

from nsj_queue_lib.exceptions import (
    ConfigError,
    ControlTableMissing,
    DatabaseUnavailable,
    InvalidTaskState,
    NotFoundException,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of descriptions and epilogs; Portuguese headings."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        # Wrap each line of prose; keep indented lines (examples, lists) as written.
        out = []
        for line in text.splitlines():
            if line[:1].isspace() or not line:
                out.append(indent + line)
            else:
                out.append(textwrap.fill(line, width, initial_indent=indent,
                                         subsequent_indent=indent))
        return "\n".join(out)

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: Any = None) -> None:
        super().add_usage(usage, actions, groups, "uso: " if prefix is None else prefix)


def portuguese(parser: argparse.ArgumentParser, version: bool = False) -> argparse.ArgumentParser:
    """Portuguese -h/--help (and --version) and section title on a parser made with
    add_help=False."""
    parser._optionals.title = "opções"  # argparse has no public setter for these
    parser._positionals.title = "argumentos"
    parser.add_argument("-h", "--help", action="help", help="mostra esta ajuda e sai")
    if version:
        from nsj_queue_lib.version import __version__

        parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                            help="mostra a versão e sai")
    return parser


def add_parser(subparsers: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand parser with the Portuguese formatter and help option."""
    kwargs.setdefault("formatter_class", HelpFormatter)
    return portuguese(subparsers.add_parser(name, add_help=False, **kwargs))


def load_env_file(path: Optional[str]) -> int:
    """Load the .env file given with --env-file, or the one found from the current
    directory; values already in the environment win (python-dotenv's syntax)."""
    import os

    from dotenv import find_dotenv, load_dotenv

    if path and not os.path.isfile(path):
        print(f"Erro: --env-file: arquivo {path} não encontrado", file=sys.stderr)
        return EXIT_CONFIG
    path = path or find_dotenv(usecwd=True)
    if path:
        load_dotenv(path, override=False)
    return EXIT_OK


def add_table_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tabela", metavar="SCHEMA.FILA",
                        help="tabela da fila ('tabela' ou 'schema.tabela'); padrão: QUEUE_TABLE")


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="saída em JSON, para scripts")


def queue_settings(args: argparse.Namespace) -> Any:
    """Settings with DB_* and the queue table (QUEUE_TABLE or --tabela)."""
    from nsj_queue_lib.config import Settings, validate_table_name

    settings = Settings.from_env(require=("db",))
    table = getattr(args, "tabela", None)
    if table:
        settings = settings.replace(queue_table=validate_table_name(
            table, "--tabela", "postgres" if settings.db_driver == "POSTGRES" else "mysql"))
    if not settings.queue_table:
        raise ConfigError("Configuração inválida: variável QUEUE_TABLE não definida "
                          "(ou use --tabela)")
    return settings


def operator() -> str:
    """Who runs the command, recorded by pause/retry/cancel: user@host."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "?"
    return f"{user}@{socket.gethostname()}"


def _default(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:  # MySQL columns hold UTC
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.isoformat()
    if isinstance(value, (_dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, sort_keys=True, default=_default), flush=True)


def fmt_time(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a handler; turn the library's errors into one line on stderr and an exit code."""

    def wrapper(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except ConfigError as exc:
            print(f"Erro: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        except (DatabaseUnavailable, NotFoundException, InvalidTaskState,
                ControlTableMissing) as exc:
            print(f"Erro: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except KeyboardInterrupt:
            return EXIT_FAILED
        except Exception as exc:  # a driver error: missing table, no privilege, ...
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            print(f"Erro: {first}", file=sys.stderr)
            return EXIT_FAILED

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper


def open_admin(args: argparse.Namespace) -> Any:
    """A QueueAdmin on its own autocommit session (close it)."""
    from nsj_queue_lib.admin import QueueAdmin

    return QueueAdmin.from_settings(queue_settings(args))


def short(text: Optional[str], width: int) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def positive_int(text: str) -> int:
    """argparse type: an integer greater than zero."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' não é um inteiro") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("deve ser maior que zero")
    return value
