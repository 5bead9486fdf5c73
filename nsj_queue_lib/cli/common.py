"""What the subcommands share: exit codes, settings, the admin object, JSON output,
and the translation of errors into one Portuguese line and an exit code."""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import decimal
import getpass
import json
import re
import socket
import sys
import textwrap
from typing import Any, Callable, Iterator, List, NoReturn, Optional, Tuple

from nsj_queue_lib.exceptions import (
    ConfigError,
    ControlTableMissing,
    DatabaseUnavailable,
    FeatureUnavailable,
    InvalidTaskState,
    NotFoundException,
)
from nsj_queue_lib.text import terminal_safe

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


# argparse's own messages (English, formatted before error() sees them) and their
# Portuguese; the same wording on every supported Python version.
_MESSAGES: List[Tuple[str, str]] = [
    (r"^argument ([^:]+): ", r"argumento \1: "),
    (r"the following arguments are required: ", "argumentos obrigatórios ausentes: "),
    (r"one of the arguments (.+) is required", r"informe um dos argumentos \1"),
    (r"invalid choice: (.+) \(choose from (.+)\)$", r"valor inválido: \1 (valores aceitos: \2)"),
    (r"unrecognized arguments: ", "argumentos não reconhecidos: "),
    (r"expected one argument", "espera um valor"),
    (r"expected at most one argument", "espera no máximo um valor"),
    (r"expected at least one argument", "espera ao menos um valor"),
    (r"expected (\d+) arguments?", r"espera \1 valor(es)"),
    (r"invalid (\S+) value: (.+)$", r"valor inválido (\1): \2"),
    (r"not allowed with argument (.+)$", r"não pode ser usado com o argumento \1"),
    (r"ambiguous option: (\S+) could match (.+)$", r"opção ambígua: \1 pode ser \2"),
    (r"ignored explicit argument (.+)$", r"valor ignorado: \1"),
    (r"can't open '(.+)': ", r"não foi possível abrir '\1': "),
]


def translate_message(message: str) -> str:
    """argparse's English error message in Portuguese (unknown ones unchanged)."""
    for pattern, replacement in _MESSAGES:
        message = re.sub(pattern, replacement, message)
    return message


class ArgumentParser(argparse.ArgumentParser):
    """argparse with Portuguese help headings, -h/--help, --version and error messages.

    Every parser of the package is one of these; subcommand parsers inherit the class.
    `add_help=False` leaves the help option out (passthrough commands, or `portuguese()`
    adds it later); `version=True` adds --version.
    """

    def __init__(self, *args: Any, add_help: bool = True, version: bool = False,
                 **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, add_help=False, **kwargs)  # type: ignore[misc]
        self._optionals.title = "opções"  # argparse has no public setter for these
        self._positionals.title = "argumentos"
        if add_help or version:
            portuguese(self, version=version, with_help=add_help)

    def error(self, message: str) -> NoReturn:
        """Usage and `prog: erro: message` on stderr, exit code 2 (as argparse)."""
        self.print_usage(sys.stderr)
        self.exit(EXIT_CONFIG, f"{self.prog}: erro: {translate_message(message)}\n")


def module_parser(module: str, description: str, prog: Optional[str] = None,
                  **kwargs: Any) -> ArgumentParser:
    """The parser of `python -m nsj_queue_lib.<module>` (or of `prog`, the nsj-queue
    subcommand that runs it), with Portuguese -h/--help and --version."""
    return ArgumentParser(prog=prog or f"python -m nsj_queue_lib.{module}",
                          description=description, version=True, **kwargs)


def portuguese(parser: argparse.ArgumentParser, version: bool = False,
               with_help: bool = True) -> argparse.ArgumentParser:
    """Portuguese -h/--help (and --version) and section titles on a parser made with
    add_help=False."""
    parser._optionals.title = "opções"  # argparse has no public setter for these
    parser._positionals.title = "argumentos"
    if with_help:
        parser.add_argument("-h", "--help", action="help", help="mostra esta ajuda e sai")
    if version:
        from nsj_queue_lib.version import __version__

        parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                            help="mostra a versão e sai")
    return parser


def add_parser(subparsers: Any, name: str, handler: Optional[Callable[..., int]] = None, *,
               task_id: bool = False, queue: bool = False,
               **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand parser with the Portuguese formatter and help option, run by
    `handler`: with `task_id` its first argument is a task ID, with `queue` it takes the
    queue options (--tabela, --json); arguments added later come after them."""
    kwargs.setdefault("formatter_class", HelpFormatter)
    parser = portuguese(subparsers.add_parser(name, add_help=False, **kwargs))
    if task_id:
        add_task_id_argument(parser)
    if queue:
        add_queue_options(parser)
    if handler is not None:
        parser.set_defaults(handler=handler)
    return parser


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


def add_task_id_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", type=positive_int, metavar="ID",
                        help="id de qualquer tentativa da tarefa")


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="saída em JSON, para scripts")


def queue_settings(args: argparse.Namespace) -> Any:
    """Settings with DB_* and the queue table (QUEUE_TABLE or --tabela)."""
    from nsj_queue_lib.config import Settings, validate_table_name

    settings = Settings.from_env(require=("db",))
    table = getattr(args, "tabela", None)
    if table:
        settings = settings.replace(queue_table=validate_table_name(
            table, "--tabela", settings.dialect_name))
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


def driver_error_text(exc: BaseException) -> str:
    """One Portuguese line for a driver error; a missing queue table says how to create it."""
    from nsj_queue_lib.db.errors import Fault, classify, server_message

    if classify(exc) is Fault.NO_TABLE:
        return (f"a tabela não existe no banco ({server_message(exc)}); crie a fila com "
                "'nsj-queue schema apply SCHEMA FILA'")
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class TerminalSafe:
    """A text stream that writes through `terminal_safe`: what the operator's commands
    print (task messages, process names, payloads) reaches the terminal as text only."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    @property
    def raw_stream(self) -> Any:
        """The stream itself, for the library's own control sequences (status --watch)."""
        return self.stream

    def write(self, text: str) -> int:
        self.stream.write(terminal_safe(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def terminal_output() -> Iterator[None]:
    """stdout and stderr through TerminalSafe for the duration (restored after)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalSafe(out), TerminalSafe(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a handler; turn the library's errors into one line on stderr and an exit code.
    Everything it prints goes through `terminal_safe` (TerminalSafe)."""

    def wrapper(args: argparse.Namespace) -> int:
        with terminal_output():
            return _run_guarded(func, args)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper


def _run_guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return func(args)
    except ConfigError as exc:
        print(f"Erro: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (DatabaseUnavailable, NotFoundException, InvalidTaskState,
            ControlTableMissing, FeatureUnavailable) as exc:
        print(f"Erro: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_FAILED
    except Exception as exc:  # a driver error: missing table, no privilege, ...
        print(f"Erro: {driver_error_text(exc)}", file=sys.stderr)
        return EXIT_FAILED


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


def add_queue_options(parser: argparse.ArgumentParser) -> None:
    """--tabela and --json: the options of every command that reads or changes a queue."""
    add_table_option(parser)
    add_json_option(parser)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """The result of a command: `data` as JSON with --json, else the line(s) `text`."""
    if args.json:
        print_json(data)
    else:
        print(text)


def add_passthrough(subparsers: Any, name: str, module: str, help: str) -> None:
    """Subcommand `name` run by `nsj_queue_lib.<module>.main`, which parses the rest of the
    line with its own options (`nsj-queue NAME --help` shows them)."""

    def handler(args: argparse.Namespace) -> int:
        import importlib

        with terminal_output():
            return importlib.import_module(f"nsj_queue_lib.{module}").main(
                args.extra, prog=f"nsj-queue {name}")

    parser = subparsers.add_parser(name, add_help=False, help=help)
    parser.set_defaults(handler=handler, passthrough=True)


def connect_db(mysql: bool, application_name: str) -> Any:
    """A connection from the DB_* settings; `mysql` forces the MySQL driver."""
    from nsj_queue_lib.config import Settings
    from nsj_queue_lib.db.session import connect

    settings = Settings.from_env(require=("db",))
    if mysql and not settings.is_mysql:
        settings = settings.replace(db_driver="MYSQL")
    return connect(settings, application_name=application_name)


def print_verify(result: Any, stamp: str, fix: str) -> bool:
    """The text of a schema verification (notes, then equal or the differences and the
    command `fix` that corrects them); True when the queue is at the current version."""
    where = f"{result.schema}.{result.fila}"
    for note in result.notes:
        print(f"aviso: {note}")
    if result.ok:
        print(f"{where}: igual à versão atual ({stamp}).")
        return True
    print(f"{where}: {len(result.differences)} diferença(s) da versão atual "
          f"(gravada no banco: {result.version or 'nenhuma, 1.2.2?'}):")
    for diff in result.differences:
        print(f"  - {diff}")
    print(f"Para corrigir: {fix}")
    return False
