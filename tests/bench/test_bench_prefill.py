"""The responder's INITGR answer of a cold `id bigroupuser`: the user's 2,085 groups read
from the cache and stored in a new memory-cache file before the reply leaves
(nss/server.py ``_prefill_groups``), all of it between the backend's answer and `id`'s.

Sizes are bigroupuser's (testing.gendir): 2,085 groups of about 20 members, 85 of them
with member groups. Each round gets a new responder and new memory-cache files, as the
first `id` after a start or after `cached cache -E` does. Under `make test` it runs once
and its assertions make it a test: every group is in the memory cache as getgrgid answers
it over the socket.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

from cached.cache import open_domain_cache
from cached.cache.writer import open_backend_cache
from cached.config import Config, parse_config
from cached.counters import Counters
from cached.memcache import McReader
from cached.model import Group, User
from cached.nss import protocol as p
from cached.nss.mcfeed import MemcacheFeed
from cached.nss.server import COMMANDS, NssResponder, _Enum
from cached.responder.flow import Lookups
from testing.daemon import config_text

BASE = "dc=example,dc=test"
GROUPS = 2085  # bigroupuser's groups besides its primary one (testing.gendir)
PARENTS = 85  # of them holding member groups


def _config(workdir: str) -> Config:
    return parse_config(config_text(["ldap://127.0.0.1:1"], BASE, Path(workdir)))


def _groups() -> list[Group]:
    leaves = [
        Group(
            f"nest0-{i:04d}",
            20001 + i,
            f"cn=nest0-{i:04d},ou=groups,{BASE}",
            ("bigroupuser", *(f"user{(i * 7 + j * 13) % 5000:05d}" for j in range(20))),
        )
        for i in range(GROUPS - PARENTS)
    ]
    parents = [
        Group(
            f"nest1-{i:04d}",
            30001 + i,
            f"cn=nest1-{i:04d},ou=groups,{BASE}",
            tuple(f"user{(i * 11 + j) % 5000:05d}" for j in range(10)),
            tuple(leaves[(i * 5 + k) % len(leaves)].name for k in range(5)),
        )
        for i in range(PARENTS)
    ]
    return leaves + parents


def test_initgr_answer_prefills_2085_groups_into_a_new_memory_cache(benchmark):
    work = tempfile.mkdtemp(prefix="bench-prefill-")
    cfg = _config(work)
    Path(cfg.daemon.db_dir).mkdir(mode=0o700)
    groups = _groups()
    writer = open_backend_cache(cfg.daemon.db_dir, cfg.domains[0], counters=Counters())
    user = User("bigroupuser", 15001, 10000, "", "/home/bigroupuser", "/bin/bash",
                f"uid=bigroupuser,ou=people,{BASE}")  # fmt: skip
    with writer.write() as b:
        writer.put_user(b, user)
        for g in groups:
            writer.put_group(b, g)
        writer.put_initgroups(b, user.name, [g.gid for g in groups], [g.name for g in groups])
    writer.close(clean=True)
    cache = open_domain_cache(cfg.daemon.db_dir, cfg.domains[0])
    lookups = Lookups(cfg, {"LDAP": cache}, {})
    rounds = itertools.count()
    made: list[NssResponder] = []
    dirs: list[Path] = []

    def setup() -> tuple[tuple[NssResponder], dict[str, object]]:
        dirs.append(Path(work) / f"mc{next(rounds)}")
        dirs[-1].mkdir()
        made.append(NssResponder(cfg, lookups, MemcacheFeed(str(dirs[-1]), cfg.nss)))
        return (made[-1],), {}

    def answer(responder: NssResponder) -> bytes | None:
        return COMMANDS[p.Command.INITGR].now(responder, p.Command.INITGR, user.name)

    try:
        benchmark.pedantic(answer, setup=setup, rounds=5)
        last = made[-1]
        with McReader(dirs[-1] / "group") as r:
            assert r.verify() == [] and r.stats().records == GROUPS
            for g in groups[:: GROUPS // 40] + groups[-PARENTS:]:
                reply = last.answer_now(p.ById(p.Command.GETGRGID, g.gid), _Enum())
                assert reply is not None
                (entry,) = p.decode_group(reply[16:])
                e = r.group(g.gid)
                assert e is not None
                assert (e.name, e.members) == (entry.name, tuple(entry.members))
            nested = r.group(groups[-1].gid)  # its own 10 members and its 5 groups'
            assert nested is not None and len(nested.members) > 50
    finally:
        for responder in made:
            responder.feed.close()
        cache.close()
        shutil.rmtree(work)
