"""1.2.2's `nsj_queue_lib.client` paths, kept importable: there is no client code here.

Each module re-exports what replaced it (the socket client of the queue server lives in
nsj_queue_lib.engine.socket) or holds a placeholder of a 1.2.2 internal class
(nsj_queue_lib.compat.removed) that says what replaces it.
"""
