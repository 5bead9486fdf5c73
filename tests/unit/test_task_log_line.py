"""The line that ends a task (TaskObserver.finished_task): made without logger.info()'s
stack walk, it is the record logger.info() would make (same fields, same source location)
and the handlers of configure_logging write the same text, in both formats."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import pytest

from nsj_queue_lib.observability import observe
from nsj_queue_lib.observability.logfields import (
    FORMAT,
    ContextFilter,
    JsonFormatter,
    TextFormatter,
)
from nsj_queue_lib.observability.logsafe import protect_handler


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured():
    logger = logging.getLogger("nsj_queue_lib.observe")
    keep = _Keep()
    old = (logger.level, logger.propagate)
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, keep
    logger.removeHandler(keep)
    logger.setLevel(old[0])
    logger.propagate = old[1]


def test_record_is_what_logger_info_makes(captured):
    logger, keep = captured
    obs = observe.TaskObserver("fila", 3)
    for ok, attempt in ((True, 1), (False, 1), (False, 3), (None, 2)):
        tarefa = {"id": 42, "tentativa": attempt}
        obs.claimed(tarefa)
        obs.finished_task(tarefa, ok, 0.0125)
    assert len(keep.records) == 4
    source = Path(observe.__file__).read_text(encoding="utf-8").splitlines()
    for record, outcome in zip(keep.records, ("sucesso", "falha", "dead_letter", None)):
        reference = logger.makeRecord(
            logger.name, logging.INFO, observe.__file__, 0, "Tarefa %s terminou: %s em %.3f s",
            (42, outcome or "assumida por outro worker", 0.0125), None, "finished_task",
            {"duration": 0.0125, "outcome": outcome, "task_id": 42,
             "attempt": record.attempt})
        skip = {"created", "msecs", "relativeCreated", "lineno", "pathname", "thread",
                "process", "taskName", "message", "asctime"}
        mine = {k: v for k, v in vars(record).items() if k not in skip}
        theirs = {k: v for k, v in vars(reference).items() if k not in skip}
        assert mine == theirs
        assert record.getMessage() == (f"Tarefa 42 terminou: "
                                       f"{outcome or 'assumida por outro worker'} em 0.013 s")
        assert Path(record.pathname).resolve() == Path(observe.__file__).resolve()
        assert record.funcName == "finished_task"
        assert "terminou" in source[record.lineno - 1] or "_site(" in source[record.lineno - 1]


def test_configured_handlers_write_the_same_text(captured):
    _, keep = captured
    obs = observe.TaskObserver("fila", 3)
    tarefa = {"id": 7, "tentativa": 1}
    obs.claimed(tarefa)
    obs.finished_task(tarefa, True, 0.5)
    made = keep.records[-1]
    reference = logging.LogRecord(made.name, made.levelno, made.pathname, made.lineno,
                                  made.msg, made.args, None, made.funcName)
    reference.__dict__.update({k: getattr(made, k) for k in
                               ("created", "msecs", "relativeCreated", "thread",
                                "threadName", "process", "processName", "duration",
                                "outcome", "task_id", "attempt")})
    for formatter in (TextFormatter(FORMAT), JsonFormatter()):
        texts = []
        for record in (made, reference):
            stream = io.StringIO()
            handler = logging.StreamHandler(stream)
            handler.setFormatter(formatter)
            protect_handler(handler)
            handler.addFilter(ContextFilter("fila"))
            handler.handle(logging.makeLogRecord(vars(record)))
            texts.append(stream.getvalue())
        assert texts[0] == texts[1]
        # and what the standard Formatter itself writes for the text format
        plain = logging.Formatter(FORMAT).format(logging.makeLogRecord(
            {**vars(reference), "args": reference.args}))
        if isinstance(formatter, TextFormatter):
            assert texts[0] == plain + "\n"
            assert re.search(r" INFO \[\w+\] nsj_queue_lib\.observe: Tarefa 7 terminou: "
                             r"sucesso em 0\.500 s\n$", texts[0])
        else:
            data = json.loads(texts[0])
            assert data["message"] == "Tarefa 7 terminou: sucesso em 0.500 s"
            assert data["duration"] == 0.5 and data["task_id"] == 7
