"""Keys of this installation (page tokens, dashboard sessions): made on first use and kept
in the database, so that every process of a deployment signs and checks with the same one.
"""

from __future__ import annotations

import secrets

from keepgreen.app.ports import UnitOfWorkFactory


def instance_key(unit_of_work: UnitOfWorkFactory, name: str) -> str:
    """The key `name` (64 hex digits), made and committed in a write of its own the first time
    any process asks, so that the callers' own reads stay reads.
    """
    with unit_of_work() as uow:
        key = uow.flaky.secret(name, secrets.token_hex(32))
        uow.commit()
    return key
