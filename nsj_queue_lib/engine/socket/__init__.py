"""Client/server mode: wake-ups and locks served by the socket server.

`protocol` is the wire format shared with the server; `connection` is one
client link (handshake, requests, heartbeats, reconnection); `notifier`,
`locker` and `guard` implement the coordination protocols over it;
`backend` wires them for a worker.
"""
