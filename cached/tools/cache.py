"""``cached cache``: expire entries like ``sss_cache`` (reference §4), then tell a running
daemon to drop its negative and memory caches."""

from __future__ import annotations

import errno
import os
import stat
import struct
from dataclasses import dataclass, field

from cached.config import Config
from cached.ipc import framing
from cached.ipc.ops import Op
from cached.tools import ToolError

NO_MATCH = "No cache object matched the specified search"


@dataclass
class Invalidation:
    everything: bool = False
    users: bool = False
    groups: bool = False
    user_names: list[str] = field(default_factory=list)
    group_names: list[str] = field(default_factory=list)
    # sss_cache -R / -r NAME: sudo rules (the next sudo call of a user with an expired
    # rule refreshes it first; -E expires them too, as sss_cache's).
    sudo_rules: bool = False
    sudo_rule_names: list[str] = field(default_factory=list)
    domain: str = ""
    netgroups: bool = False
    netgroup_names: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (
            self.everything or self.users or self.groups or self.user_names or self.group_names
            or self.netgroups or self.netgroup_names
            or self.sudo_rules or self.sudo_rule_names
        )  # fmt: skip


def _split_fq(name: str, domains: set[str]) -> tuple[str, str]:
    """``user@DOMAIN`` matches only that domain (reference §4); a plain name, all."""
    base, sep, dom = name.rpartition("@")
    if sep and dom in domains:
        return base, dom
    return name, ""


def invalidate(config: Config, what: Invalidation) -> int:
    """Expire the selected entries in every (or the given) domain; return how many."""
    import lmdb

    from cached.cache import DamagedStore, StoreWriteError, open_domain_cache
    from cached.cache.cache import damaged
    from cached.cache.integrity import of_the_file

    names = {d.name for d in config.domains}
    if what.domain and what.domain not in names:
        raise ToolError(
            f"Could not open domain {what.domain}: it is not in [cached] domains of "
            f"{config.path} (configured: {', '.join(sorted(names))})",
            errno.ENOENT,
        )
    matched = 0
    for d in config.domains:
        if what.domain and d.name != what.domain:
            continue
        try:
            cache = open_domain_cache(config.daemon.db_dir, d)
        except FileNotFoundError:
            continue  # never started: nothing cached
        except DamagedStore as e:
            raise ToolError(f"{e}; nothing was invalidated in domain {d.name}") from None
        try:
            if cache.ts is None:
                raise ToolError(
                    f"{cache.ts_path}: the timestamp store cannot be opened; restart "
                    "cached: its backend rebuilds it, which expires every entry",
                )
            kinds = (
                (what.users, "users", cache.invalidate_user, what.user_names),
                (what.groups, "groups", cache.invalidate_group, what.group_names),
                (what.netgroups, "netgroups", cache.invalidate_netgroup, what.netgroup_names),
            )
            # Whole tables in one transaction (-E, -U -G): no backend request begins
            # and ends between two of them (DomainCache._invalidate).
            whole = [table for every, table, _fn, _names in kinds if what.everything or every]
            if whole:
                matched += cache.invalidate_tables(whole)
            for every, _table, one_fn, wanted in kinds:
                if what.everything or every:
                    continue
                for n in wanted:
                    base, dom = _split_fq(n, names)
                    if not dom or dom == d.name:
                        matched += one_fn(base)
            if what.everything or what.sudo_rules:
                matched += cache.invalidate_sudo()
            elif what.sudo_rule_names:
                matched += cache.invalidate_sudo(what.sudo_rule_names)
        except StoreWriteError as e:
            raise ToolError(f"{e}; nothing was invalidated in domain {d.name}") from None
        except lmdb.Error as e:
            # A store with garbled pages but whole meta pages opens, and liblmdb
            # reports the damage at the first read.
            if not of_the_file(e):
                raise ToolError(f"{cache.entry_path}: {e}; invalidation stopped") from None
            why = damaged(cache.entry_path, str(e))
            raise ToolError(f"{why}; invalidation stopped in domain {d.name}") from None
        finally:
            cache.close()
    return matched


def _recycle_memcache(mc_dir: str) -> bool:
    """With no responder alive: mark each file RECYCLED and unlink it, as sss_cache
    does when it can take the file's lock (§4). False if a responder holds a lock."""
    import fcntl

    # Only on this path (no daemon answered): the memory-cache package costs more to
    # import than the whole invalidation.
    from cached.memcache.layout import H_STATUS, Status
    from cached.model import MEMCACHE_KINDS

    recycled = struct.pack("=I", Status.RECYCLED)
    status_offset = H_STATUS * 4  # the header is u32 words (layout.HEADER)
    for kind in MEMCACHE_KINDS:
        path = os.path.join(mc_dir, kind.value)
        try:
            # Never through a symlink, nor into anything but a regular file (a link
            # planted in mc_dir would have a root-only file written).
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            continue
        except OSError as e:
            why = e.strerror
            raise SystemExit(f"cached cache: {path}: not a memory-cache file ({why})") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SystemExit(f"cached cache: {path}: not a regular file; left alone")
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError:
                return False
            os.pwrite(fd, recycled, status_offset)
            os.unlink(path)
        finally:
            os.close(fd)
    return True


def notify_invalidated(config: Config) -> str:
    """Tell a running daemon to drop its negative and memory caches; '' on success,
    else a warning for the administrator."""
    try:
        framing.call_sync(
            framing.control_socket(config.daemon.pipes_dir), Op.INVALIDATED, timeout=10
        )
        return ""
    except framing.RpcError:
        pass
    if _recycle_memcache(config.daemon.mc_dir):
        return ""
    return "The memcache was not invalidated by NSS responder."
