"""The responder's warm socket path: the 2,085 getgrgid calls of a warm ``id bigroupuser``
when the client does not use the memory cache (``SSS_NSS_USE_MEMCACHE=NO``, or a
container without ``/var/lib/sss/mc``).

No LDAP and no root: a cache holding bigroupuser's groups (the sizes of testing.gendir) is
written into a temporary directory, the responder's NSS server (``NssResponder`` with the
one lookup flow, feeding the memory cache as in production) serves it on a temporary
socket in this process, and a client process sends the getgrgid requests one after the
other on one connection, as libnss_sss does for ``id`` (each request's header, then its
body). It prints the median wall time of the 2,085 requests over ``--reps`` runs and
the responder's CPU per request (this process's user + system time over all the runs:
on a shared machine the wall time moves with the load, the CPU much less);
``--profile`` prints the responder's cProfile for one more run.

    .venv/bin/python -m perf.warmsocket --reps 15 [--profile] [--opt KEY=VALUE ...]
        [--shape flat|nested] [--commits]

``--opt`` adds a domain option (``use_fully_qualified_names=true``: the groups are
answered qualified, as that setting makes every answer). ``--shape nested``: each
group has, besides its 20 users, three member groups of 60 users out of a pool of 120
(about 200 members each after expansion, nesting level 2; the records of all 2,085 fit
in the default 6 MiB memory-cache file), as the issue's directory of nested groups.
``--commits``: before each run the backend's writer commits a timestamp of an unrelated
group, as a running backend's refreshes and other users' lookups commit between two
`id` of one user (every kept lookup of the reader then sees a new snapshot).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import multiprocessing as mp
import os
import pstats
import socket
import statistics
import struct
import tempfile
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection

from cached.cache import open_domain_cache
from cached.cache.writer import open_backend_cache
from cached.cli import _run
from cached.config import Config, parse_config
from cached.counters import Counters
from cached.model import Group
from cached.nss import protocol as p
from cached.nss.mcfeed import MemcacheFeed
from cached.nss.server import NssResponder, serve_nss
from cached.responder.flow import Lookups

BASE = "dc=example,dc=test"
GROUPS = 2085  # bigroupuser's groups besides its primary one (testing.gendir)


def config(workdir: str, opts: Sequence[str] = ()) -> Config:
    extra = "".join(f"{o.split('=', 1)[0]} = {o.split('=', 1)[1]}\n" for o in opts)
    return parse_config(
        f"""[cached]
domains = LDAP
db_dir = {workdir}/db
pipes_dir = {workdir}/pipes
mc_dir = {workdir}/mc
dbus_address = none
[domain/LDAP]
id_provider = ldap
ldap_uri = ldap://127.0.0.1:1
ldap_search_base = {BASE}
ldap_schema = rfc2307bis
{extra}"""
    )


LEAVES = 120  # --shape nested: the pool of member groups
LEAF_MEMBERS = 60
OTHER = "unrelated"  # --commits: the group whose timestamps each commit touches


def fill_cache(cfg: Config, shape: str = "flat") -> list[int]:
    """bigroupuser's groups, each with 20 members (``nested``: and three member groups),
    written as the backend writes them."""
    os.makedirs(cfg.daemon.db_dir, mode=0o700, exist_ok=True)
    os.makedirs(cfg.daemon.mc_dir, mode=0o755, exist_ok=True)
    cache = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    nested = shape == "nested"
    groups = [
        Group(
            f"nest0-{i:04d}",
            20001 + i,
            f"cn=nest0-{i:04d},ou=groups,{BASE}",
            ("bigroupuser", *(f"user{(i * 7 + j * 13) % 5000:05d}" for j in range(20))),
            tuple(f"leaf-{(i + k * 31) % LEAVES:03d}" for k in range(3)) if nested else (),
        )
        for i in range(GROUPS)
    ]
    leaves = [
        Group(
            f"leaf-{i:03d}",
            30001 + i,
            f"cn=leaf-{i:03d},ou=groups,{BASE}",
            tuple(f"user{(i * 41 + j * 7) % 5000:05d}" for j in range(LEAF_MEMBERS)),
        )
        for i in range(LEAVES if nested else 0)
    ]
    with cache.write() as b:
        for g in [*groups, *leaves, Group(OTHER, 40000, f"cn={OTHER},ou=groups,{BASE}")]:
            cache.put_group(b, g)
    cache.close(clean=True)
    return [g.gid for g in groups]


def touch(cfg: Config) -> None:
    """A commit of the backend's writer that changes none of the answers asked."""
    cache = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    with cache.write() as b:
        cache.touch_group(b, OTHER, modstamp=str(time.time()))
    cache.close(clean=True)


def _request(cmd: int, body: bytes) -> bytes:
    return struct.pack("=4I", 16 + len(body), cmd, 0, 0) + body


def client(
    path: str, gids: list[int], reps: int, out: Connection, commits: Config | None = None
) -> None:
    """One connection, one request at a time (libnss_sss, reference §1.1); with
    ``commits``, a commit to that configuration's stores before each run."""
    # Header and body in two sends, as libnss_sss sends them (sss_cli_send_req): the
    # responder may be woken by the header alone.
    reqs = [
        (head[:16], head[16:])
        for head in (_request(p.Command.GETGRGID, struct.pack("=I", g)) for g in gids)
    ]
    times = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        s.sendall(_request(p.Command.GET_VERSION, struct.pack("=I", 1)))
        s.recv(64)
        for _ in range(reps):
            if commits is not None:
                touch(commits)
            start = time.perf_counter()
            for head, body in reqs:
                s.sendall(head)
                s.sendall(body)
                head = s.recv(16, socket.MSG_WAITALL)
                (length, _cmd, status, _r) = struct.unpack("=4I", head)
                if status != 0:
                    raise SystemExit(f"status {status}")
                rest = length - 16
                while rest:
                    rest -= len(s.recv(rest))
            times.append(time.perf_counter() - start)
    out.send(times)


async def serve_and_measure(
    cfg: Config, gids: list[int], reps: int, profile: bool, commits: bool = False
) -> None:
    cache = open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])
    lookups = Lookups(cfg, {cfg.domains[0].name: cache}, {})
    feed = MemcacheFeed(cfg.daemon.mc_dir, cfg.nss)
    responder = NssResponder(cfg, lookups, feed)
    server = await serve_nss(cfg, responder)
    path = os.path.join(cfg.daemon.pipes_dir, "nss")
    loop = asyncio.get_running_loop()
    for what, n in (("warm-up", 1), ("measure", reps), ("profile", 1 if profile else 0)):
        if not n:
            continue
        rx, tx = mp.Pipe(duplex=False)
        proc = mp.get_context("spawn").Process(
            target=client, args=(path, gids, n, tx, cfg if commits else None)
        )
        # CPU time, not wall: on a shared machine a write to the socket wakes the client
        # and the wall clock charges its run to whatever was running here.
        prof = cProfile.Profile(time.process_time) if what == "profile" else None
        proc.start()
        cpu = time.process_time()
        if prof is not None:
            prof.enable()
        times = await loop.run_in_executor(None, rx.recv)
        if prof is not None:
            prof.disable()
        cpu = time.process_time() - cpu
        await loop.run_in_executor(None, proc.join)
        if what == "measure":
            med = statistics.median(times)
            print(
                f"{len(gids)} getgrgid over one connection: median {med * 1000:.1f} ms "
                f"({med / len(gids) * 1e6:.1f} us each), min {min(times) * 1000:.1f} ms, "
                f"max {max(times) * 1000:.1f} ms, {len(times)} runs; responder CPU "
                f"{cpu / (len(gids) * n) * 1e6:.1f} us per request"
            )
        if prof is not None:
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
            print(buf.getvalue())
    server.close()
    feed.close()
    cache.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the event loop: the daemons' (uvloop, default) or asyncio's own, to compare",
    )
    ap.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                    help="a domain option of the configuration")  # fmt: skip
    ap.add_argument("--shape", choices=("flat", "nested"), default="flat",
                    help="flat: 20 users per group; nested: and three member groups")  # fmt: skip
    ap.add_argument("--commits", action="store_true",
                    help="a commit to the stores before each run, as a backend's")  # fmt: skip
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="warmsocket-") as workdir:
        cfg = config(workdir, args.opt)
        gids = fill_cache(cfg, args.shape)
        run = _run if args.loop == "uvloop" else asyncio.run
        run(serve_and_measure(cfg, gids, args.reps, args.profile, args.commits))


if __name__ == "__main__":
    main()
