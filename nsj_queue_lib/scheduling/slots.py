"""When a schedule's slots fall: five-field cron (optional extra `cronsim`) or a fixed
interval in s/m/h.  Pure time arithmetic, no database.

Intervals are aligned to the Unix epoch (UTC): `--every 30s` falls at :00 and :30 of every
minute on every worker.  Cron expressions are read in the schedule's time zone (zoneinfo);
slots are handed back as aware UTC datetimes.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from nsj_queue_lib.exceptions import ConfigError, FeatureUnavailable

_EVERY = re.compile(r"^\s*(\d+)\s*([smh])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600}
EVERY_MAX = 7 * 24 * 3600  # a week (the column is an int of seconds)
UTC = _dt.timezone.utc
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)


def parse_every(text: str) -> int:
    """'30s', '5m', '2h' -> seconds."""
    match = _EVERY.match(text or "")
    if not match:
        raise ConfigError(f"intervalo inválido: {text!r} (use um inteiro seguido de s, m ou h, "
                          "por exemplo 30s, 5m ou 1h)")
    seconds = int(match.group(1)) * _UNIT[match.group(2)]
    if not 1 <= seconds <= EVERY_MAX:
        raise ConfigError(f"intervalo {text!r} fora do limite (de 1s a {EVERY_MAX // 3600}h)")
    return seconds


def format_every(seconds: int) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError:
        raise FeatureUnavailable(
            "expressões cron precisam do pacote opcional cronsim: instale "
            "nsj-queue-lib[cron] (pip install \"nsj-queue-lib[cron]\"), ou use --every "
            "para um intervalo fixo") from None
    return cronsim


def zone(name: str) -> _dt.tzinfo:
    """The zoneinfo time zone `name` (ConfigError when unknown)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"fuso horário desconhecido: {name!r} (use um nome da base IANA, "
                          "como America/Sao_Paulo; em alguns sistemas é preciso instalar o "
                          "pacote tzdata)") from None


@dataclass(frozen=True)
class Rule:
    """A schedule's rule: `cron` (five fields) or `every` (seconds), plus the time zone."""

    cron: Optional[str] = None
    every: Optional[int] = None
    tz: str = "UTC"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise ConfigError("informe exatamente um de cron ou intervalo (--cron ou --every)")
        zone(self.tz)
        if self.cron is not None:
            if len(self.cron.split()) != 5:
                raise ConfigError(f"expressão cron inválida: {self.cron!r} (são cinco campos: "
                                  "minuto hora dia mês dia-da-semana)")
            cronsim = _cronsim()
            try:
                cronsim.CronSim(self.cron, _dt.datetime.now(zone(self.tz)))
            except cronsim.CronSimError as exc:
                raise ConfigError(f"expressão cron inválida: {self.cron!r} ({exc})") from None

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron '{self.cron}'" + ("" if self.tz == "UTC" else f" ({self.tz})")
        return f"a cada {format_every(int(self.every or 0))}"

    def next_after(self, moment: _dt.datetime) -> _dt.datetime:
        """The first slot strictly after `moment` (aware), in UTC."""
        if self.every is not None:
            elapsed = (moment - _EPOCH) // _dt.timedelta(seconds=self.every)
            return _EPOCH + (elapsed + 1) * _dt.timedelta(seconds=self.every)
        it = _cronsim().CronSim(self.cron, moment.astimezone(zone(self.tz)))
        return next(it).astimezone(UTC)

    def latest(self, now: _dt.datetime, count: int) -> List[_dt.datetime]:
        """Up to `count` slots at or before `now`, the most recent last, in UTC."""
        if count <= 0:
            return []
        if self.every is not None:
            step = _dt.timedelta(seconds=self.every)
            last = _EPOCH + ((now - _EPOCH) // step) * step
            return [last - k * step for k in range(count - 1, -1, -1)]
        start = now.astimezone(zone(self.tz)).replace(microsecond=0) + _dt.timedelta(seconds=1)
        it = _cronsim().CronSim(self.cron, start, reverse=True)
        out = []
        for _ in range(count):
            try:
                out.append(next(it).astimezone(UTC))
            except StopIteration:  # pragma: no cover (an expression that never matches)
                break
        return out[::-1]

    def due(self, proximo: _dt.datetime, now: _dt.datetime,
            catch_up: int) -> Tuple[List[_dt.datetime], _dt.datetime]:
        """(slots to run now, next slot): the slots from `proximo` (the first not run) up to
        `now`, of which only the `catch_up` most recent (at least one: the slot that is
        due), and the first slot after `now`."""
        slots = [s for s in self.latest(now, max(1, catch_up)) if s >= proximo]
        return slots, self.next_after(now)
