"""Who may call what: roles, the access each RPC needs, and the one decision function.

Pure logic (no I/O): the server's authorizer applies it to the key a call presents.

Roles, for one namespace or (``admin`` only) for every namespace:

==========================  ======  ======  ===============  =============
needed access               client  worker  namespace admin  cluster admin
==========================  ======  ======  ===============  =============
``CLIENT`` (WorkflowService)  yes     no      yes              yes
``WORKER`` (WorkerService)    no      yes     yes              yes
``PAYLOADS`` (PayloadService) yes     yes     yes              yes
``NAMESPACE_ADMIN``           no      no      yes              yes
``CLUSTER_ADMIN``             no      no      no               yes
``ANY_KEY`` (reflection)      yes     yes     yes              yes
==========================  ======  ======  ===============  =============

A key for one namespace reaches nothing of another. An RPC missing from the table is
refused to everyone: a new RPC is closed until someone decides who may call it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from durable_rpc.errors import PermissionDeniedError


class Role(enum.StrEnum):
    CLIENT = "client"
    WORKER = "worker"
    ADMIN = "admin"


class Access(enum.Enum):
    CLIENT = "client"
    WORKER = "worker"
    #: The payload store: clients and workers both upload and download payloads.
    PAYLOADS = "client or worker"
    NAMESPACE_ADMIN = "namespace admin"
    CLUSTER_ADMIN = "cluster admin"
    ANY_KEY = "any valid key"


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller a valid key stands for. ``namespace`` None: every namespace."""

    key_id: str
    name: str
    role: Role
    namespace: str | None

    @property
    def is_cluster_admin(self) -> bool:
        return self.role is Role.ADMIN and self.namespace is None

    def describe(self) -> str:
        """For logs and error texts: the key's id and name, never its secret."""
        scope = "every namespace" if self.namespace is None else f"namespace {self.namespace!r}"
        label = f" ({self.name})" if self.name else ""
        return f"key {self.key_id}{label}, {self.role.value} of {scope}"


_ROLES_FOR: dict[Access, frozenset[Role]] = {
    Access.CLIENT: frozenset({Role.CLIENT, Role.ADMIN}),
    Access.WORKER: frozenset({Role.WORKER, Role.ADMIN}),
    Access.PAYLOADS: frozenset({Role.CLIENT, Role.WORKER, Role.ADMIN}),
    Access.NAMESPACE_ADMIN: frozenset({Role.ADMIN}),
    Access.CLUSTER_ADMIN: frozenset({Role.ADMIN}),
    Access.ANY_KEY: frozenset(Role),
}


def authorize(principal: Principal, access: Access | None, namespace: str | None) -> None:
    """Raise PermissionDeniedError unless ``principal`` may make a call that needs
    ``access`` in ``namespace`` (None: a call about no one namespace)."""
    if access is None:
        raise PermissionDeniedError("this call is not open to any key")
    if principal.role not in _ROLES_FOR[access]:
        raise PermissionDeniedError(
            f"a {principal.role.value} key may not make this call (it needs {access.value} access)"
        )
    if access is Access.CLUSTER_ADMIN:
        if not principal.is_cluster_admin:
            raise PermissionDeniedError("this call needs a cluster admin key (every namespace)")
        return
    # A call about no one namespace (an empty batch) needs the role alone.
    if access is Access.ANY_KEY or principal.namespace is None or namespace is None:
        return
    if namespace != principal.namespace:
        raise PermissionDeniedError(
            f"this key is for namespace {principal.namespace!r}, not {namespace!r}"
        )
