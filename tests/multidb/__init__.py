"""Tests of nsj_queue_lib.multidb."""

from __future__ import annotations
