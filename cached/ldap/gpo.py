"""GPO-based login rights (``access_provider = ad``, ``ad_gpo_access_control``), as
SSSD 2.8.2's ``src/providers/ad/ad_gpo.c`` decides them. One entry point,
:func:`decide`; the backend's access check calls it after its other checks.

1. The PAM service is mapped to a logon right (``ad_gpo_map_*``, SSSD's default
   lists, ``+service``/``-service``); ``permit`` allows and ``deny`` denies without
   asking the directory.
2. The host's computer object (``sAMAccountName = HOST$``, a workstation or server
   trust account) gives the scopes of management: each ``OU=``/``DC=`` parent of its
   DN up to the domain, then the site (``ad_site``, else the client site the DC's
   netlogon answer names, as SSSD's ``ad_domain_info``).
3. Their ``gPLink`` values give the candidate GPOs in SSSD's order: unenforced links
   from the site down to the host's OU, each SOM's links in their order, then the
   enforced ones from the host's OU up to the site (a later GPO's setting wins);
   a SOM whose ``gPOptions`` blocks inheritance keeps only the enforced links of the
   SOMs above it.
4. Each GPO is read with its DACL (the SD flags control) and kept when its
   gPCFunctionalityVersion is 2, its machine part is enabled (``flags`` != 2), the
   DACL lets the user's SIDs and the host's SID read it and Apply Group Policy
   (security filtering), and its machine extensions include the Security extension.
5. The GptTmpl.inf of each (SYSVOL over SMB, cached/ldap/gpo_fetch.py) gives its
   ``[Privilege Rights]``; later GPOs replace a key's value.
6. Allowed when the allow key is absent (unless ``ad_gpo_implicit_deny``) or lists one
   of the user's SIDs, and the deny key lists none: deny wins.

The resultant rights are kept in the state directory; with the domain offline they
decide, as SSSD's GPO Result object in its cache does. ``permissive`` logs what it
would deny and allows; any error denies under ``enforcing`` and allows (logged)
under ``permissive``, as SSSD's ``ad_gpo_access_done``.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cached.config import DomainConfig
from cached.config.gpomap import GpoMode as Mode
from cached.config.gpomap import GpoRight as Right
from cached.config.gpomap import service_table
from cached.dn import split_rdns
from cached.ldap.client import LdapOffline
from cached.ldap.controls import SECINFO_DACL
from cached.ldap.exchange import Entry, LdapError
from cached.ldap.gpo_parse import (
    RIGHT_KEYS,
    SECURITY_CSE,
    GpLink,
    GpoFormatError,
    PrivilegeRights,
    applies,
    parse_gplink,
    parse_gpoptions,
    parse_machine_ext_names,
    parse_security_descriptor,
    split_sysvol_path,
)
from cached.ldap.schema import escape
from cached.ldap.sid import sid_to_str

log = logging.getLogger(__name__)

# The SIDs SSSD adds to every user's (ad_gpo_get_sids): the user has authenticated.
AUTHENTICATED_USERS = "S-1-5-11"
# userAccountControl: a computer account (SSSD: UAC_WORKSTATION/SERVER_TRUST_ACCOUNT).
_TRUST_ACCOUNT = 0x1000 | 0x2000
# The file, in the state directory, of the last resultant rights (offline decisions).
RESULT_FILE = "result.json"


@dataclass(frozen=True)
class GpoSettings:
    """What :func:`decide` needs of the domain's configuration."""

    mode: Mode = Mode.ENFORCING
    implicit_deny: bool = False
    ignore_unreadable: bool = False
    cache_timeout: int = 5
    table: dict[str, Right] = field(default_factory=lambda: service_table({}))
    default_right: Right = Right.DENY
    site: str = ""  # ad_site: overrides the netlogon answer

    @classmethod
    def of(cls, cfg: DomainConfig, site: str = "") -> GpoSettings:
        """The domain's ad_gpo_* options (the map checked when the file was loaded)."""
        return cls(
            mode=cfg.ad_gpo_access_control,
            implicit_deny=cfg.ad_gpo_implicit_deny,
            ignore_unreadable=cfg.ad_gpo_ignore_unreadable,
            cache_timeout=cfg.ad_gpo_cache_timeout,
            table=service_table({r: getattr(cfg, f"ad_gpo_map_{r.value}") for r in Right}),
            default_right=cfg.ad_gpo_default_right,
            site=site,
        )


@dataclass(frozen=True)
class GpoDecision:
    """The answer: ``allowed``, and why. ``would_deny``: permissive mode let in a
    login enforcing would deny. ``error``: the GPOs could not be evaluated (enforcing
    denies). ``offline``: decided from the last stored rights."""

    allowed: bool
    reason: str
    right: Right | None = None
    would_deny: bool = False
    error: bool = False
    offline: bool = False


class Searcher(Protocol):
    """The backend's LDAP client (cached/ldap/client.py ``LdapClient.search``)."""

    def search(
        self, base: str, filt: str, attrs: list[str], *, scope: str = ..., sd_flags: int = ...
    ) -> list[Entry]: ...


class PolicyFiles(Protocol):
    """A GPO's Security extension file (cached/ldap/gpo_fetch.py ``GpoFiles``)."""

    def rights(self, guid: str, share: str, path: str) -> PrivilegeRights: ...


# -- Pure steps ----------------------------------------------------------------------


def som_dns(computer_dn: str) -> list[str]:
    """The OUs and the domain above ``computer_dn``, most specific first (SSSD's
    ``ad_gpo_populate_som_list``: each parent starting ``OU=`` or ``DC=``, up to the
    first ``DC=``)."""
    rdns = split_rdns(computer_dn)
    out: list[str] = []
    for i in range(1, len(rdns)):
        first = rdns[i][:3].upper()
        if first in ("OU=", "DC="):
            out.append(",".join(rdns[i:]))
        if first == "DC=":
            break
    return out


@dataclass(frozen=True)
class Som:
    """A scope of management: its DN, its enabled links, whether it blocks inheritance."""

    dn: str
    links: list[GpLink]
    blocks: bool = False


def candidates(soms: list[Som]) -> list[str]:
    """The GPO DNs in the order their settings apply (a later one wins), ``soms``
    most specific first (the host's OU … the domain, the site): SSSD's
    ``ad_gpo_populate_candidate_gpos`` with the blocking of
    ``ad_gpo_get_som_attrs_done``."""
    kept: list[list[GpLink]] = []
    enforced_only = False
    for som in soms:
        kept.append([link for link in som.links if link.enforced or not enforced_only])
        if som.blocks:
            enforced_only = True
    unenforced = [lk.gpo_dn for links in reversed(kept) for lk in links if not lk.enforced]
    enforced = [lk.gpo_dn for links in kept for lk in links if lk.enforced]
    return unenforced + enforced


def resultant(policies: Iterable[Mapping[str, tuple[str, ...]]]) -> PrivilegeRights:
    """Each key's value from the last GPO that sets it (ad_gpo_store_policy_settings
    replaces the GPO Result's value of every key a file has)."""
    out: PrivilegeRights = {}
    for p in policies:
        out.update(p)
    return out


def check(
    rights: Mapping[str, tuple[str, ...]], right: Right, sids: frozenset[str], implicit_deny: bool
) -> tuple[bool, str]:
    """SSSD's ``ad_gpo_access_check``: allowed when the allow key is absent (and not
    ``implicit_deny``) or lists one of ``sids``, and the deny key lists none of them."""
    allow_key, deny_key = RIGHT_KEYS[right]
    allow = rights.get(allow_key)
    granted = (allow is None and not implicit_deny) or any(s in sids for s in allow or ())
    denied = any(s in sids for s in rights.get(deny_key, ()))
    if denied:
        return False, f"{deny_key} lists the user or one of its groups"
    if not granted:
        if allow is None:
            return False, f"no GPO sets {allow_key} and ad_gpo_implicit_deny is true"
        return False, f"{allow_key} lists neither the user nor any of its groups"
    return True, f"{allow_key}/{deny_key} allow the user"


def netlogon_client_site(raw: bytes) -> str:
    """The client site of a NETLOGON_SAM_LOGON_RESPONSE_EX ([MS-ADTS] 6.3.1.9): the
    8th compressed name after the 24-byte header (opcode, flags, domain GUID); empty
    when the DC names none. GpoFormatError for anything else."""
    if len(raw) < 24:
        raise GpoFormatError("netlogon: shorter than its header")
    (opcode,) = struct.unpack_from("<H", raw)
    if opcode not in (23, 25):  # LOGON_SAM_LOGON_RESPONSE_EX, ..._USER_UNKNOWN_EX
        raise GpoFormatError(f"netlogon: opcode {opcode} is not a logon response (EX)")
    pos = 24
    name = ""
    for _ in range(8):  # forest, domain, host, NetBIOS domain, NetBIOS host, user,
        name, pos = _dns_name(raw, pos)  # DC site, client site
    return name


def _dns_name(buf: bytes, pos: int) -> tuple[str, int]:
    """An RFC 1035 4.1.4 compressed name at ``pos``, and the position after it."""
    labels: list[str] = []
    end = -1
    jumps = 0
    while True:
        if pos >= len(buf):
            raise GpoFormatError("netlogon: name past the end")
        n = buf[pos]
        if n == 0:
            pos += 1
            break
        if n & 0xC0 == 0xC0:
            if pos + 1 >= len(buf) or jumps > 32:
                raise GpoFormatError("netlogon: bad name pointer")
            if end < 0:
                end = pos + 2
            pos = ((n & 0x3F) << 8) | buf[pos + 1]
            jumps += 1
            continue
        if pos + 1 + n > len(buf):
            raise GpoFormatError("netlogon: label past the end")
        labels.append(buf[pos + 1 : pos + 1 + n].decode("utf-8", errors="replace"))
        pos += 1 + n
    return ".".join(labels), end if end >= 0 else pos


# -- The directory -------------------------------------------------------------------


@dataclass
class Gpo:
    dn: str
    guid: str
    share: str
    path: str
    version: int


def _one_text(e: Entry, attr: str) -> str | None:
    vals = e.get(attr)
    return vals[0].decode("utf-8", errors="replace") if vals else None


def _int(e: Entry, attr: str) -> int | None:
    text = _one_text(e, attr)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise GpoFormatError(f"{attr} of {e.dn}: {text[:20]!r} is not a number") from None


def _computer(ldap: Searcher, domain_dn: str, host: str) -> tuple[str, str]:
    """The host's computer object: its DN and SID."""
    account = host.split(".", 1)[0].upper() + "$"
    filt = f"(&(objectClass=user)(sAMAccountName={escape(account)}))"
    found = ldap.search(domain_dn, filt, ["distinguishedName", "userAccountControl", "objectSid"])
    if len(found) != 1:
        raise LdapError(f"{len(found)} computer objects named {account} under {domain_dn}")
    e = found[0]
    uac = _int(e, "userAccountControl") or 0
    if not uac & _TRUST_ACCOUNT:
        raise LdapError(f"{e.dn} is not a computer account (userAccountControl {uac:#x})")
    sids = e.get("objectSid")
    if not sids:
        raise LdapError(f"{e.dn} has no objectSid")
    try:
        return e.dn, sid_to_str(sids[0])
    except ValueError as err:
        raise GpoFormatError(f"objectSid of {e.dn}: {err}") from None


def _site_dn(ldap: Searcher, domain: str, override: str) -> str:
    """The host's site's DN under the configuration naming context."""
    root = ldap.search("", "(objectClass=*)", ["configurationNamingContext"], scope="base")
    config_nc = _one_text(root[0], "configurationNamingContext") if root else None
    if not config_nc:
        raise LdapError("the root DSE names no configurationNamingContext")
    site = override
    if not site:
        ntver = "".join(f"\\{b:02x}" for b in struct.pack("<I", 0x4 | 0x10))
        filt = f"(&(DnsDomain={escape(domain)})(NtVer={ntver}))"
        answer = ldap.search("", filt, ["netlogon"], scope="base")
        raw = answer[0].get("netlogon") if answer else []
        site = netlogon_client_site(raw[0]) if raw else ""
    if not site:
        raise LdapError("the DC names no site for this host and ad_site is not set")
    return f"CN={site},CN=Sites,{config_nc}"


def _som(ldap: Searcher, dn: str) -> Som:
    found = ldap.search(dn, "(objectClass=*)", ["gPLink", "gPOptions"], scope="base")
    if not found:
        return Som(dn, [])
    e = found[0]
    link = _one_text(e, "gPLink")
    return Som(dn, parse_gplink(link) if link else [], parse_gpoptions(e.get("gPOptions")))


def _gpo(ldap: Searcher, dn: str, sids: frozenset[str], settings: GpoSettings) -> Gpo | None:
    """The GPO at ``dn`` when it applies to ``sids`` and has Security settings."""
    attrs = ["cn", "gPCFileSysPath", "gPCFunctionalityVersion", "flags", "versionNumber",
             "nTSecurityDescriptor", "gPCMachineExtensionNames"]  # fmt: skip
    found = ldap.search(dn, "(objectClass=*)", attrs, scope="base", sd_flags=SECINFO_DACL)
    if not found:
        raise LdapError(f"GPO {dn} is linked but cannot be read")
    e = found[0]
    # SSSD's order (ad_gpo_sd_process_attrs): cn and gPCFileSysPath must be readable,
    # then a GPO without gPCFunctionalityVersion is skipped, then flags and the
    # security descriptor must be readable.
    guid, path, flags = _one_text(e, "cn"), _one_text(e, "gPCFileSysPath"), _int(e, "flags")
    sd = e.get("nTSecurityDescriptor")
    if guid is None or path is None:
        _unreadable(dn, "cn or gPCFileSysPath", settings)
        return None
    if _int(e, "gPCFunctionalityVersion") != 2:
        log.debug("GPO %s skipped: gPCFunctionalityVersion is not 2", dn)
        return None
    if flags is None or not sd:
        _unreadable(dn, "flags or nTSecurityDescriptor", settings)
        return None
    if flags == 2:
        log.debug("GPO %s skipped: its computer part is disabled", dn)
        return None
    if not applies(parse_security_descriptor(sd[0]), sids):
        log.debug("GPO %s skipped: security filtering", dn)
        return None
    if SECURITY_CSE not in parse_machine_ext_names(_one_text(e, "gPCMachineExtensionNames") or ""):
        log.debug("GPO %s skipped: no Security settings", dn)
        return None
    share, spath = split_sysvol_path(path)
    return Gpo(dn, guid, share, spath, _int(e, "versionNumber") or 0)


def _unreadable(dn: str, what: str, settings: GpoSettings) -> None:
    """A GPO whose ``what`` is missing or unreadable: skipped (logged) with
    ad_gpo_ignore_unreadable, else the evaluation fails (ad_gpo_missing_or_unreadable_attr)."""
    if settings.ignore_unreadable:
        log.info("GPO %s skipped: %s missing or unreadable (ad_gpo_ignore_unreadable)", dn, what)
        return
    raise LdapError(
        f"GPO {dn}: {what} missing or unreadable; grant the host read access to it or "
        "set ad_gpo_ignore_unreadable = true"
    )


def evaluate(
    ldap: Searcher,
    files: PolicyFiles,
    *,
    domain: str,
    domain_dn: str,
    host: str,
    user_sids: frozenset[str],
    settings: GpoSettings,
) -> PrivilegeRights:
    """The resultant privilege rights of the GPOs that apply to this host and user."""
    computer_dn, host_sid = _computer(ldap, domain_dn, host)
    sids = user_sids | {host_sid, AUTHENTICATED_USERS}
    soms = [_som(ldap, dn) for dn in som_dns(computer_dn)]
    soms.append(_som(ldap, _site_dn(ldap, domain, settings.site)))
    gpos = [g for dn in candidates(soms) if (g := _gpo(ldap, dn, sids, settings)) is not None]
    return resultant(files.rights(g.guid, g.share, g.path) for g in gpos)


def decide(
    ldap: Searcher,
    files: PolicyFiles,
    *,
    domain: str,
    domain_dn: str,
    host: str,
    user_sid: str,
    group_sids: Iterable[str],
    service: str,
    settings: GpoSettings,
    state_dir: Path,
) -> GpoDecision:
    """Whether the user with ``user_sid`` may log in to this host through PAM
    ``service``. ``group_sids``: the SIDs of the groups the cache holds for the user
    (its initgroups: nested groups and the primary group), as SSSD passes those of its
    sysdb; BUILTIN groups (S-1-5-32-*), which neither stores, left out. ``host``: the
    host's short or DNS name (its computer account is ``SHORTNAME$``, SSSD's
    ``ldap_sasl_authid``). ``ldap``: the domain's client, bound as the host; when it
    raises LdapOffline (no server reachable), the last stored rights decide."""
    if settings.mode == Mode.DISABLED:
        return GpoDecision(True, "ad_gpo_access_control = disabled")
    right = settings.table.get(service.lower(), settings.default_right)
    if right == Right.PERMIT:
        return GpoDecision(True, f"PAM service {service} is mapped to permit", right)
    if right == Right.DENY:
        return _outcome(settings, right, False, f"PAM service {service} is mapped to deny")
    sids = frozenset([user_sid, *group_sids, AUTHENTICATED_USERS])
    offline = False
    try:
        try:
            rights = evaluate(ldap, files, domain=domain, domain_dn=domain_dn, host=host,
                              user_sids=sids, settings=settings)  # fmt: skip
            _store(state_dir, rights)
        except LdapOffline:
            offline = True
            rights = _load(state_dir)
    except (LdapError, GpoFormatError, OSError) as e:
        log.error("GPO evaluation for %s failed: %s", service, e)
        if settings.mode == Mode.PERMISSIVE:
            log.warning("GPO evaluation failed; permissive mode lets the user in")
            return GpoDecision(True, f"GPO evaluation failed: {e}", right, True, True)
        return GpoDecision(False, f"GPO evaluation failed: {e}", right, error=True)
    allowed, why = check(rights, right, sids, settings.implicit_deny)
    decision = _outcome(settings, right, allowed, why)
    if offline:
        return GpoDecision(decision.allowed, decision.reason + " (offline: last stored GPO rights)",
                           right, decision.would_deny, offline=True)  # fmt: skip
    return decision


def _outcome(settings: GpoSettings, right: Right, allowed: bool, why: str) -> GpoDecision:
    if allowed:
        return GpoDecision(True, why, right)
    if settings.mode == Mode.PERMISSIVE:
        # SSSD's wording (ad_gpo_access_check), to the same syslog facility's reader.
        log.warning(
            "Warning: user would have been denied GPO-based logon access if the "
            "ad_gpo_access_control option were set to enforcing mode (%s)",
            why,
        )
        return GpoDecision(True, why, right, would_deny=True)
    return GpoDecision(False, why, right)


def _store(state_dir: Path, rights: PrivilegeRights) -> None:
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = state_dir / (RESULT_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({k: list(v) for k, v in rights.items()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, state_dir / RESULT_FILE)


def _load(state_dir: Path) -> PrivilegeRights:
    """The last stored rights; none (no GPO evaluated yet) is no rights, as SSSD's
    missing GPO Result."""
    try:
        raw = json.loads((state_dir / RESULT_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise GpoFormatError(f"{state_dir / RESULT_FILE}: {e}") from None
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and all(isinstance(s, str) for s in v) for v in raw.values()
    ):
        raise GpoFormatError(f"{state_dir / RESULT_FILE}: not a rights record")
    return {str(k): tuple(v) for k, v in raw.items()}
