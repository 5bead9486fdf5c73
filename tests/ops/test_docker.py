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
from tests.helpers import ROOT

COMPOSE = ROOT / "docker-compose.yml"
SERVICES = {"postgres", "mariadb", "server", "worker", "worker_pubsub", "worker_webhook",
            "tests"}
APP_SERVICES = SERVICES - {"postgres", "mariadb"}
# Variables of the test harness (tests/mysql_server.py), allowed in the tests service only.
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
                out.append(_scalar(text[2:]))
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
                     "  vazio:\n")
    assert doc == {"a": {"b": "x # y", "l": ["1", "dois"], "f": ["p", "q"], "vazio": None}}
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
        assert svc["env_file"] == ".env", name
        assert svc.get("build"), f"{name} deve construir a imagem do Dockerfile"
        command = svc["command"]
        assert command[:2] == ["python", "-m"], f"{name}: {command}"
        module = command[2]
        if name == "tests":
            assert module == "pytest"
            continue
        assert module.startswith("nsj_queue_lib.") and _module_exists(module), module
        health = (svc.get("healthcheck") or {}).get("test")
        if health:
            assert health[:4] == ["CMD", "python", "-m", "nsj_queue_lib.health"], name
    assert _module_exists("nsj_queue_lib.health")


def test_compose_names_only_known_settings_variables(compose):
    known = _known_variables()
    text = COMPOSE.read_text(encoding="utf-8")
    interpolated = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))
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
