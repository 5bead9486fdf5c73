"""Tests of the client/server mode (socket server and its clients)."""

from __future__ import annotations
