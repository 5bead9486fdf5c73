"""argparse's own messages in Portuguese, as a user sees them from the installed
`nsj-queue` console script (a real subprocess) and from every parser of the package."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.fixtures.processes import ROOT

ENGLISH = ("usage:", "error:", "the following arguments", "invalid choice", "choose from",
           "unrecognized arguments", "show this help", "positional arguments", "options:")


def nsj_queue(*args: str, env=None) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "nsj-queue"
    assert script.exists(), f"{script}: instale o pacote (pip install -e .)"
    env = dict(env or {}, PATH=os.environ.get("PATH", ""), HOME=os.environ.get("HOME", "/tmp"))
    return subprocess.run([str(script), *args], env=env, cwd=str(ROOT), capture_output=True,
                          text=True, timeout=60)


def _no_english(text: str) -> None:
    assert [w for w in ENGLISH if w in text] == [], text


def test_missing_argument_is_reported_in_portuguese_with_exit_2():
    res = nsj_queue("tasks", "show")
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.startswith("uso: nsj-queue tasks show")
    assert res.stderr.splitlines()[-1] == \
        "nsj-queue tasks show: erro: argumentos obrigatórios ausentes: ID"
    _no_english(res.stderr)


def test_unknown_subcommand_is_reported_in_portuguese_with_exit_2():
    res = nsj_queue("nao-existe")
    assert res.returncode == 2
    last = res.stderr.splitlines()[-1]
    assert last.startswith("nsj-queue: erro: argumento COMANDO: valor inválido: 'nao-existe' "
                           "(valores aceitos: "), last
    assert "'schema'" in last and "'worker'" in last
    _no_english(res.stderr)
    res = nsj_queue("tasks", "listar")
    assert res.returncode == 2 and "valor inválido: 'listar'" in res.stderr
    _no_english(res.stderr)


def test_help_and_bad_values_have_no_english_left():
    for args in (["--help"], ["tasks", "list", "--help"], ["schema", "--help"],
                 ["tasks", "list", "--mortas", "--vivas"], ["tasks", "list", "--nada"]):
        res = nsj_queue(*args)
        _no_english(res.stdout + res.stderr)
    res = nsj_queue("tasks", "list", "--mortas", "--vivas")
    assert res.returncode == 2
    assert "argumento --vivas: não pode ser usado com o argumento --mortas" in res.stderr


def test_every_parser_of_the_package_is_the_portuguese_one():
    """No module builds a plain argparse.ArgumentParser (it would speak English)."""
    plain = []
    for path in (ROOT / "nsj_queue_lib").rglob("*.py"):
        if path.name == "common.py" and path.parent.name == "cli":
            continue
        if re.search(r"argparse\.ArgumentParser\(|^from argparse import", path.read_text(),
                     re.M):
            plain.append(str(path.relative_to(ROOT)))
    assert plain == []


def test_missing_queue_table_says_how_to_create_it(pg_server):
    env = pg_server.env()
    for args in (["tasks", "list"], ["status"]):
        res = nsj_queue(*args, "--tabela", "public.fila_que_nao_existe", env=env)
        assert res.returncode == 1, res.stderr
        assert "a tabela não existe no banco" in res.stderr, res.stderr
        assert "nsj-queue schema apply SCHEMA FILA" in res.stderr
