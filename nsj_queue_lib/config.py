"""Settings read once from the environment (and from a `.env` file when present).

Every variable of the reference README is here, with its aliases and defaults.
Nothing is read at import time: `Settings.from_env()` is called by the worker
and server entry points, and internal code receives the `Settings` object.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
import sys
import threading
from dataclasses import dataclass, field, fields
from typing import Any, Callable, FrozenSet, Mapping, Optional, Set, Tuple

from nsj_queue_lib.db.names import object_name
from nsj_queue_lib.exceptions import ConfigError
from nsj_queue_lib.text import one_line

logger = logging.getLogger(__name__)

DRIVERS = ("POSTGRES", "MYSQL", "SINGLE_STORE")
# The SQL dialect of each DB_DRIVER (db/dialect.py's names: identifier rules, SQL files).
DIALECT_OF_DRIVER = {"POSTGRES": "postgres", "MYSQL": "mysql", "SINGLE_STORE": "mysql"}
MYSQL_DRIVERS = ("auto", "pymysql", "mysqlclient")  # nsj_queue_lib.db.mysql_driver
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_EVERY_5 = "0,5,10,15,20,25,30,35,40,45,50,55"

DEFAULT_CREDENTIALS_URL = "https://api.sre.nasajon.com.br/erp/credentials"
DEFAULT_OAUTH_TOKEN_URL = (
    "https://auth.nasajon.com.br/auth/realms/master/protocol/openid-connect/token"
)


def is_identifier(name: str) -> bool:
    """True for a plain SQL identifier (letters, digits, '_', not starting with a digit)."""
    return bool(_IDENT.fullmatch(name or ""))


def validate_identifier(name: str, what: str, dialect_name: str = "postgres") -> str:
    """The identifier as the database stores it (unquoted PostgreSQL names fold to lower
    case, quoted ones keep their case); ConfigError naming `what` when invalid."""
    from nsj_queue_lib.db.identifiers import resolve_identifier

    return resolve_identifier(name, what, dialect_name)


def validate_table_name(name: str, what: str, dialect_name: str = "postgres") -> str:
    """Resolve `table` or `schema.table` (see validate_identifier)."""
    from nsj_queue_lib.db.identifiers import resolve_table

    return resolve_table(name, what, dialect_name)


_MINUTES_ACCEPTED = "use minutos de 0 a 59 separados por vírgula (ex.: 0,15,30,45) ou '*'"


def parse_minutes(text: str) -> frozenset[int]:
    """Parse a comma list of clock minutes ('0,5,10'); '*' means every minute."""
    text = text.strip()
    if text == "*":
        return frozenset(range(60))
    out = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not 0 <= int(part) <= 59:
            raise ValueError(f"minuto '{part}' inválido; {_MINUTES_ACCEPTED}")
        out.add(int(part))
    if not out:
        raise ValueError(f"lista de minutos vazia; {_MINUTES_ACCEPTED}")
    return frozenset(out)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "1", "yes", "sim", "on"):
        return True
    if low in ("false", "0", "no", "nao", "não", "off", ""):
        return False
    raise ValueError("use true ou false (também aceitos: 1/0, sim/não, yes/no, on/off)")


def _number(text: str, convert: Callable[[str], Any], accepted: str) -> Any:
    """`convert(text)` or a ValueError saying what is accepted (never Python's own
    "invalid literal for int()" wording)."""
    try:
        return convert(text.strip())
    except (ValueError, OverflowError):
        raise ValueError(accepted) from None


def _positive_int(text: str) -> int:
    accepted = "use um número inteiro maior que zero (ex.: 10)"
    value = _number(text, int, accepted)
    if value <= 0:
        raise ValueError(accepted)
    return value


# QUEUE_CONCURRENCY: threads (and database connections) of one worker process, at most.
# More tasks at once come from more processes; at start the worker also checks that the
# database can take that many connections now (runtime/capacity.py).
MAX_CONCURRENCY = 256


def _concurrency(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_CONCURRENCY:
        raise ValueError(f"use de 1 a {MAX_CONCURRENCY} (tarefas simultâneas por processo, uma "
                         "conexão cada; para mais, use mais processos)")
    return value


def _whole_seconds(text: str) -> int:
    """Seconds as a positive integer (the breaker's pause is stored in whole seconds)."""
    accepted = "use um número inteiro de segundos maior que zero (ex.: 30; sem frações)"
    value = _number(text, int, accepted)
    if value <= 0:
        raise ValueError(accepted)
    return value


def _non_negative_int(text: str) -> int:
    accepted = "use um número inteiro maior ou igual a zero (ex.: 5; 0 desliga)"
    value = _number(text, int, accepted)
    if value < 0:
        raise ValueError(accepted)
    return value


def _positive_float(text: str) -> float:
    accepted = "use um número maior que zero (ex.: 30 ou 0.5)"
    value = _number(text, float, accepted)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(accepted)
    return value


def _non_negative_float(text: str) -> float:
    accepted = "use um número maior ou igual a zero (ex.: 5 ou 0.5)"
    value = _number(text, float, accepted)
    if not math.isfinite(value) or value < 0:
        raise ValueError(accepted)
    return value


def _port(text: str) -> int:
    accepted = "use um número inteiro de 1 a 65535"
    value = _number(text, int, accepted)
    if not 0 < value < 65536:
        raise ValueError(accepted)
    return value


def _opt_port(text: str) -> Optional[int]:
    return _port(text) if text.strip() else None


def _log_format(text: str) -> str:
    value = text.strip().lower() or "text"
    if value not in ("text", "json"):
        raise ValueError("use text ou json")
    return value


def _driver(text: str) -> str:
    value = text.strip().upper()
    if value not in DRIVERS:
        raise ValueError(f"use um de {', '.join(DRIVERS)}")
    return value


def _mysql_driver(text: str) -> str:
    value = text.strip().lower()
    if value not in MYSQL_DRIVERS:
        raise ValueError(f"use um de {', '.join(MYSQL_DRIVERS)}")
    return value


POOL_MODES = ("session", "transaction")


def _pool_mode(text: str) -> str:
    value = text.strip().lower()
    if value not in POOL_MODES:
        raise ValueError(f"use um de {', '.join(POOL_MODES)}")
    return value


def _lease_seconds(text: str) -> int:
    value = _positive_int(text)
    if not 3 <= value <= 3600:
        raise ValueError("use de 3 a 3600 segundos")
    return value


def _str(text: str) -> str:
    return text


def _opt_str(text: str) -> Optional[str]:
    return text.strip() or None


# Names are checked here and resolved (folded per the database's rules) once the
# driver is known, in Settings.from_env.
def _table(text: str) -> str:
    validate_table_name(text.strip(" "), "nome")
    return text.strip(" ")


def _opt_table(text: str) -> Optional[str]:
    return _table(text) if text.strip(" ") else None


def _channel(text: str) -> str:
    validate_identifier(text.strip(" "), "nome")
    return text.strip(" ")


_RESOLVED = {"queue_table": ("QUEUE_TABLE", True), "queue_subscriber_table":
             ("QUEUE_SUBSCRIBER_TABLE", True), "queue_name": ("QUEUE_NAME", False)}


@dataclass(frozen=True)
class _Var:
    names: Tuple[str, ...]
    parse: Callable[[str], Any]
    default: Any = None
    required: bool = False
    doc: str = ""


def _v(*names: str, parse: Callable[[str], Any] = _str, default: Any = None,
       required: bool = False, doc: str = "", secret: bool = False) -> Any:
    # secret: kept out of repr(Settings) (tracebacks, test reports, a careless log line)
    return field(metadata={"var": _Var(names, parse, default, required, doc)}, default=None,
                 repr=not secret)


@dataclass(frozen=True)
class Settings:
    """All configuration of workers, server and tools (see `.env.dist`)."""

    # Database
    db_host: str = _v("DB_HOST", "DATABASE_HOST", required=True, doc="Host do banco")
    db_port: int = _v("DB_PORT", "DATABASE_PORT", parse=_port, required=True, doc="Porta")
    db_name: str = _v("DB_BASE", "DATABASE_NAME", required=True, doc="Nome da base")
    db_user: str = _v("DB_USER", "DATABASE_USER", required=True, doc="Usuário")
    db_pass: str = _v("DB_PASS", "DATABASE_PASS", default="", doc="Senha (vazia é válida)",
                      secret=True)
    db_driver: str = _v("DB_DRIVER", "DATABASE_DRIVER", parse=_driver, default="POSTGRES",
                        doc="POSTGRES, MYSQL ou SINGLE_STORE")
    db_mysql_driver: str = _v("DB_MYSQL_DRIVER", parse=_mysql_driver, default="pymysql",
                              doc="pymysql (padrão), mysqlclient (extra [mysqlclient]) ou auto")
    db_pool_mode: str = _v(
        "DB_POOL_MODE", parse=_pool_mode, default="session",
        doc="session (padrão: conexão direta ou pooler em modo sessão) ou transaction "
            "(atrás de um pooler em modo transação: PgBouncer, RDS Proxy, Supavisor; "
            "PostgreSQL apenas)")
    db_listen_host: Optional[str] = _v(
        "DB_LISTEN_HOST", parse=_opt_str,
        doc="DB_POOL_MODE=transaction: host de uma conexão direta ao PostgreSQL (sem "
            "pooler) para LISTEN; sem valor, os workers sondam a fila")
    db_listen_port: Optional[int] = _v(
        "DB_LISTEN_PORT", parse=_opt_port,
        doc="porta da conexão direta de DB_LISTEN_HOST (padrão: DB_PORT)")
    queue_lease_seconds: int = _v(
        "QUEUE_LEASE_SECONDS", parse=_lease_seconds, default=30,
        doc="DB_POOL_MODE=transaction: segundos da concessão (lease) de uma tarefa em "
            "execução, renovada a cada terço; a tarefa de um worker morto volta à fila "
            "em até esse tempo e meio")
    # Queue
    queue_name: str = _v("QUEUE_NAME", parse=_channel, required=True, doc="Canal do notify")
    queue_table: str = _v("QUEUE_TABLE", parse=_table, required=True, doc="Tabela da fila")
    queue_subscriber_table: Optional[str] = _v("QUEUE_SUBSCRIBER_TABLE", parse=_opt_table,
                                               doc="Tabela de assinaturas (pub/sub)")
    queue_max_retry: int = _v("QUEUE_MAX_RETRY", parse=_positive_int, default=100)
    queue_base_interval_retry: float = _v("QUEUE_BASE_INTERVAL_RETRY",
                                          parse=_non_negative_float, default=5.0, doc="minutos")
    queue_minute_retry_thread: FrozenSet[int] = _v(
        "QUEUE_MINUTE_RETRY_THREAD", parse=parse_minutes, default=parse_minutes(_EVERY_5))
    queue_minute_purge_thread: FrozenSet[int] = _v(
        "QUEUE_MINUTE_PURGE_THREAD", parse=parse_minutes, default=parse_minutes("0"))
    queue_minute_notify_thread: FrozenSet[int] = _v(
        "QUEUE_MINUTE_NOTIFY_THREAD", parse=parse_minutes, default=parse_minutes(_EVERY_5))
    queue_purge_max_age: int = _v("QUEUE_PURGE_MAX_AGE", parse=_positive_int, default=60,
                                  doc="dias")
    queue_purge_limit: int = _v("QUEUE_PURGE_LIMIT", parse=_positive_int, default=1000)
    queue_purge_round_limit: int = _v("QUEUE_PURGE_ROUND_LIMIT", parse=_positive_int,
                                      default=100)
    queue_concurrency: int = _v("QUEUE_CONCURRENCY", parse=_concurrency, default=1,
                                doc="tarefas simultâneas por processo (uma thread e uma "
                                f"conexão cada; no máximo {MAX_CONCURRENCY})")
    queue_batch_size: int = _v("QUEUE_BATCH_SIZE", parse=_positive_int, default=1,
                               doc="tarefas por transação (modo lote; 1 = uma por vez)")
    queue_wait_notify_interval: float = _v("QUEUE_WAIT_NOTIFY_INTERVAL", parse=_positive_float,
                                           default=30.0, doc="segundos")
    queue_poll_interval: float = _v("QUEUE_POLL_INTERVAL", parse=_positive_float, default=0.1,
                                    doc="segundos entre sondagens de tarefas novas (MySQL "
                                        "nativo e servidor de filas)")
    queue_schedules: bool = _v("QUEUE_SCHEDULES", parse=_bool, default=True,
                               doc="o worker roda as tarefas periódicas da fila (nsj-queue "
                                   "schedule); false: não as roda (outros workers rodam)")
    queue_fair_tenants: bool = _v("QUEUE_FAIR_TENANTS", parse=_bool, default=False,
                                  doc="entre tarefas devidas de mesma prioridade, o claim "
                                      "alterna entre os valores de tenant")
    queue_compat_1_2_2: Optional[bool] = _v(
        "QUEUE_COMPAT_1_2_2", parse=_bool, default=None,
        doc="força o modo de frota mista com a 1.2.2 (true) ou o desliga (false); sem valor, "
            "vale o modo gravado na fila (nsj-queue compat)")
    default_webhook_timeout: float = _v("DEFAULT_WEBHOOK_TIMEOUT", parse=_positive_float,
                                        default=20.0, doc="segundos")
    webhook_secrets_key: Optional[str] = _v(
        "WEBHOOK_SECRETS_KEY", parse=_opt_str, secret=True,
        doc="chaves Fernet (separadas por vírgula, a mais nova primeiro) que cifram os "
            "segredos das assinaturas; requer o extra webhook-crypto")
    webhook_breaker_failures: int = _v(
        "WEBHOOK_BREAKER_FAILURES", parse=_non_negative_int, default=5,
        doc="falhas seguidas que abrem o disjuntor de um endpoint (0 desliga)")
    webhook_breaker_cooldown: int = _v(
        "WEBHOOK_BREAKER_COOLDOWN", parse=_whole_seconds, default=30,
        doc="segundos (inteiros) da primeira pausa do disjuntor (dobra a cada sonda que falha)")
    webhook_breaker_max_cooldown: int = _v(
        "WEBHOOK_BREAKER_MAX_COOLDOWN", parse=_whole_seconds, default=600,
        doc="segundos (inteiros), teto da pausa do disjuntor (>= WEBHOOK_BREAKER_COOLDOWN)")
    webhook_rate_limit: float = _v(
        "WEBHOOK_RATE_LIMIT", parse=_non_negative_float, default=0.0,
        doc="entregas por segundo por endpoint em cada processo worker (0: sem limite)")
    shutdown_timeout: float = _v("QUEUE_SHUTDOWN_TIMEOUT", parse=_positive_float, default=300.0,
                                 doc="segundos que o SIGTERM espera a tarefa em curso")
    queue_health_file: Optional[str] = _v("QUEUE_HEALTH_FILE", parse=_opt_str,
                                          doc="arquivo de heartbeat lido pelo health check")
    # Logging
    log_debug: bool = _v("LOG_DEBUG", parse=_bool, default=False,
                         doc="DEBUG nos loggers da biblioteca (nsj_queue_lib.*)")
    log_debug_dependencies: bool = _v(
        "LOG_DEBUG_DEPENDENCIES", parse=_bool, default=False,
        doc="com LOG_DEBUG, DEBUG também nas dependências (urllib3...) e demais loggers")
    env: str = _v("ENV", parse=lambda s: s.strip().upper() or "DEV", default="DEV")
    grafana_url: Optional[str] = _v("GRAFANA_URL", parse=_opt_str, secret=True)  # (user:pass@)
    log_format: str = _v("LOG_FORMAT", parse=_log_format, default="text",
                         doc="text (padrão) ou json: um objeto JSON por linha")
    # Observability (opt-in HTTP endpoint with /metrics and /healthz)
    metrics_port: Optional[int] = _v("METRICS_PORT", parse=_opt_port,
                                     doc="porta de /metrics e /healthz (desligado sem ela)")
    metrics_bind_host: str = _v("METRICS_BIND_HOST", default="127.0.0.1",
                                doc="interface de /metrics (padrão: só loopback)")
    dashboard_port: int = _v("DASHBOARD_PORT", parse=_port, default=8090,
                             doc="porta do painel web (python -m nsj_queue_lib.dashboard)")
    dashboard_bind_host: str = _v("DASHBOARD_BIND_HOST", default="127.0.0.1",
                                  doc="interface do painel (padrão: só loopback)")
    dashboard_token: Optional[str] = _v("DASHBOARD_TOKEN", parse=_opt_str, secret=True,
                                        doc="token das ações do painel; sem ele, só leitura")
    dashboard_allowed_hosts: Optional[str] = _v(
        "DASHBOARD_ALLOWED_HOSTS", parse=_opt_str,
        doc="nomes extras aceitos no Host do painel (vírgula; *.dominio); 0.0.0.0 não libera "
            "qualquer Host")
    metrics_db_interval: float = _v("METRICS_DB_INTERVAL", parse=_positive_float, default=15.0,
                                    doc="segundos de cache das medidas lidas do banco")
    # Client/server mode
    client_server_mode: bool = _v("CLIENT_SERVER_MODE", parse=_bool, default=False)
    server_host: str = _v("SERVER_HOST", default="127.0.0.1")
    server_bind_host: Optional[str] = _v("SERVER_BIND_HOST", parse=_opt_str,
                                         doc="padrão: 0.0.0.0 com token, 127.0.0.1 sem")
    server_auth_token: Optional[str] = _v("SERVER_AUTH_TOKEN", parse=_opt_str, secret=True)
    server_producer_token: Optional[str] = _v(
        "SERVER_PRODUCER_TOKEN", parse=_opt_str, secret=True,
        doc="token de produtores: só notify (sem HALT, sem locks, sem listen)")
    server_max_handshakes: int = _v("SERVER_MAX_HANDSHAKES", parse=_positive_int, default=8,
                                    doc="conexões ainda não autenticadas ao mesmo tempo")
    server_max_locks_per_client: int = _v("SERVER_MAX_LOCKS_PER_CLIENT", parse=_positive_int,
                                          default=10000, doc="locks por conexão")
    server_tls_cert_file: Optional[str] = _v(
        "SERVER_TLS_CERT_FILE", parse=_opt_str,
        doc="servidor: certificado PEM (TLS ativo com esta e SERVER_TLS_KEY_FILE)")
    server_tls_key_file: Optional[str] = _v("SERVER_TLS_KEY_FILE", parse=_opt_str,
                                            doc="servidor: chave privada PEM do certificado")
    server_tls: bool = _v("SERVER_TLS", parse=_bool, default=False,
                          doc="clientes: conectar ao servidor com TLS")
    server_tls_ca_file: Optional[str] = _v(
        "SERVER_TLS_CA_FILE", parse=_opt_str,
        doc="clientes: CA PEM que valida o servidor (padrão: CAs do sistema)")
    notify_service_port: int = _v("NOTIFY_SERVICE_PORT", parse=_port, default=8770)
    lock_service_port: int = _v("LOCK_SERVICE_PORT", parse=_port, default=8970)
    timeout_socket_message: float = _v("TIMEOUT_SOCKET_MESSAGE", parse=_positive_float,
                                       default=5.0)
    max_client_threads: int = _v("MAX_CLIENT_THREADS", parse=_positive_int, default=50)
    check_tasks_interval: float = _v("CHECK_TASKS_INTERVAL", parse=_positive_float, default=15.0)
    lock_service_wait_conn_interval: float = _v("LOCK_SERVICE_WAIT_CONN_INTERVAL",
                                                parse=_positive_float, default=30.0)
    # Multi-database
    multi_database: bool = _v("MULTI_DATABASE", parse=_bool, default=False)
    multi_database_user: Optional[str] = _v("MULTI_DATABASE_USER", parse=_opt_str)
    multi_database_password: Optional[str] = _v("MULTI_DATABASE_PASSWORD", parse=_opt_str,
                                                secret=True)
    multi_database_client_id: Optional[str] = _v("MULTI_DATABASE_CLIENT_ID", parse=_opt_str)
    multi_database_api_credentials_url: str = _v(
        "MULTI_DATABASE_API_CREDETIALS_URL", "MULTI_DATABASE_API_CREDENTIALS_URL",
        default=DEFAULT_CREDENTIALS_URL)
    oauth_token_url: str = _v("OAUTH_TOKEN_URL", default=DEFAULT_OAUTH_TOKEN_URL)

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None, *, load_dotenv: bool = True,
                 require: Tuple[str, ...] = ("db", "queue")) -> Settings:
        """Build settings from `env` (default: os.environ plus `.env`).

        `require` selects which groups of required variables must be present:
        "db" (DB_*) and "queue" (QUEUE_NAME, QUEUE_TABLE).  All problems are
        collected and raised as one ConfigError naming each variable.
        """
        if env is None:
            if load_dotenv:
                _load_dotenv()
            env = os.environ
        values: dict[str, Any] = {}
        problems: list[str] = []
        for f in fields(cls):
            var: _Var = f.metadata["var"]
            name = next((n for n in var.names if env.get(n) not in (None, "")), None)
            if name is None and "DB_PASS" in var.names:
                name = next((n for n in var.names if n in env), None)
            raw = env[name] if name is not None else None
            group = "db" if f.name.startswith("db_") else "queue"
            if raw is None:
                if var.required and group in require:
                    problems.append(f"variável {' ou '.join(var.names)} não definida")
                values[f.name] = var.default
                continue
            try:
                values[f.name] = var.parse(raw)
            except (ValueError, ConfigError) as exc:
                shown = one_line(raw, 200)
                problems.append(f"variável {name}='{shown}' inválida: {exc}")
        unknown = unknown_variables(env)
        if unknown and problems:
            problems = [_with_typo_hint(problem, unknown) for problem in problems]
        problems.extend(_tls_problems(values))
        problems.extend(_breaker_problems(values))
        problems.extend(_pool_problems(values))
        if not problems:
            dialect_name = DIALECT_OF_DRIVER[values.get("db_driver") or "POSTGRES"]
            for key, (var_name, is_table) in _RESOLVED.items():
                if values.get(key):
                    resolve = validate_table_name if is_table else validate_identifier
                    try:
                        values[key] = resolve(values[key], var_name, dialect_name)
                    except ConfigError as exc:
                        problems.append(str(exc))
        if unknown:
            _warn_unknown(unknown, values.get("log_format") or "text")
        if problems:
            raise ConfigError("Configuração inválida: " + "; ".join(problems))
        return cls(**values)

    @classmethod
    def known_variables(cls) -> FrozenSet[str]:
        """Every variable name (aliases included) `from_env` reads."""
        return frozenset(name for f in fields(cls) for name in f.metadata["var"].names)

    @classmethod
    def variables(cls) -> list[tuple[Tuple[str, ...], Any, str]]:
        """(names, default, doc) of every variable, for documentation."""
        return [(f.metadata["var"].names, f.metadata["var"].default, f.metadata["var"].doc)
                for f in fields(cls)]

    @property
    def server_bind_address(self) -> str:
        """Where the socket server listens: SERVER_BIND_HOST, or by default every
        interface when SERVER_AUTH_TOKEN is set and only the loopback when it is not
        (an unauthenticated lock server is never exposed by default)."""
        if self.server_bind_host:
            return self.server_bind_host
        return "0.0.0.0" if self.server_auth_token else "127.0.0.1"

    @property
    def pooled(self) -> bool:
        """DB_POOL_MODE=transaction: behind a transaction pooler (no session state)."""
        return self.db_pool_mode == "transaction"

    @property
    def is_mysql(self) -> bool:
        return self.db_driver in ("MYSQL", "SINGLE_STORE")

    @property
    def dialect_name(self) -> str:
        """The SQL dialect of DB_DRIVER ("postgres" or "mysql": db/dialect.py's names)."""
        return DIALECT_OF_DRIVER[self.db_driver]

    def replace(self, **changes: Any) -> Settings:
        from dataclasses import replace

        return replace(self, **changes)


# Prefixes of the library's own variables: a name with one of them that the library
# does not read is most likely a typo (QUEUE_BACH_SIZE), warned at start.
CHECKED_PREFIXES = ("DB_", "QUEUE_", "SERVER_", "WEBHOOK_")
# Variables Kubernetes (and docker links) set for a service called db, queue, server...:
# DB_SERVICE_HOST, DB_PORT_5432_TCP_ADDR, ... (never typos of the library's names).
_SERVICE_LINK = re.compile(r"^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|"
                           r"PORT_\d+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)$")
_warned: Set[str] = set()
_warned_lock = threading.Lock()


def default_subscriber_table(queue_table: str) -> str:
    """The subscriber table `nsj-queue schema apply` creates for a queue table (resolved
    name): 'schema.fila' -> 'schema.fila_subscriber' (db/names.py object_name)."""
    *schema, table = queue_table.split(".")
    return ".".join([*schema, object_name(table, "subscriber")])


def unknown_variables(env: Mapping[str, str]) -> list[tuple[str, Optional[str]]]:
    """(name, nearest known name or None) of each variable of `env` with a prefix of the
    library's (DB_, QUEUE_, SERVER_, WEBHOOK_) that Settings does not read, sorted."""
    known = Settings.known_variables()
    out = []
    for name in sorted(env):
        upper = name.upper()
        if (not upper.startswith(CHECKED_PREFIXES) or name in known
                or _SERVICE_LINK.fullmatch(upper)):
            continue
        out.append((name, _nearest(upper, known)))
    return out


def _nearest(name: str, known: FrozenSet[str]) -> Optional[str]:
    """The known name closest to `name` (difflib), ties going to the longer common
    prefix (DB_PASWORD: DB_PASS rather than DB_PORT)."""
    # (0.7: a typo such as QUEUE_BACH_SIZE or DB_PASWORD; not a name that merely shares
    # a prefix with one, such as an application's own SERVER_NAME)
    close = difflib.get_close_matches(name, sorted(known), n=5, cutoff=0.7)
    if not close:
        return None

    def prefix(known_name: str) -> int:
        return next((i for i, (a, b) in enumerate(zip(name, known_name)) if a != b),
                    min(len(name), len(known_name)))

    return max(close, key=lambda k: (round(difflib.SequenceMatcher(None, name, k).ratio(), 3),
                                     prefix(k)))


def unknown_variable_text(name: str, nearest: Optional[str]) -> str:
    """The warning about one unknown variable (Portuguese, names only: never values)."""
    shown = one_line(name, 100)
    if nearest:
        return (f"Variável de ambiente {shown} não é lida pela nsj_queue_lib e foi ignorada; "
                f"quis dizer {nearest}?")
    return (f"Variável de ambiente {shown} não é lida pela nsj_queue_lib e foi ignorada "
            "(nenhuma variável da biblioteca tem nome parecido)")


def _with_typo_hint(problem: str, unknown: list[tuple[str, Optional[str]]]) -> str:
    """A missing variable's problem, with the unknown names that look like it."""
    if not problem.endswith(" não definida"):
        return problem
    names = problem.split()
    for name, nearest in unknown:
        if nearest in names:
            problem += f" ({one_line(name, 100)} está definida: erro de digitação?)"
    return problem


def _warn_unknown(unknown: list[tuple[str, Optional[str]]], log_format: str) -> None:
    """One warning line per unknown variable, once per process.

    At a worker's start the settings are read before logging is configured (their
    LOG_FORMAT decides it): the lines are then written to stderr in the library's own
    format, rather than by Python's bare last-resort handler."""
    with _warned_lock:
        fresh = [(n, near) for n, near in unknown if n not in _warned]
        _warned.update(n for n, _ in fresh)
    if not fresh:
        return
    handler: Optional[logging.Handler] = None
    if not logger.hasHandlers():
        from nsj_queue_lib.observability.logfields import FORMAT, JsonFormatter, TextFormatter

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter() if log_format == "json"
                             else TextFormatter(FORMAT))
    for name, nearest in fresh:
        # A likely typo is a warning; a name like no other (an application's own DB_*
        # variable) is only noted.
        level = logging.WARNING if nearest else logging.INFO
        if handler is None:
            logger.log(level, "%s", unknown_variable_text(name, nearest))
            continue
        record = logger.makeRecord(logger.name, level, __file__, 0, "%s",
                                   (unknown_variable_text(name, nearest),), None)
        handler.handle(record)


def _pool_problems(values: Mapping[str, Any]) -> list[str]:
    """DB_POOL_MODE=transaction is a PostgreSQL database mode."""
    if values.get("db_pool_mode") != "transaction":
        return []
    if values.get("db_driver") not in (None, "POSTGRES"):
        return ["DB_POOL_MODE=transaction é só para o PostgreSQL (DB_DRIVER=POSTGRES)"]
    if values.get("client_server_mode"):
        return ["DB_POOL_MODE=transaction não se combina com CLIENT_SERVER_MODE=true (o "
                "servidor de filas mantém as próprias conexões)"]
    return []


def _breaker_problems(values: Mapping[str, Any]) -> list[str]:
    cooldown = values.get("webhook_breaker_cooldown")
    ceiling = values.get("webhook_breaker_max_cooldown")
    if cooldown is not None and ceiling is not None and ceiling < cooldown:
        return [f"WEBHOOK_BREAKER_MAX_COOLDOWN ({ceiling} s) menor que "
                f"WEBHOOK_BREAKER_COOLDOWN ({cooldown} s): o teto da pausa deve ser maior "
                "ou igual à primeira pausa"]
    return []


def _tls_problems(values: Mapping[str, Any]) -> list[str]:
    """Certificate and key go together; every TLS file must exist and be readable."""
    problems = []
    cert, key = values.get("server_tls_cert_file"), values.get("server_tls_key_file")
    if bool(cert) != bool(key):
        missing = "SERVER_TLS_KEY_FILE" if cert else "SERVER_TLS_CERT_FILE"
        problems.append(f"variável {missing} não definida (SERVER_TLS_CERT_FILE e "
                        "SERVER_TLS_KEY_FILE ativam o TLS juntas)")
    for key_name, var in (("server_tls_cert_file", "SERVER_TLS_CERT_FILE"),
                          ("server_tls_key_file", "SERVER_TLS_KEY_FILE"),
                          ("server_tls_ca_file", "SERVER_TLS_CA_FILE")):
        path = values.get(key_name)
        if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            problems.append(f"variável {var}='{one_line(path, 200)}' inválida: arquivo não "
                            "encontrado ou sem permissão de leitura")
    return problems


def _load_dotenv() -> None:
    try:
        from dotenv import find_dotenv, load_dotenv
    except ImportError:  # pragma: no cover - dependency is declared
        return
    path = find_dotenv(usecwd=True)
    if path:
        load_dotenv(path, override=False)
