"""The documentation's reference pages checked against the code: every environment
variable Settings reads, every `nsj-queue` command and option, every metric of /metrics.

A variable, command or metric added to the code without a line in the reference fails
here, with the page to edit in the message.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from typing import Dict, List, Set

import pytest

from nsj_queue_lib.cli import build_parser
from nsj_queue_lib.config import Settings
from tests.fixtures.processes import ROOT

DOCS = ROOT / "docs"
VARIABLES = DOCS / "referencia" / "variaveis.md"
CLI = DOCS / "referencia" / "cli.md"
METRICS = DOCS / "referencia" / "metricas.md"
# Metric families as the code declares them: ("nsj_queue_x", "gauge", ...) tuples and
# histogram_family("nsj_queue_x", ...).
_FAMILY = re.compile(r'(?:\(|histogram_family\()\s*"(nsj_queue_[a-z0-9_]+)",\s*'
                     r'(?:"(?:gauge|counter|histogram)"|")')
# An option in a --help text (the subcommands that parse their own arguments).
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _table_names(text: str) -> Set[str]:
    """Names in backquotes in the first two columns of the page's tables."""
    names: Set[str] = set()
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = line.split("|")[1:3]
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", " ".join(cells)))
    return names


def test_every_variable_settings_reads_is_in_the_reference():
    documented = _table_names(VARIABLES.read_text(encoding="utf-8"))
    known = set(Settings.known_variables())
    missing = sorted(known - documented)
    assert not missing, f"variáveis sem linha em {VARIABLES.relative_to(ROOT)}: {missing}"
    stale = sorted(documented - known)
    assert not stale, f"{VARIABLES.relative_to(ROOT)} documenta variáveis que não existem: {stale}"


def _commands() -> Dict[str, List[str]]:
    """'schema print' -> its options, for every (sub)command of nsj-queue."""
    out: Dict[str, List[str]] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                continue
            for name, sub in action.choices.items():
                path = f"{prefix}{name}"
                nested = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
                if not nested:
                    out[path] = [o for a in sub._actions for o in a.option_strings
                                 if o.startswith("--") and o not in ("--help", "--version")]
                walk(sub, path + " ")

    walk(build_parser(), "")
    return out


def _passthrough_options(command: str) -> List[str]:
    """Options of a subcommand that parses its own arguments, read from its --help."""
    res = subprocess.run([sys.executable, "-m", "nsj_queue_lib", command, "--help"],
                         capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert res.returncode == 0, res.stderr
    return sorted(set(_OPTION.findall(res.stdout)) - {"--help", "--version"})


def _cli_sections() -> Dict[str, str]:
    """'schema print' -> the text of its section in the CLI reference."""
    text = CLI.read_text(encoding="utf-8")
    sections: Dict[str, str] = {}
    for part in re.split(r"^### ", text, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        m = re.match(r"`nsj-queue ([a-z -]+?)(?: [A-Z\[][^`]*)?`", title)
        if m:
            sections[m.group(1).strip()] = body
    return sections


def test_every_cli_command_and_option_is_in_the_reference():
    sections = _cli_sections()
    commands = _commands()
    missing = sorted(set(commands) - set(sections))
    assert not missing, (f"comandos sem seção (### `nsj-queue ...`) em "
                         f"{CLI.relative_to(ROOT)}: {missing}")
    stale = sorted(set(sections) - set(commands))
    assert not stale, f"{CLI.relative_to(ROOT)} documenta comandos que não existem: {stale}"
    undocumented = []
    for command, options in sorted(commands.items()):
        if not options and command in ("status", "health", "dashboard", "demo"):
            options = _passthrough_options(command)
        undocumented += [f"{command} {o}" for o in options if f"`{o}" not in sections[command]]
    assert not undocumented, f"opções sem menção em {CLI.relative_to(ROOT)}: {undocumented}"


def _metric_names() -> Set[str]:
    names: Set[str] = set()
    for path in (ROOT / "nsj_queue_lib").rglob("*.py"):
        names.update(_FAMILY.findall(path.read_text(encoding="utf-8")))
    return names


def test_every_metric_is_in_the_reference():
    names = _metric_names()
    assert {"nsj_queue_tasks_finished_total", "nsj_queue_task_duration_seconds",
            "nsj_queue_depth", "nsj_queue_server_clients"} <= names  # the scan finds them
    text = METRICS.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(nsj_queue_[a-z0-9_]+)`", text, flags=re.M))
    missing = sorted(names - documented)
    assert not missing, f"métricas sem linha em {METRICS.relative_to(ROOT)}: {missing}"
    stale = sorted(documented - names)
    assert not stale, f"{METRICS.relative_to(ROOT)} documenta métricas que não existem: {stale}"


def test_readme_is_a_front_page_that_links_to_the_docs():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    linked = set(re.findall(r"\]\((docs/[^)#]+)", text))
    assert {"docs/tutorial.md", "docs/referencia/variaveis.md", "docs/referencia/cli.md",
            "docs/referencia/metricas.md", "docs/desempenho.md"} <= linked
    for target in linked:
        assert (ROOT / target).is_file(), f"README aponta para {target}, que não existe"


@pytest.mark.parametrize("page", ["howto/webhooks.md", "bench.md", "protocol.md", "pypi.md"])
def test_pages_the_brief_keeps_exist(page):
    assert (DOCS / page).is_file()
