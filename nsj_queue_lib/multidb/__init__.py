"""Multi-database mode: per-tenant database connections for the task code.

`TokenProvider` gets the OAuth token of the Nasajon account,
`CredentialsClient` turns a tenant into database credentials, and
`TenantConnections` keeps one reusable connection per tenant.
"""

from __future__ import annotations

import logging

from nsj_queue_lib.multidb.credentials import CredentialsClient, DbCredentials
from nsj_queue_lib.multidb.errors import MultiDatabaseError
from nsj_queue_lib.multidb.pool import TenantConnections
from nsj_queue_lib.multidb.token import TokenProvider

logger = logging.getLogger(__name__)

__all__ = [
    "CredentialsClient",
    "DbCredentials",
    "MultiDatabaseError",
    "TenantConnections",
    "TokenProvider",
]
