"""Pub/sub: fan-out of publications, handler payloads and webhook delivery."""

from __future__ import annotations
