"""A real browser (Debian's chromium through chromedriver and Selenium) and the dashboard
running as a real process.  Screenshots go to test-artifacts/screenshots/ (git-ignored;
NSJQ_TEST_ARTIFACTS changes the directory)."""

from __future__ import annotations

import os
import shutil
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from tests.fixtures.processes import ROOT, WorkerProc
from tests.fixtures.waiting import eventually
from tests.server.socket_server_helpers import free_port

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver",)


def _find(names: tuple) -> str:
    for name in names:
        path = shutil.which(name) or (f"/usr/lib/chromium/{name}"
                                      if os.path.exists(f"/usr/lib/chromium/{name}") else None)
        if path:
            return path
    return ""


def _missing(what: str) -> None:
    message = (f"{what} não encontrado: instale com `apt-get install chromium chromium-driver` "
               "(o .ci/run instala) e `pip install -e '.[dev]'`")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    path = Path(os.environ.get("NSJQ_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium")
    binary, driver_path = _find(CHROMIUM), _find(DRIVER)
    if not binary:
        _missing("chromium")
    if not driver_path:
        _missing("chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,1000", "--lang=pt-BR"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


_started: List[WorkerProc] = []


@pytest.fixture(autouse=True)
def _stop_dashboards():
    yield
    codes = []
    while _started:
        proc = _started.pop()
        codes.append((proc.stop(timeout=10), proc.log()[-2000:]))
    assert all(code == 0 for code, _ in codes), f"painel não saiu com 0 no SIGTERM: {codes}"


class Dashboard:
    def __init__(self, proc: WorkerProc, port: int, token: str) -> None:
        self.proc = proc
        self.port = port
        self.token = token
        self.base = f"http://127.0.0.1:{port}"

    def url(self, path: str) -> str:
        return self.base + path


def start_dashboard(queue, tmp_path: Path, token: str = "",
                    db_env: Optional[Dict[str, str]] = None) -> Dashboard:
    """The dashboard as a process on the database of `queue` (or of `db_env`)."""
    port = free_port()
    env: Dict[str, str] = dict(db_env if db_env is not None else queue.server.env())
    env.update(DASHBOARD_PORT=str(port), DASHBOARD_TOKEN=token, LOG_DEBUG="false")
    proc = WorkerProc("nsj_queue_lib.dashboard", env, tmp_path / f"dashboard-{port}.log")
    _started.append(proc)

    def up() -> bool:
        if proc.proc.poll() is not None:
            raise AssertionError(f"painel saiu com {proc.proc.returncode}:\n{proc.log()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False

    eventually(up, timeout=20, message="painel no ar")
    return Dashboard(proc, port, token)


@pytest.fixture
def dashboard(pg_queue, tmp_path) -> Iterator[Dashboard]:
    yield start_dashboard(pg_queue, tmp_path, token="segredo-de-teste-123")
