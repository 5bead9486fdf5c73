"""1.2.2's exception module path (the classes live in nsj_queue_lib.exceptions)."""

from __future__ import annotations

from nsj_queue_lib.exceptions import NotFoundException, SubscriberNotRegistered

__all__ = ["NotFoundException", "SubscriberNotRegistered"]
