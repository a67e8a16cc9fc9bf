"""The responder process (``cached _responder``): its composition root.

It opens the caches read-only, connects to each domain's backend, builds the one
lookup flow (``flow.Lookups``) and the admin facade (``admin.Admin``), and hands them to
the interfaces: the NSS socket (``cached.nss``), with ``services = nss, pam`` the PAM
sockets (``cached.pam``), with ``ssh`` the SSH socket (``cached.ssh``), with ``sudo``
the sudo socket (``cached.sudo``), and, when ``dbus_address`` is not ``none``, the
InfoPipe (``cached.ifp``). Only this module knows the interfaces; they know the
responder core, never each other. The private socket
(``<pipes_dir>/private/responder``) answers the monitor and the backends
(``ipc/ops.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from cached.cache import DomainCache, open_domain_cache
from cached.config import Config
from cached.ipc import aio, framing
from cached.ipc.ops import DomainStateNote, GroupsStoredNote, Op
from cached.nss.mcfeed import MemcacheFeed
from cached.nss.server import NssResponder, nss_socket, serve_nss
from cached.responder.admin import Admin
from cached.responder.flow import Backend, Lookups

log = logging.getLogger(__name__)


async def _open_caches(config: Config) -> dict[str, DomainCache]:
    """Open every domain's cache read-only; the backends create the files first."""
    caches = {}
    for d in config.domains:
        for _ in range(100):
            try:
                caches[d.name] = open_domain_cache(
                    config.daemon.db_dir, d,
                    nowait_percentage=config.nss.entry_cache_nowait_percentage,
                )  # fmt: skip
                break
            except FileNotFoundError:
                await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"domain {d.name}: no cache in {config.daemon.db_dir}")
    return caches


async def run_responder(config: Config, ready: Callable[[], None]) -> None:
    caches = await _open_caches(config)
    clients = {
        d.name: aio.RpcClient(framing.backend_socket(config.daemon.pipes_dir, d.name))
        for d in config.domains
    }
    backends: dict[str, Backend] = dict(clients)
    lookups = Lookups(config, caches, backends)
    feed = MemcacheFeed(config.daemon.mc_dir, config.nss)
    responder = NssResponder(config, lookups, feed)
    server = await serve_nss(config, responder)

    pam_servers: list[asyncio.Server] = []
    pam = None
    if "pam" in config.daemon.services:
        # Imported only when used, as the InfoPipe.
        from cached.pam.server import PamResponder, serve_pam

        pam = PamResponder(config, lookups, backends)
        pam_servers = await serve_pam(config, pam)

    ssh_server = ssh = None
    if "ssh" in config.daemon.services:
        from cached.ssh.server import SshResponder, serve_ssh

        ssh = SshResponder(config, lookups)
        ssh_server = await serve_ssh(config, ssh)
    sudo_server: asyncio.Server | None = None
    sudo = None
    if "sudo" in config.daemon.services:
        from cached.sudo.server import SudoResponder, serve_sudo

        sudo = SudoResponder(config, lookups, backends)
        sudo_server = await serve_sudo(config, sudo)

    def status() -> dict[str, Any]:
        out = responder.status()
        if pam is not None:
            out["pam"] = pam.status()
        if ssh is not None:
            out["ssh"] = ssh.status()
        if sudo is not None:
            out["sudo"] = sudo.status()
        return out

    admin = Admin(lookups, status, on_invalidate=responder.reset_memcache)
    ifp = None
    if config.daemon.dbus_address != "none":
        # Imported only when used: dbus-next is not needed to serve NSS.
        from cached.ifp import start_ifp

        ifp = await start_ifp(config, admin)

    async def handle(op: Op, args: dict[str, Any]) -> dict[str, Any]:
        if op is Op.COUNTERS:
            return admin.counters().fields()
        if op is Op.STATUS:
            return {"status": admin.status()}
        if op is Op.DOMAIN_STATE:  # a backend's announcement
            lookups.domain_state(DomainStateNote.parse(args))
            return {}
        if op is Op.GROUPS_STORED:  # a backend's early commit (nss/server.py)
            responder.prefill_stored(GroupsStoredNote.parse(args))
            return {}
        if op is Op.INVALIDATED:
            admin.invalidated()
            return {}
        raise ValueError(f"the responder does not answer {op}")

    control = await aio.serve(framing.responder_socket(config.daemon.pipes_dir), handle)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGHUP (from the monitor): drop the negative cache, as SSSD's NSS responder does.
    loop.add_signal_handler(signal.SIGHUP, lookups.clear_negative)
    path = nss_socket(config)
    log.info("NSS responder ready on %s", path)
    ready()
    await stop.wait()
    if ifp is not None:
        await ifp.close()
    server.close()
    for pam_server in pam_servers:
        pam_server.close()
    if ssh_server is not None:
        ssh_server.close()
    if sudo_server is not None:
        sudo_server.close()
    control.close()
    for client in clients.values():
        await client.close()
    for cache in caches.values():
        cache.close()
    feed.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
