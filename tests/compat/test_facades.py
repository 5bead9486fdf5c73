"""Code written for 1.2.2 imports and runs on 2.x: every module path and public name of
the real 1.2.2 package (listed from its installed files) exists, and a worker written
the 1.2.2 way (its example's imports) runs tasks."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.compat.mixed import LEGACY_PLAIN
from tests.fixtures.processes import ROOT
from tests.fixtures.waiting import eventually


def legacy_names(legacy) -> dict:
    """{module: [public top-level names]} of the installed 1.2.2 (read, not imported)."""
    res = legacy.run(["-c", "import nsj_queue_lib, os; print(os.path.dirname("
                      "nsj_queue_lib.__file__))"])
    root = Path(res.stdout.strip())
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root).with_suffix("").parts
        mod = ".".join(("nsj_queue_lib", *parts)).removesuffix(".__init__")
        names = []
        for node in ast.parse(f.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                names.append(node.name)
            elif isinstance(node, ast.Assign):
                names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        out[mod] = sorted(n for n in names if not n.startswith("_"))
    return out


CHECK = """
import importlib, json, sys
missing = []
for mod, names in json.loads(sys.argv[1]).items():
    try:
        m = importlib.import_module(mod)
    except Exception as exc:
        missing.append(f"{mod}: {type(exc).__name__}: {exc}")
        continue
    missing += [f"{mod}.{n}" for n in names if not hasattr(m, n)]
print(json.dumps(missing))
"""


def test_every_1_2_2_module_and_name_imports_on_2x_without_environment(legacy):
    names = legacy_names(legacy)
    assert len(names) >= 29 and "nsj_queue_lib.settings" in names
    assert "logger" in names["nsj_queue_lib.settings"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DB_", "DATABASE_", "QUEUE_"))}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run([sys.executable, "-c", CHECK, json.dumps(names)], env=env,
                         capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == []


def test_settings_facade_reads_the_environment_on_use(monkeypatch):
    import importlib

    settings = importlib.import_module("nsj_queue_lib.settings")
    settings._settings.cache_clear()
    monkeypatch.setenv("QUEUE_TABLE", "public.Fila_Teste")
    monkeypatch.setenv("QUEUE_MAX_RETRY", "7")
    assert (settings.QUEUE_TABLE, settings.QUEUE_MAX_RETRY) == ("public.fila_teste", 7)
    assert settings.logger.name == "nsj_queue_lib.worker"
    settings._settings.cache_clear()
    from nsj_queue_lib.client.tarefa_dao import TarefaDAO

    try:
        TarefaDAO()
    except NotImplementedError as exc:
        assert "QueueClient" in str(exc)
    else:
        raise AssertionError("TarefaDAO deveria recusar o uso")


def test_a_worker_written_for_1_2_2_runs_on_2x(pg_queue, tmp_path):
    script = tmp_path / "worker_122.py"
    script.write_text(LEGACY_PLAIN, encoding="utf-8")
    env = {**os.environ, **pg_queue.env(TEST_EFFECTS_TABLE=f"{pg_queue.schema}.efeitos_122",
                                             TEST_TASK_SLEEP="0")}
    env["PYTHONPATH"] = str(ROOT)
    pg_queue.sql(f"CREATE TABLE {pg_queue.schema}.efeitos_122 (chave text, tipo text, pid int)")
    log = open(tmp_path / "w.log", "wb")
    proc = subprocess.Popen([sys.executable, str(script)], env=env, cwd=str(tmp_path),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        pg_queue.insert("chave-122")
        eventually(lambda: pg_queue.sql(f"SELECT chave, tipo FROM {pg_queue.schema}.efeitos_122")
                   == [{"chave": "chave-122", "tipo": "v1"}], 20,
                   message="worker 1.2.2 na 2.x")
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
