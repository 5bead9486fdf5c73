"""Compatibility with nsj-queue-lib 1.2.2, kept in one place.

* coexistence: living beside 1.2.2 workers on one queue (the signs that they are
  there, and the worker's watch for them); the mode itself is engine/fleet_mode.py;
* removed: the placeholder for 1.2.2 internal classes that still import but say what
  replaces them.

1.2.2's import paths stay where 1.2.2 had them, as thin facades: `nsj_queue_lib.settings`,
`nsj_queue_lib.client.*`, and the 1.2.2 modules of `nsj_queue_lib.server`
(lock_service, lock_service_thread, socket_io, server_settings, ...).
"""
