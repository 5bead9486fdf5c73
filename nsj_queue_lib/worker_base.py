"""WorkerBase: extend it, implement `execute`, and call `run()`."""

from __future__ import annotations

import abc
import functools
import inspect
import logging
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence, Tuple

from nsj_queue_lib.config import Settings
from nsj_queue_lib.exceptions import ConfigError

if TYPE_CHECKING:
    from nsj_queue_lib.runtime.router import TaskContext

logger = logging.getLogger(__name__)


def accepts_extra_arg(func: Callable[..., Any], base_count: int) -> bool:
    """True when `func` takes more than `base_count` positional arguments (besides
    `self` for a method); answered once per function."""
    target = getattr(func, "__func__", None)
    if target is not None:  # a bound method: its function also takes `self`
        return _takes_more_than(target, base_count + 1)
    return _takes_more_than(func, base_count)


@functools.lru_cache(maxsize=1024)
def _takes_more_than(func: Callable[..., Any], count: int) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = 0
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            return True
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional > count


class WorkerBase(abc.ABC):
    """Base of a queue worker.

    Implement `execute(payload, tarefa, bd_conn)` (and optionally
    `execute_dead`). What it returns is stored in `mensagem`; raising marks the
    attempt as `falha` and schedules the next one. `bd_conn` is the queue's own
    connection inside the task's transaction: what the task writes through it
    commits together with the task's success, or rolls back with its failure.
    In multi-database mode, methods that accept a fourth parameter receive
    `multi_db_conn`, a connection to the task tenant's database.
    """

    # Class-level default, so subclasses whose __init__ does not call super() work.
    settings: Optional[Settings] = None

    def __init__(self, settings: Optional[Settings] = None) -> None:
        self.settings = settings

    @abc.abstractmethod
    def execute(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any,
                multi_db_conn: Any = None) -> Optional[str]:
        """Process one task; return the message to store (None: "Concluído com sucesso")."""

    def execute_dead(self, payload: str, tarefa: Dict[str, Any], bd_conn: Any,
                     multi_db_conn: Any = None) -> Optional[str]:
        """Process a dead-letter task (one that exhausted its attempts).

        The default logs a warning and asks for manual intervention.
        """
        original = tarefa.get("live_id") or tarefa.get("id")
        message = (f"Tarefa com ID {original} excedeu o número de tentativas, sem sucesso. "
                   "Será necessária intervenção manual.")
        logger.warning(message)
        return message

    def _call(self, name: str, base_args: Tuple[Any, ...], multi_db_conn: Any) -> Any:
        method = getattr(self, name)
        if multi_db_conn is not None and accepts_extra_arg(method, len(base_args)):
            return method(*base_args, multi_db_conn)
        return method(*base_args)

    def internal_execute(self, tarefa: Dict[str, Any], bd_conn: Any,
                         multi_db_conn: Any = None) -> Any:
        return self._call("execute", (tarefa["payload"], tarefa, bd_conn), multi_db_conn)

    def internal_execute_dead(self, tarefa: Dict[str, Any], bd_conn: Any,
                              multi_db_conn: Any = None) -> Any:
        return self._call("execute_dead", (tarefa["payload"], tarefa, bd_conn), multi_db_conn)

    def wants_multi_db_conn(self, tarefa: Dict[str, Any]) -> bool:
        """True when the method that will run `tarefa` accepts `multi_db_conn`
        (multi-database mode opens the tenant connection only then)."""
        name = "execute_dead" if tarefa.get("dead") else "execute"
        return accepts_extra_arg(getattr(self, name), 3)

    # -- handlers the router calls (see nsj_queue_lib.runtime.router) ----------
    def run_task(self, ctx: TaskContext) -> Any:
        """A plain task: `execute`."""
        return self.internal_execute(ctx.tarefa, ctx.bd_conn, ctx.multi_db_conn)

    def run_dead(self, ctx: TaskContext) -> Any:
        """A dead-letter task: `execute_dead`."""
        return self.internal_execute_dead(ctx.tarefa, ctx.bd_conn, ctx.multi_db_conn)

    def run_subscriber(self, ctx: TaskContext) -> Any:
        """A subscriber task: a plain worker runs it with `execute` like any task."""
        return self.run_task(ctx)

    def dispatch(self, tarefa: Dict[str, Any], bd_conn: Any, multi_db_conn: Any = None) -> Any:
        """Run `tarefa` as the runtime would, with the given connection(s), without claiming
        or committing anything (the caller owns the transaction)."""
        from nsj_queue_lib.runtime.router import TaskContext, route

        return route(self, TaskContext.for_connection(tarefa, self.settings, bd_conn,
                                                      multi_db_conn))

    # -- runtime wiring ---------------------------------------------------
    def build_runtime(self, settings: Settings) -> Any:
        """Create the runtime that serves this worker (overridable for extra services)."""
        from nsj_queue_lib.runtime.router import TaskRouter
        from nsj_queue_lib.runtime.supervisor import WorkerRuntime

        self.settings = settings
        return WorkerRuntime(settings, TaskRouter(self, settings))

    def run(self, argv: Optional[Sequence[str]] = None) -> None:
        """Run the worker until SIGTERM/SIGINT or HALT; exit non-zero on a startup error.

        `--help`/`--version` in `argv` (default: the command line) print and exit 0
        instead of starting the worker.
        """
        from nsj_queue_lib.cli.worker_args import handle_worker_argv
        from nsj_queue_lib.runtime.supervisor import run_worker

        handle_worker_argv(type(self), sys.argv[1:] if argv is None else argv)
        code = run_worker(self.build_runtime, self.settings)
        if code:
            sys.exit(code)


__all__ = ["ConfigError", "WorkerBase"]
