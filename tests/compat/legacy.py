"""The real nsj-queue-lib 1.2.2, installed from the package index into its own venv.

The venv is cached between runs (NSJQ_LEGACY_VENV, default
~/.cache/nsj_queue_lib/legacy-1.2.2).  Its programs always run with a working
directory outside this repository and without PYTHONPATH, so `python -m
nsj_queue_lib...` imports 1.2.2 and never the 2.x of the checkout.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

VERSION = "1.2.2"
STAMP = ".nsjq-installed"


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "nsj_queue_lib" / f"legacy-{VERSION}"
    return Path(os.environ.get("NSJQ_LEGACY_VENV") or default)


class Legacy:
    """Runs programs of the installed 1.2.2."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = str(root / "bin" / "python")
        self.workdir = Path(tempfile.mkdtemp(prefix="nsjq-legacy-"))

    def env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("QUEUE_", "PYTHON", "DB_", "DATABASE_"))}
        env.update(extra or {})
        return env

    def run(self, args: List[str], extra_env: Optional[Dict[str, str]] = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([self.python, *args], capture_output=True, text=True,
                              cwd=str(self.workdir), env=self.env(extra_env), timeout=timeout)

    def db_gen(self, schema: str, fila: str) -> str:
        res = self.run(["-m", "nsj_queue_lib.db_gen", schema, fila])
        assert res.returncode == 0, res.stderr
        return res.stdout

    def script(self, name: str, text: str) -> Path:
        path = self.workdir / name
        path.write_text(text, encoding="utf-8")
        return path


def install() -> Legacy:
    """Install (once, under a file lock) and return the 1.2.2 venv."""
    root = venv_dir()
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(str(root) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / STAMP).exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True,
                           capture_output=True, timeout=300)
            res = subprocess.run([str(root / "bin" / "pip"), "install", "-q",
                                  "--disable-pip-version-check", f"nsj-queue-lib=={VERSION}"],
                                 capture_output=True, text=True, timeout=900)
            if res.returncode != 0:
                raise RuntimeError(f"pip install nsj-queue-lib=={VERSION} falhou:\n"
                                   f"{res.stdout}\n{res.stderr}")
            check = subprocess.run([str(root / "bin" / "python"), "-c",
                                    "import importlib.metadata as m; "
                                    "print(m.version('nsj-queue-lib'))"],
                                   capture_output=True, text=True, cwd=tempfile.gettempdir())
            if check.stdout.strip() != VERSION:
                raise RuntimeError(f"versão instalada inesperada: {check.stdout}{check.stderr}")
            (root / STAMP).write_text(VERSION)
    return Legacy(root)
