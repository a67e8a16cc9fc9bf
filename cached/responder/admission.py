"""Who may open one more connection to a socket every local user can reach (the NSS
and PAM sockets): ``max_clients`` in all, ``max_clients_per_uid`` per non-root uid, and
the last ``root_reserved_clients`` for root, whose logins must still resolve and
authenticate while other users hold every other connection (docs/threat-model.md)."""

from __future__ import annotations

from cached.config import NssConfig


def reserved_for_root(limits: NssConfig) -> int:
    """The connections only root may use: at most half of ``max_clients``."""
    return min(limits.root_reserved_clients, limits.max_clients // 2)


def refusal(limits: NssConfig, active: int, nonroot: int, uid: int | None, uid_conns: int) -> str:
    """Why a new connection of ``uid`` is refused, or "" when it is admitted. ``active``:
    the socket's connections; ``nonroot``: those of uids other than 0; ``uid_conns``:
    those of ``uid``."""
    if active >= limits.max_clients:
        return f"{active} connections (max_clients)"
    if uid == 0:
        return ""
    reserved = reserved_for_root(limits)
    if nonroot >= limits.max_clients - reserved:
        return (
            f"{nonroot} connections of other users, the last {reserved} "
            "are kept for root (root_reserved_clients)"
        )
    if uid_conns >= limits.max_clients_per_uid:
        return f"uid {uid} holds {uid_conns} connections (max_clients_per_uid)"
    return ""
