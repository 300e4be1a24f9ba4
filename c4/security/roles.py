"""Roles and the permission each RPC needs.

A sidecar (``ingest``) may only send telemetry; the CLI (``read``) may read faults, jobs and the
live fault stream; the recovery controller (``act``) may read and act; only ``admin`` may
administer (``c4 jobs rm``). No action RPC exists yet: any method of an unknown c4 service needs
``act``, so an action service added later is protected without touching this table."""

from __future__ import annotations

from enum import Enum

from c4.security.errors import SecurityError


class Permission(str, Enum):
    INGEST = "ingest"
    READ = "read"
    ACT = "act"
    ADMIN = "admin"


# role name -> what it may do
ROLES: dict[str, frozenset[Permission]] = {
    "ingest": frozenset({Permission.INGEST}),
    "read": frozenset({Permission.READ}),
    "act": frozenset({Permission.READ, Permission.ACT}),
    "admin": frozenset(Permission),
}

# gRPC service -> the permission its methods need; None: open to anyone (health checks)
SERVICE_PERMISSION: dict[str, Permission | None] = {
    "c4.v1.Ingest": Permission.INGEST,
    "c4.v1.Faults": Permission.READ,
    "c4.v1.Query": Permission.READ,
    "c4.v1.Admin": Permission.ADMIN,
    "c4.v1.Topology": Permission.READ,
    "grpc.health.v1.Health": None,
}


def required_permission(method: str) -> Permission | None:
    """The permission ``/package.Service/Method`` needs (``act`` for services not listed)."""
    service = method.lstrip("/").split("/", 1)[0]
    if service in SERVICE_PERMISSION:
        return SERVICE_PERMISSION[service]
    return Permission.ACT


def check_role(role: str) -> str:
    if role not in ROLES:
        raise SecurityError(f"unknown role {role!r}: use one of {', '.join(sorted(ROLES))}")
    return role
