"""The engine seam: one package per backend behind one small protocol.

`base` holds the protocol (`TaskGuard`, `Notifier`, `Locker`, `Backend`) and the
`Capabilities` the runtime reads; `select` picks the backend for the settings.
`postgres`, `mysql` and `socket` each own what differs for their backend (claim,
finish, release, wake-ups, locks, 1.2.2 compatibility); `keys` and `fleet_mode` are
shared by them.  The runtime, batch mode, maintenance and admin code depend on the
protocol only.
"""
