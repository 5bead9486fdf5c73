"""Subcommands of nsj-queue: one module each, found at start-up (see nsj_queue_lib.cli)."""
