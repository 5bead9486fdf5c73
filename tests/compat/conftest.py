"""Fixtures of the compatibility suite: the real 1.2.2 (fails, never skips, under CI)."""

from __future__ import annotations

import os

import pytest

from tests.compat.legacy import Legacy, install


@pytest.fixture(scope="session")
def legacy() -> Legacy:
    try:
        return install()
    except Exception as exc:  # network, index or build failure
        message = f"nsj-queue-lib==1.2.2 não pôde ser instalado: {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI definido: os testes de compatibilidade não podem ser "
                        "pulados)")
        pytest.skip(message)
