"""The bytes of Group Policy, parsed without I/O: what the directory and SYSVOL hold
about the GPOs that apply to this host, as SSSD 2.8.2 reads them
(``src/providers/ad/ad_gpo.c``, ``ad_gpo_ndr.c``, ``ad_gpo_child_utils.c``).

* ``gPLink`` of a site, the domain or an OU: ``[LDAP://<GPO DN>;<options>]…`` with
  options 0 (linked), 1 or 3 (the link disabled) and 2 (enforced) ([MS-GPOL] 2.2.2);
  anything else is an error, as SSSD's ``ad_gpo_populate_gplink_list``.
* ``gPCMachineExtensionNames``: ``[{CSE GUID}{tool GUID}…]…``, the client-side
  extensions a GPO's machine part has settings for.
* ``gPCFileSysPath``: ``\\\\<domain>\\SysVol\\<domain>\\Policies\\{GUID}``, read as
  share and path; the server is the DC cached talks to, as SSSD.
* ``nTSecurityDescriptor``: the self-relative security descriptor ([MS-DTYP] 2.4.6)
  whose DACL decides whether the GPO applies ("security filtering", [MS-GPOL]
  3.2.5.1.6): read access to its properties and the Apply-Group-Policy control access
  right, evaluated as [MS-ADTS] 5.1.3.3.2 and 5.1.3.3.4 say and SSSD evaluates them.
* ``GPT.INI`` (its ``[General] Version``) and the Security extension's
  ``Machine/Microsoft/Windows NT/SecEdit/GptTmpl.inf`` (its ``[Privilege Rights]``),
  INI files that Windows and samba-tool write in UTF-16LE with a byte-order mark.

Everything here is input from the network (the directory and the DC's SYSVOL share):
every length is checked against what is there, and a value that is not what the
format says raises :class:`GpoFormatError`, never another exception.
"""

from __future__ import annotations

import codecs
import struct
from dataclasses import dataclass

from cached.config.gpomap import GpoRight as Right
from cached.ldap.sid import sid_to_str

# A GptTmpl.inf or GPT.INI larger than this is refused. SSSD's gpo_child reads at most
# 64 KiB of a file (SMB_BUFFER_SIZE, one read) and parses what it got; a policy cut in
# the middle is a wrong policy, so cached reads the whole file and refuses a larger
# one (a GptTmpl.inf with every security setting of a domain controller is ~10 KiB).
MAX_FILE_BYTES = 1 << 20

# [MS-DTYP] 2.4.4.1 ACE_HEADER AceType values SSSD evaluates.
ACCESS_ALLOWED = 0x00
ACCESS_DENIED = 0x01
ACCESS_ALLOWED_OBJECT = 0x05
ACCESS_DENIED_OBJECT = 0x06
# AceFlags: INHERIT_ONLY_ACE, the ACE does not apply to the object itself.
INHERIT_ONLY = 0x08
# ACCESS_*_OBJECT_ACE Flags: which GUIDs follow.
OBJECT_TYPE_PRESENT = 0x1
INHERITED_OBJECT_TYPE_PRESENT = 0x2
# [MS-ADTS] 5.1.3.2 access rights: RIGHT_DS_READ_PROPERTY, RIGHT_DS_CONTROL_ACCESS.
READ_PROPERTY = 0x10
CONTROL_ACCESS = 0x100
# [MS-DTYP] 2.4.6 Control: SE_DACL_PRESENT.
DACL_PRESENT = 0x0004
# The Apply-Group-Policy extended right ([MS-GPOL] 2.3; SSSD's AD_AGP_GUID).
APPLY_GROUP_POLICY = "edacfd8f-ffb3-11d1-b41d-00a0c968f939"
# The Security extension (SSSD's GP_EXT_GUID_SECURITY): the one SSSD evaluates.
SECURITY_CSE = "{827D319E-6EAC-11D2-A4EA-00C04F79F83A}"
SECURITY_INF = "Machine/Microsoft/Windows NT/SecEdit/GptTmpl.inf"

_SD_HEADER = struct.Struct("<BBHIIII")  # Revision, Sbz1, Control, 4 offsets
_ACL_HEADER = struct.Struct("<BBHHH")  # AclRevision, Sbz1, AclSize, AceCount, Sbz2
_ACE_HEADER = struct.Struct("<BBH")  # AceType, AceFlags, AceSize


class GpoFormatError(ValueError):
    """A value read from the directory or SYSVOL that is not what its format says."""


#: Each right's allow and deny keys in GptTmpl.inf (ad_gpo.c gpo_map_option_entries).
RIGHT_KEYS: dict[Right, tuple[str, str]] = {
    Right.INTERACTIVE: ("SeInteractiveLogonRight", "SeDenyInteractiveLogonRight"),
    Right.REMOTE_INTERACTIVE: (
        "SeRemoteInteractiveLogonRight",
        "SeDenyRemoteInteractiveLogonRight",
    ),
    Right.NETWORK: ("SeNetworkLogonRight", "SeDenyNetworkLogonRight"),
    Right.BATCH: ("SeBatchLogonRight", "SeDenyBatchLogonRight"),
    Right.SERVICE: ("SeServiceLogonRight", "SeDenyServiceLogonRight"),
}
#: Every key read from [Privilege Rights], by its lower-cased spelling.
PRIVILEGE_KEYS = {k.lower(): k for pair in RIGHT_KEYS.values() for k in pair}


# -- The directory's values ----------------------------------------------------------


@dataclass(frozen=True)
class GpLink:
    """One link of a gPLink value that is not disabled."""

    gpo_dn: str
    enforced: bool


def parse_gplink(value: str) -> list[GpLink]:
    """The enabled links of a ``gPLink`` value, in its order (SSSD's
    ``ad_gpo_populate_gplink_list``: ``LDAP://`` dropped case-insensitively, options
    1 and 3 skipped, 0 and 2 kept, any other value an error)."""
    links: list[GpLink] = []
    rest = value.strip()
    while rest:
        if not rest.startswith("["):
            raise GpoFormatError(f"gPLink: expected '[' at {rest[:40]!r}")
        end = rest.find("]")
        if end < 0:
            raise GpoFormatError(f"gPLink: unterminated link {rest[:40]!r}")
        body, rest = rest[1:end], rest[end + 1 :].lstrip()
        dn, sep, options = body.rpartition(";")
        if not sep or not dn:
            raise GpoFormatError(f"gPLink: link without options {body[:80]!r}")
        if dn[:7].lower() == "ldap://":
            dn = dn[7:]
        if not options.strip().isdigit():
            raise GpoFormatError(f"gPLink: options {options[:20]!r} are not a number")
        flags = int(options.strip())
        if flags in (1, 3):  # LINK_DISABLED, with or without enforced
            continue
        if flags not in (0, 2):
            raise GpoFormatError(f"gPLink: unknown link options {flags}")
        links.append(GpLink(dn, enforced=flags == 2))
    return links


def parse_gpoptions(values: list[bytes]) -> bool:
    """Whether a ``gPOptions`` value blocks inheritance (1, GPO_BLOCK_INHERITANCE;
    none or 0: it does not)."""
    if not values:
        return False
    raw = values[0].strip()
    if not raw.isdigit():
        raise GpoFormatError(f"gPOptions: {raw[:20]!r} is not a number")
    return int(raw) != 0


def parse_machine_ext_names(value: str) -> list[str]:
    """The client-side extension GUIDs of ``gPCMachineExtensionNames``
    (``[{cse}{tool}…]…``), upper-cased with their braces; empty for a blank value."""
    guids: list[str] = []
    rest = value.strip()
    while rest:
        if not rest.startswith("[{"):
            raise GpoFormatError(f"gPCMachineExtensionNames: expected '[{{' at {rest[:40]!r}")
        end = rest.find("]")
        close = rest.find("}")
        if end < 0 or close < 0 or close > end:
            raise GpoFormatError(f"gPCMachineExtensionNames: bad entry {rest[:60]!r}")
        guids.append(rest[1 : close + 1].upper())
        rest = rest[end + 1 :].lstrip()
    return guids


def split_sysvol_path(value: str) -> tuple[str, str]:
    """``\\\\domain\\SysVol\\domain\\Policies\\{GUID}`` as the share (``SysVol``)
    and the path in it (``domain/Policies/{GUID}``); the server part is not used."""
    parts = value.split("\\")
    # ['', '', server, share, path...]
    if len(parts) < 5 or parts[0] or parts[1] or not parts[2] or not parts[3]:
        raise GpoFormatError(f"gPCFileSysPath: {value[:120]!r} is not \\\\server\\share\\path")
    path = [p for p in parts[4:] if p]
    if not path or any(p in (".", "..") for p in path):
        raise GpoFormatError(f"gPCFileSysPath: {value[:120]!r} has no usable path")
    return parts[3], "/".join(path)


# -- Security descriptors ------------------------------------------------------------


@dataclass(frozen=True)
class Ace:
    type: int
    flags: int
    mask: int
    sid: str
    object_type: str | None = None  # a GUID's string form, for the object ACE types


@dataclass(frozen=True)
class SecurityDescriptor:
    control: int
    dacl: list[Ace] | None  # None: no DACL present


def _guid(raw: bytes) -> str:
    """A GUID's 16 bytes ([MS-DTYP] 2.3.4.2: three little-endian fields, then 8 bytes)
    as its lower-case string form."""
    a, b, c = struct.unpack_from("<IHH", raw)
    d = raw[8:16].hex()
    return f"{a:08x}-{b:04x}-{c:04x}-{d[:4]}-{d[4:]}"


def _sid_at(buf: bytes, pos: int, end: int) -> str:
    if pos + 8 > end:
        raise GpoFormatError("security descriptor: SID past its end")
    size = 8 + 4 * buf[pos + 1]
    if pos + size > end:
        raise GpoFormatError("security descriptor: SID past its end")
    try:
        return sid_to_str(buf[pos : pos + size])
    except ValueError as e:
        raise GpoFormatError(f"security descriptor: {e}") from None


def _ace(buf: bytes, pos: int, end: int) -> Ace | None:
    """The ACE in ``buf[pos:end]``; None for a type SSSD does not evaluate."""
    kind, flags, _ = _ACE_HEADER.unpack_from(buf, pos)
    body = pos + _ACE_HEADER.size
    if kind in (ACCESS_ALLOWED, ACCESS_DENIED):
        if body + 4 > end:
            raise GpoFormatError("security descriptor: ACE too short")
        (mask,) = struct.unpack_from("<I", buf, body)
        return Ace(kind, flags, mask, _sid_at(buf, body + 4, end))
    if kind in (ACCESS_ALLOWED_OBJECT, ACCESS_DENIED_OBJECT):
        if body + 8 > end:
            raise GpoFormatError("security descriptor: object ACE too short")
        mask, oflags = struct.unpack_from("<II", buf, body)
        p = body + 8
        object_type = None
        if oflags & OBJECT_TYPE_PRESENT:
            if p + 16 > end:
                raise GpoFormatError("security descriptor: object ACE too short")
            object_type = _guid(buf[p : p + 16])
            p += 16
        if oflags & INHERITED_OBJECT_TYPE_PRESENT:
            p += 16
        return Ace(kind, flags, mask, _sid_at(buf, p, end), object_type)
    return None


def parse_security_descriptor(raw: bytes) -> SecurityDescriptor:
    """A self-relative security descriptor ([MS-DTYP] 2.4.6) as its control flags and
    DACL; ACE types other than the four SSSD evaluates are skipped (they neither
    grant nor deny what is asked of a GPO)."""
    buf = bytes(raw)
    if len(buf) < _SD_HEADER.size:
        raise GpoFormatError("security descriptor: shorter than its header")
    revision, _, control, _, _, _, dacl_at = _SD_HEADER.unpack_from(buf)
    if revision != 1:
        raise GpoFormatError(f"security descriptor: revision {revision}")
    if not control & DACL_PRESENT or dacl_at == 0:
        return SecurityDescriptor(control, None)
    if dacl_at + _ACL_HEADER.size > len(buf):
        raise GpoFormatError("security descriptor: DACL past its end")
    _, _, acl_size, count, _ = _ACL_HEADER.unpack_from(buf, dacl_at)
    acl_end = dacl_at + acl_size
    if acl_size < _ACL_HEADER.size or acl_end > len(buf):
        raise GpoFormatError("security descriptor: DACL size past its end")
    aces: list[Ace] = []
    pos = dacl_at + _ACL_HEADER.size
    for _ in range(count):
        if pos + _ACE_HEADER.size > acl_end:
            raise GpoFormatError("security descriptor: ACE past the DACL's end")
        (size,) = struct.unpack_from("<H", buf, pos + 2)
        if size < _ACE_HEADER.size or pos + size > acl_end:
            raise GpoFormatError("security descriptor: ACE size past the DACL's end")
        ace = _ace(buf, pos, pos + size)
        if ace is not None:
            aces.append(ace)
        pos += size
    return SecurityDescriptor(control, aces)


def applies(sd: SecurityDescriptor, sids: frozenset[str]) -> bool:
    """Whether a GPO applies to a requester with ``sids`` by its DACL: read property
    granted ([MS-ADTS] 5.1.3.3.2) and Apply-Group-Policy granted before it is denied
    (5.1.3.3.4), as SSSD's ``ad_gpo_evaluate_dacl``. No DACL grants; an empty one
    denies."""
    if sd.dacl is None:
        return True
    granted = denied = 0
    for ace in sd.dacl:
        if ace.flags & INHERIT_ONLY or ace.sid not in sids:
            continue
        if ace.type == ACCESS_DENIED:
            denied |= ace.mask & ~granted
        elif ace.type == ACCESS_ALLOWED:
            granted |= ace.mask & ~denied
    if not granted & READ_PROPERTY:
        return False
    for ace in sd.dacl:
        if ace.flags & INHERIT_ONLY or ace.sid not in sids:
            continue
        if not ace.mask & CONTROL_ACCESS:
            continue
        if ace.object_type is not None and ace.object_type != APPLY_GROUP_POLICY:
            continue
        if ace.type == ACCESS_ALLOWED_OBJECT:
            return True
        if ace.type == ACCESS_DENIED_OBJECT:
            return False
    return False


# -- SYSVOL's files ------------------------------------------------------------------


def decode_ini(raw: bytes, what: str) -> str:
    """An INI file's text: UTF-16 (LE or BE) or UTF-8 by its byte-order mark, UTF-8
    without one (as libini_config, which SSSD parses these files with)."""
    if len(raw) > MAX_FILE_BYTES:
        raise GpoFormatError(f"{what}: {len(raw)} bytes, more than {MAX_FILE_BYTES}")
    try:
        if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            return raw.decode("utf-16")
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise GpoFormatError(f"{what}: not UTF-16 or UTF-8 text ({e.reason})") from None


def parse_ini(text: str) -> dict[str, dict[str, str]]:
    """Sections and their ``key = value`` lines, names lower-cased. Lines that are
    neither (comments, blank lines, anything without ``=``) are skipped, as SSSD's
    second parse (INI_PARSE_IGNORE_NON_KVP) skips them; of a key given twice the last
    value counts."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        s = line.strip()
        if not s or s[0] in ";#":
            continue
        if s.startswith("[") and s.endswith("]"):
            current = sections.setdefault(s[1:-1].strip().lower(), {})
            continue
        key, sep, value = s.partition("=")
        if sep and current is not None and key.strip():
            current[key.strip().lower()] = value.strip()
    return sections


def gpt_version(raw: bytes) -> int:
    """``[General] Version`` of a GPT.INI (a 32-bit number: the user part's version in
    the high 16 bits, the machine part's in the low)."""
    general = parse_ini(decode_ini(raw, "GPT.INI")).get("general", {})
    value = general.get("version")
    if value is None:
        raise GpoFormatError("GPT.INI: no [General] Version")
    try:
        version = int(value, 10)
    except ValueError:
        raise GpoFormatError(f"GPT.INI: Version {value[:20]!r} is not a number") from None
    if not 0 <= version <= 0xFFFFFFFF:
        raise GpoFormatError(f"GPT.INI: Version {version} out of range")
    return version


#: A GPO's logon rights: each key of [Privilege Rights] it sets, by its canonical
#: spelling, to the SIDs it lists. A key set to nothing (``SeInteractiveLogonRight =``)
#: is present with no SIDs: the right is granted to no one.
PrivilegeRights = dict[str, tuple[str, ...]]


def privilege_rights(raw: bytes) -> PrivilegeRights:
    """The logon rights of a GptTmpl.inf. Each value is a comma list of ``*<SID>``
    and account names; SSSD 2.8.2 drops the first character of each and compares what
    is left with the user's SIDs, so only ``*S-…`` entries can ever match: a name is
    kept as written and matches nothing here too."""
    rights = parse_ini(decode_ini(raw, "GptTmpl.inf")).get("privilege rights", {})
    out: PrivilegeRights = {}
    for key, value in rights.items():
        name = PRIVILEGE_KEYS.get(key)
        if name is None:
            continue
        items = [item.strip() for item in value.split(",") if item.strip()]
        out[name] = tuple(item[1:] if item.startswith("*") else item for item in items)
    return out
