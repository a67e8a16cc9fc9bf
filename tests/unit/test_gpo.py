"""GPO-based login rights, the pure parts (cached/ldap/gpo_parse.py, cached/ldap/gpo.py):
the directory's values and SYSVOL's files parsed, SSSD 2.8.2's order of GPOs, its
service mapping and its decision; decide() over a directory of canned entries.
The security descriptor and netlogon answer are real bytes from a Samba DC
(tests/unit/data/samba_gpo.json); the real DC is tests/integration/test_gpo_ad.py."""

from __future__ import annotations

import base64
import codecs
import contextlib
import json
import struct
from pathlib import Path

import pytest

from cached.config.gpomap import GpoMode as Mode
from cached.config.gpomap import GpoRight as Right
from cached.config.gpomap import map_items, service_table
from cached.ldap import gpo
from cached.ldap.client import LdapOffline
from cached.ldap.exchange import Entry, LdapError
from cached.ldap.gpo import (
    AUTHENTICATED_USERS,
    GpoSettings,
    Som,
    candidates,
    check,
    resultant,
    som_dns,
)
from cached.ldap.gpo_fetch import DirectorySysvol, GpoFiles, SmbSysvol
from cached.ldap.gpo_parse import (
    ACCESS_ALLOWED,
    ACCESS_ALLOWED_OBJECT,
    ACCESS_DENIED,
    ACCESS_DENIED_OBJECT,
    APPLY_GROUP_POLICY,
    CONTROL_ACCESS,
    INHERIT_ONLY,
    READ_PROPERTY,
    SECURITY_CSE,
    GpLink,
    GpoFormatError,
    applies,
    gpt_version,
    parse_gplink,
    parse_gpoptions,
    parse_machine_ext_names,
    parse_security_descriptor,
    privilege_rights,
    split_sysvol_path,
)
from cached.ldap.sid import sid_to_bytes

DATA = json.loads((Path(__file__).parent / "data" / "samba_gpo.json").read_text())
DOMAIN_SID = DATA["domain_sid"]
REAL_SD = base64.b64decode(DATA["gpo_sd"])
REAL_NETLOGON = base64.b64decode(DATA["netlogon"])
BASE = "DC=cached,DC=test"
USER = f"{DOMAIN_SID}-1105"
GROUP = f"{DOMAIN_SID}-1106"
OTHER = f"{DOMAIN_SID}-1107"


def inf(text: str, encoding: str = "utf-16-le", bom: bytes = codecs.BOM_UTF16_LE) -> bytes:
    """A GptTmpl.inf as the Group Policy editor writes it: UTF-16LE, BOM, CRLF."""
    return bom + text.replace("\n", "\r\n").encode(encoding)


TMPL = """[Unicode]
Unicode=yes
[Version]
signature="$CHICAGO$"
Revision=1
[Privilege Rights]
SeDenyInteractiveLogonRight = *{group}
SeInteractiveLogonRight = *S-1-5-32-544,*{user}, CACHED\\someone
seremoteinteractivelogonright =
"""


# -- gPLink, gPOptions, extension names, paths ----------------------------------------


def test_gplink_keeps_enabled_links_in_order_and_marks_enforced():
    value = (
        "[LDAP://cn={A},cn=policies,cn=system,DC=cached,DC=test;0]"
        "[ldap://cn={B},cn=policies,cn=system,DC=cached,DC=test;1]"
        "[LDAP://cn={C},cn=policies,cn=system,DC=cached,DC=test;2]"
        "[LDAP://cn={D},cn=policies,cn=system,DC=cached,DC=test;3]"
    )
    links = parse_gplink(value)
    assert [(lk.gpo_dn.split(",")[0], lk.enforced) for lk in links] == [
        ("cn={A}", False),
        ("cn={C}", True),
    ]


@pytest.mark.parametrize("bad", ["[LDAP://cn=x;7]", "[LDAP://cn=x]", "cn=x;0", "[cn=x;0", "[;0]"])
def test_gplink_refuses_what_is_not_one(bad):
    with pytest.raises(GpoFormatError):
        parse_gplink(bad)


def test_gpoptions_blocks_inheritance_only_when_set():
    assert parse_gpoptions([]) is False
    assert parse_gpoptions([b"0"]) is False
    assert parse_gpoptions([b"1"]) is True
    with pytest.raises(GpoFormatError):
        parse_gpoptions([b"yes"])


def test_machine_extension_names():
    value = (
        "[{35378EAC-683F-11D2-A89A-00C04FBBCFA2}{53D6AB1B-2488-11D1-A28C-00C04FB94F17}]"
        "[{827d319e-6eac-11d2-a4ea-00c04f79f83a}{803E14A0-B4FB-11D0-A0D0-00A0C90F574B}]"
    )
    assert parse_machine_ext_names(value)[1] == SECURITY_CSE
    assert parse_machine_ext_names("  ") == []
    with pytest.raises(GpoFormatError):
        parse_machine_ext_names("[{x")


def test_sysvol_path_is_share_and_path():
    path = "\\\\cached.test\\sysvol\\cached.test\\Policies\\{31B2F340-016D-11D2-945F-00C04FB984F9}"
    assert split_sysvol_path(path) == (
        "sysvol",
        "cached.test/Policies/{31B2F340-016D-11D2-945F-00C04FB984F9}",
    )
    for bad in ("\\\\srv\\share", "c:\\x\\y", "\\\\srv\\sysvol\\..\\..\\etc"):
        with pytest.raises(GpoFormatError):
            split_sysvol_path(bad)


# -- Security descriptors -------------------------------------------------------------


def guid_bytes(guid: str) -> bytes:
    a, b, c, d, e = guid.split("-")
    return struct.pack("<IHH", int(a, 16), int(b, 16), int(c, 16)) + bytes.fromhex(d + e)


def ace(kind: int, sid: str, mask: int, flags: int = 0, object_type: str | None = None) -> bytes:
    body = struct.pack("<I", mask)
    if kind in (ACCESS_ALLOWED_OBJECT, ACCESS_DENIED_OBJECT):
        body += struct.pack("<I", 1 if object_type else 0)
        body += guid_bytes(object_type) if object_type else b""
    body += sid_to_bytes(sid)
    return struct.pack("<BBH", kind, flags, 4 + len(body)) + body


def sd(*aces: bytes, dacl: bool = True) -> bytes:
    acl = b"".join(aces)
    acl = struct.pack("<BBHHH", 4, 0, 8 + len(acl), len(aces), 0) + acl
    control = 0x8004 if dacl else 0x8000
    return struct.pack("<BBHIIII", 1, 0, control, 0, 0, 0, 20 if dacl else 0) + acl


READ = READ_PROPERTY | 0x20084  # RPLCLORC, as the default GPO ACL grants


def test_real_descriptor_applies_to_authenticated_users():
    parsed = parse_security_descriptor(REAL_SD)
    assert parsed.dacl is not None
    agp = [a for a in parsed.dacl if a.object_type == APPLY_GROUP_POLICY]
    assert [(a.sid, a.type) for a in agp] == [(AUTHENTICATED_USERS, ACCESS_ALLOWED_OBJECT)]
    assert applies(parsed, frozenset({USER, AUTHENTICATED_USERS}))
    # Without Authenticated Users (SSSD always adds it) nothing grants the right.
    assert not applies(parsed, frozenset({USER}))


def test_security_filtering_deny_before_allow_wins():
    allow_all = ace(ACCESS_ALLOWED_OBJECT, AUTHENTICATED_USERS, CONTROL_ACCESS,
                    object_type=APPLY_GROUP_POLICY)  # fmt: skip
    deny_group = ace(ACCESS_DENIED_OBJECT, GROUP, CONTROL_ACCESS, object_type=APPLY_GROUP_POLICY)
    read = ace(ACCESS_ALLOWED, AUTHENTICATED_USERS, READ)
    filtered = parse_security_descriptor(sd(read, deny_group, allow_all))
    assert not applies(filtered, frozenset({USER, GROUP, AUTHENTICATED_USERS}))
    assert applies(filtered, frozenset({OTHER, AUTHENTICATED_USERS}))


def test_security_filtering_needs_read_and_apply():
    agp = ace(ACCESS_ALLOWED_OBJECT, GROUP, CONTROL_ACCESS, object_type=APPLY_GROUP_POLICY)
    other_right = ace(ACCESS_ALLOWED_OBJECT, GROUP, CONTROL_ACCESS,
                      object_type="00299570-246d-11d0-a768-00aa006e0529")  # fmt: skip
    read = ace(ACCESS_ALLOWED, GROUP, READ)
    sids = frozenset({GROUP, AUTHENTICATED_USERS})
    assert not applies(parse_security_descriptor(sd(agp)), sids)  # no read
    assert not applies(parse_security_descriptor(sd(read, other_right)), sids)
    assert applies(parse_security_descriptor(sd(read, agp)), sids)
    # An inherit-only ACE does not apply to the GPO itself.
    io_agp = ace(ACCESS_ALLOWED_OBJECT, GROUP, CONTROL_ACCESS, INHERIT_ONLY, APPLY_GROUP_POLICY)
    assert not applies(parse_security_descriptor(sd(read, io_agp)), sids)
    # Read denied before it is granted.
    deny_read = ace(ACCESS_DENIED, GROUP, READ_PROPERTY)
    assert not applies(parse_security_descriptor(sd(deny_read, read, agp)), sids)
    # CONTROL_ACCESS without an object type is every control right, AGP included.
    all_cr = ace(ACCESS_ALLOWED_OBJECT, GROUP, CONTROL_ACCESS)
    assert applies(parse_security_descriptor(sd(read, all_cr)), sids)


def test_no_dacl_grants_an_empty_one_denies():
    assert applies(parse_security_descriptor(sd(dacl=False)), frozenset())
    assert not applies(parse_security_descriptor(sd()), frozenset({AUTHENTICATED_USERS}))


def test_every_truncation_and_corruption_is_a_format_error():
    for n in range(len(REAL_SD)):
        with contextlib.suppress(GpoFormatError):
            parse_security_descriptor(REAL_SD[:n])
    for i in range(len(REAL_SD)):
        for b in (0x00, 0xFF, 0x80):
            mangled = REAL_SD[:i] + bytes([b]) + REAL_SD[i + 1 :]
            with contextlib.suppress(GpoFormatError):
                parse_security_descriptor(mangled)


# -- SYSVOL's files -------------------------------------------------------------------


def test_gpttmpl_in_utf16_with_bom():
    raw = inf(TMPL.format(user=USER, group=GROUP))
    rights = privilege_rights(raw)
    assert rights == {
        "SeDenyInteractiveLogonRight": (GROUP,),
        "SeInteractiveLogonRight": ("S-1-5-32-544", USER, "CACHED\\someone"),
        "SeRemoteInteractiveLogonRight": (),
    }
    # The same file big-endian, in UTF-8 with and without a BOM.
    text = TMPL.format(user=USER, group=GROUP)
    assert privilege_rights(inf(text, "utf-16-be", codecs.BOM_UTF16_BE)) == rights
    assert privilege_rights(inf(text, "utf-8", codecs.BOM_UTF8)) == rights
    assert privilege_rights(inf(text, "utf-8", b"")) == rights


def test_gpttmpl_without_privilege_rights_sets_nothing():
    text = "[Unicode]\nUnicode=yes\n[System Access]\nMinimumPasswordAge = 1\n"
    assert privilege_rights(inf(text)) == {}


def test_undecodable_or_oversized_files_are_refused():
    with pytest.raises(GpoFormatError):
        privilege_rights(codecs.BOM_UTF16_LE + b"\x00\xd8")  # a lone surrogate
    with pytest.raises(GpoFormatError):
        privilege_rights(b"\xff\xfe" + b"a\x00" * (1 << 20))


def test_gpt_ini_version():
    raw = b"[General]\r\nVersion=65539\r\ndisplayName=New Group Policy Object\r\n"
    assert gpt_version(raw) == 65539
    for bad in (b"[General]\r\n", b"[General]\r\nVersion=x\r\n", b"[General]\r\nVersion=-1\r\n"):
        with pytest.raises(GpoFormatError):
            gpt_version(bad)


def test_netlogon_site_from_samba():
    assert gpo.netlogon_client_site(REAL_NETLOGON) == "Default-First-Site-Name"
    for n in range(len(REAL_NETLOGON)):
        with contextlib.suppress(GpoFormatError):
            gpo.netlogon_client_site(REAL_NETLOGON[:n])
    loop = struct.pack("<HHI", 23, 0, 0) + bytes(16) + b"\xc0\x18"
    with pytest.raises(GpoFormatError):
        gpo.netlogon_client_site(loop)


# -- Mapping, order, decision ---------------------------------------------------------


def test_default_service_map_is_sssds():
    table = service_table({})
    assert table["login"] == table["su"] == table["gdm-password"] == Right.INTERACTIVE
    assert table["sshd"] == table["cockpit"] == Right.REMOTE_INTERACTIVE
    assert table["sudo"] == table["systemd-user"] == Right.PERMIT
    assert table["crond"] == Right.BATCH
    assert "myapp" not in table


def test_service_map_plus_and_minus():
    table = service_table({
        Right.INTERACTIVE: ["+myapp", "-su"],
        Right.REMOTE_INTERACTIVE: ["-sshd"],
        Right.NETWORK: ["+sshd"],
        Right.DENY: ["+ftp2", "-ftp2"],
    })  # fmt: skip
    assert table["myapp"] == Right.INTERACTIVE
    assert "su" not in table
    assert table["sshd"] == Right.NETWORK
    assert "ftp2" not in table


def test_service_in_two_maps_is_refused():
    with pytest.raises(ValueError, match="sshd"):
        service_table({Right.INTERACTIVE: ["+sshd"]})
    with pytest.raises(ValueError, match="must be"):
        map_items("sshd")
    assert map_items("+a, -b") == ["+a", "-b"]


def test_soms_are_the_ous_and_the_domain():
    dn = f"CN=host1,OU=Servers,OU=Linux\\, Paris,{BASE}"
    assert som_dns(dn) == [
        f"OU=Servers,OU=Linux\\, Paris,{BASE}",
        f"OU=Linux\\, Paris,{BASE}",
        BASE,
    ]
    assert som_dns(f"CN=host1,CN=Computers,{BASE}") == [BASE]


def link(name: str, enforced: bool = False) -> GpLink:
    return GpLink(name, enforced)


def test_candidates_in_sssds_order():
    soms = [
        Som("ou", [link("ou1"), link("ou2"), link("ouE", True)]),
        Som("domain", [link("d1"), link("dE1", True), link("dE2", True)]),
        Som("site", [link("s1"), link("sE", True)]),
    ]
    # Unenforced site -> domain -> OU, each in link order; then enforced OU -> site.
    assert candidates(soms) == ["s1", "d1", "ou1", "ou2", "ouE", "dE1", "dE2", "sE"]


def test_blocked_inheritance_keeps_only_enforced_links_above():
    soms = [
        Som("ou", [link("ou1")], blocks=True),
        Som("domain", [link("d1"), link("dE", True)]),
        Som("site", [link("s1")]),
    ]
    assert candidates(soms) == ["ou1", "dE"]


def test_later_gpo_replaces_a_key():
    first = {"SeDenyInteractiveLogonRight": (GROUP,), "SeInteractiveLogonRight": (USER,)}
    second = {"SeDenyInteractiveLogonRight": ()}
    assert resultant([first, second]) == {
        "SeDenyInteractiveLogonRight": (),
        "SeInteractiveLogonRight": (USER,),
    }


SIDS = frozenset({USER, GROUP, AUTHENTICATED_USERS})


def test_check_deny_beats_allow():
    rights = {"SeInteractiveLogonRight": (USER,), "SeDenyInteractiveLogonRight": (GROUP,)}
    assert check(rights, Right.INTERACTIVE, SIDS, False)[0] is False
    assert check(rights, Right.INTERACTIVE, frozenset({OTHER}), False)[0] is False  # not allowed
    either = {"SeInteractiveLogonRight": (OTHER, GROUP)}
    assert check(either, Right.INTERACTIVE, SIDS, False)[0] is True


def test_check_absent_allow_key_allows_unless_implicit_deny():
    assert check({}, Right.INTERACTIVE, SIDS, False)[0] is True
    assert check({}, Right.INTERACTIVE, SIDS, True)[0] is False
    # Set to nothing: granted to no one (SSSD stores NO_SID, which matches nobody).
    assert check({"SeInteractiveLogonRight": ()}, Right.INTERACTIVE, SIDS, False)[0] is False
    # Another right's keys do not matter.
    assert check({"SeDenyInteractiveLogonRight": (GROUP,)}, Right.REMOTE_INTERACTIVE, SIDS,
                 False)[0] is True  # fmt: skip


# -- decide() over canned entries ------------------------------------------------------

COMPUTER = f"CN=HOST1,OU=Linux,{BASE}"
CONFIG_NC = f"CN=Configuration,{BASE}"
SITE = f"CN=Default-First-Site-Name,CN=Sites,{CONFIG_NC}"
GPO_DN = f"CN={{AAAA}},CN=Policies,CN=System,{BASE}"
HOST_SID = f"{DOMAIN_SID}-2000"
TOOL = "{803E14A0-B4FB-11D0-A0D0-00A0C90F574B}"  # the Security editor's tool GUID
READ_AND_APPLY = sd(
    ace(ACCESS_ALLOWED, AUTHENTICATED_USERS, READ),
    ace(ACCESS_ALLOWED_OBJECT, AUTHENTICATED_USERS, CONTROL_ACCESS,
        object_type=APPLY_GROUP_POLICY),
)  # fmt: skip


def entry(dn: str, **attrs: bytes) -> Entry:
    return Entry(dn, {k.lower(): [v] for k, v in attrs.items()})


class Directory:
    """Canned answers by base DN; ``offline``: every search raises LdapOffline."""

    def __init__(self, gplink_on: str = "ou", gpo_flags: bytes = b"0") -> None:
        self.offline = False
        self.searches: list[tuple[str, str, int]] = []
        link_value = f"[LDAP://{GPO_DN};0]".encode()
        self.entries = {
            "": entry("", configurationNamingContext=CONFIG_NC.encode(), netlogon=REAL_NETLOGON),
            f"OU=Linux,{BASE}": entry(f"OU=Linux,{BASE}"),
            BASE: entry(BASE),
            SITE: entry(SITE),
            GPO_DN: entry(
                GPO_DN,
                cn=b"{AAAA}",
                flags=gpo_flags,
                versionNumber=b"3",
                gPCFunctionalityVersion=b"2",
                nTSecurityDescriptor=READ_AND_APPLY,
                gPCFileSysPath=b"\\\\cached.test\\SysVol\\cached.test\\Policies\\{AAAA}",
                gPCMachineExtensionNames=f"[{SECURITY_CSE}{TOOL}]".encode(),
            ),
        }
        target = {"ou": f"OU=Linux,{BASE}", "domain": BASE, "site": SITE}[gplink_on]
        self.entries[target].attrs["gplink"] = [link_value]

    def search(self, base: str, filt: str, attrs: list[str], *, scope: str = "sub",
               sd_flags: int = 0) -> list[Entry]:  # fmt: skip
        if self.offline:
            raise LdapOffline("no server")
        self.searches.append((base, filt, sd_flags))
        if scope == "sub":
            assert "sAMAccountName=HOST1$" in filt
            return [entry(COMPUTER, userAccountControl=b"4096",
                          objectSid=sid_to_bytes(HOST_SID))]  # fmt: skip
        return [self.entries[base]] if base in self.entries else []


class Files:
    def __init__(self, rights: dict[str, tuple[str, ...]]) -> None:
        self.rights_of = rights
        self.asked: list[tuple[str, str, str]] = []

    def rights(self, guid: str, share: str, path: str) -> dict[str, tuple[str, ...]]:
        self.asked.append((guid, share, path))
        return self.rights_of


DENY_GROUP: dict[str, tuple[str, ...]] = {"SeDenyInteractiveLogonRight": (GROUP,)}


def run(directory, files, tmp_path, service="login", user=USER, **settings):
    return gpo.decide(
        directory, files, domain="cached.test", domain_dn=BASE, host="host1.cached.test",
        user_sid=user, group_sids=[GROUP] if user == USER else [], service=service,
        settings=GpoSettings(**settings), state_dir=tmp_path / "gpo",
    )  # fmt: skip


@pytest.mark.parametrize("where", ["ou", "domain", "site"])
def test_decide_denies_a_member_wherever_the_gpo_is_linked(tmp_path, where):
    d, f = Directory(where), Files(DENY_GROUP)
    got = run(d, f, tmp_path)
    assert not got.allowed and got.right == Right.INTERACTIVE and not got.error
    assert f.asked == [("{AAAA}", "SysVol", "cached.test/Policies/{AAAA}")]
    # The GPO was read with its DACL asked for.
    assert (GPO_DN, "(objectClass=*)", 4) in d.searches
    assert run(d, f, tmp_path, user=OTHER).allowed
    # sshd maps to remote interactive, which this GPO does not restrict.
    assert run(d, f, tmp_path, service="sshd").allowed


def test_decide_skips_a_gpo_with_its_computer_part_disabled(tmp_path):
    assert run(Directory(gpo_flags=b"2"), Files(DENY_GROUP), tmp_path).allowed


def test_decide_modes_and_fixed_mappings(tmp_path):
    d, f = Directory(), Files(DENY_GROUP)
    got = run(d, f, tmp_path, mode=Mode.PERMISSIVE)
    assert got.allowed and got.would_deny
    searches = len(d.searches)
    assert run(d, f, tmp_path, mode=Mode.DISABLED).allowed
    assert run(d, f, tmp_path, service="sudo").allowed  # permit
    assert not run(d, f, tmp_path, service="myapp").allowed  # default right: deny
    assert run(d, f, tmp_path, service="myapp", default_right=Right.REMOTE_INTERACTIVE).allowed
    got = run(d, f, tmp_path, service="myapp", mode=Mode.PERMISSIVE)
    assert got.allowed and got.would_deny
    # Only the evaluated default right asked the directory.
    assert len(d.searches) > searches


def test_decide_errors_deny_unless_permissive(tmp_path):
    class Broken(Directory):
        def search(self, base, filt, attrs, *, scope="sub", sd_flags=0):
            raise LdapError("no such object")

    got = run(Broken(), Files({}), tmp_path)
    assert not got.allowed and got.error
    got = run(Broken(), Files({}), tmp_path, mode=Mode.PERMISSIVE)
    assert got.allowed and got.error and got.would_deny


def test_decide_offline_uses_the_last_rights(tmp_path):
    d = Directory()
    assert not run(d, Files(DENY_GROUP), tmp_path).allowed
    d.offline = True
    got = run(d, Files({}), tmp_path)
    assert not got.allowed and got.offline
    assert run(d, Files({}), tmp_path, user=OTHER).allowed
    # Never evaluated online: no stored rights, allowed unless implicit deny.
    assert run(d, Files({}), tmp_path / "fresh").allowed
    assert not run(d, Files({}), tmp_path / "fresh", implicit_deny=True).allowed


# -- The GPO file cache (cached/ldap/gpo_fetch.py) -------------------------------------

GUID = "{31B2F340-016D-11D2-945F-00C04FB984F9}"
GPO_PATH = f"cached.test/Policies/{GUID}"
INF_PATH = f"{GPO_PATH}/Machine/Microsoft/Windows NT/SecEdit/GptTmpl.inf"
EVERYONE = "[Privilege Rights]\nSeDenyInteractiveLogonRight = *S-1-1-0\n"


class Share:
    """SYSVOL as a dict of paths; ``down``: every read fails."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.down = False

    def set(self, version: int, inf_text: str | None, machine: str = "Machine") -> None:
        self.files = {f"{GPO_PATH}/GPT.INI": f"[General]\r\nVersion={version}\r\n".encode()}
        if inf_text is not None:
            self.files[INF_PATH.replace("/Machine/", f"/{machine}/")] = inf(inf_text)

    def read(self, share: str, path: str) -> bytes | None:
        if self.down:
            raise OSError("connection refused")
        assert share == "SysVol"
        return self.files.get(path)


def cache(tmp_path: Path, share: Share, now: list[float]) -> GpoFiles:
    return GpoFiles(tmp_path / "files", 5, lambda: share, clock=lambda: now[0])


def test_file_cache_by_version_and_timeout(tmp_path):
    share, now = Share(), [1000.0]
    share.set(1, TMPL.format(user=USER, group=GROUP))
    files = cache(tmp_path, share, now)
    first = files.rights(GUID, "SysVol", GPO_PATH)
    assert first["SeDenyInteractiveLogonRight"] == (GROUP,)
    assert files.fetched == [f"{GPO_PATH}/GPT.INI", INF_PATH]
    # Within ad_gpo_cache_timeout SYSVOL is not asked, even when it is down.
    share.down = True
    now[0] += 4
    assert files.rights(GUID, "SysVol", GPO_PATH) == first
    assert len(files.fetched) == 2
    # After it: GPT.INI only, while the version is the same.
    share.down = False
    share.set(1, EVERYONE)
    now[0] += 2
    assert files.rights(GUID, "SysVol", GPO_PATH) == first
    assert files.fetched[2:] == [f"{GPO_PATH}/GPT.INI"]
    # A higher version: the file again.
    share.set(2, EVERYONE)
    now[0] += 6
    assert files.rights(GUID, "SysVol", GPO_PATH) == {"SeDenyInteractiveLogonRight": ("S-1-1-0",)}
    # A new instance (a restarted backend) reads what the last one stored, while fresh.
    share.down = True
    again = cache(tmp_path, share, now)
    assert again.rights(GUID, "SysVol", GPO_PATH) == {"SeDenyInteractiveLogonRight": ("S-1-1-0",)}
    now[0] += 6
    with pytest.raises(OSError):
        again.rights(GUID, "SysVol", GPO_PATH)


def test_file_cache_missing_file_upper_case_folder_and_bad_input(tmp_path):
    share, now = Share(), [0.0]
    share.set(1, TMPL.format(user=USER, group=GROUP), machine="MACHINE")
    files = cache(tmp_path, share, now)
    assert files.rights(GUID, "SysVol", GPO_PATH)["SeDenyInteractiveLogonRight"] == (GROUP,)
    # The file removed on the DC: no settings, the stored copy gone.
    share.set(2, None)
    now[0] += 10
    assert files.rights(GUID, "SysVol", GPO_PATH) == {}
    # A file that does not parse is refused, and the last good one stays.
    share.set(3, TMPL.format(user=USER, group=GROUP))
    now[0] += 10
    files.rights(GUID, "SysVol", GPO_PATH)
    share.files[f"{GPO_PATH}/GPT.INI"] = b"[General]\r\nVersion=4\r\n"
    share.files[INF_PATH] = b"\xff\xfe\x00\xd8"
    now[0] += 10
    with pytest.raises(GpoFormatError):
        files.rights(GUID, "SysVol", GPO_PATH)
    stored = tmp_path / "files" / GUID / "GptTmpl.inf"
    assert stored.read_bytes() == inf(TMPL.format(user=USER, group=GROUP))
    with pytest.raises(GpoFormatError):
        files.rights("../../etc", "SysVol", GPO_PATH)
    del share.files[f"{GPO_PATH}/GPT.INI"]
    now[0] += 10
    with pytest.raises(OSError):
        files.rights(GUID, "SysVol", GPO_PATH)


def test_directory_sysvol_stays_in_its_share(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "GPT.INI").write_bytes(b"x")
    reader = DirectorySysvol({"sysvol": tmp_path})
    assert reader.read("SysVol", "p/GPT.INI") == b"x"
    assert reader.read("sysvol", "p/none") is None
    with pytest.raises(GpoFormatError):
        reader.read("sysvol", "p/../../etc/passwd")
    with pytest.raises(OSError):
        reader.read("netlogon", "p/GPT.INI")


# -- The options ----------------------------------------------------------------------


def test_options_give_the_settings():
    from cached.config import ConfigError
    from testing.backend import make_domain

    cfg = make_domain(
        ["ldap://127.0.0.1"], BASE, ad_gpo_access_control="permissive",
        ad_gpo_map_interactive="+myapp, -su", ad_gpo_default_right="permit",
        ad_gpo_cache_timeout="30",
    )  # fmt: skip
    settings = GpoSettings.of(cfg)
    assert settings.mode == Mode.PERMISSIVE and settings.cache_timeout == 30
    assert settings.table["myapp"] == Right.INTERACTIVE and "su" not in settings.table
    assert settings.default_right == Right.PERMIT
    defaults = GpoSettings.of(make_domain(["ldap://127.0.0.1"], BASE))
    assert defaults == GpoSettings()
    with pytest.raises(ConfigError, match=r"ad_gpo_map_.*sshd"):
        make_domain(["ldap://127.0.0.1"], BASE, ad_gpo_map_interactive="+sshd")
    with pytest.raises(ConfigError, match="ad_gpo_map_deny"):
        make_domain(["ldap://127.0.0.1"], BASE, ad_gpo_map_deny="sshd")
    with pytest.raises(ConfigError, match="ad_gpo_access_control"):
        make_domain(["ldap://127.0.0.1"], BASE, ad_gpo_access_control="on")


def test_sd_flags_control_value():
    from cached.ldap.controls import SECINFO_DACL, encode_sd_flags

    # SDFlagsRequestValue ::= SEQUENCE { Flags INTEGER }, DACL_SECURITY_INFORMATION.
    assert encode_sd_flags(SECINFO_DACL) == bytes.fromhex("3003020104")


def test_unreadable_gpo_fails_unless_ignored(tmp_path):
    d, f = Directory(), Files(DENY_GROUP)
    del d.entries[GPO_DN].attrs["ntsecuritydescriptor"]  # the host may not read it
    got = run(d, f, tmp_path)
    assert not got.allowed and got.error and "ad_gpo_ignore_unreadable" in got.reason
    assert run(d, f, tmp_path, ignore_unreadable=True).allowed  # skipped
    # Without gPCFunctionalityVersion a GPO is skipped before its flags are read.
    del d.entries[GPO_DN].attrs["gpcfunctionalityversion"]
    del d.entries[GPO_DN].attrs["flags"]
    assert run(d, f, tmp_path).allowed
    assert f.asked == []


class _RefusingConnection:
    """An smbprotocol connection whose server refuses the logoff: disconnect() raises
    unless asked to close the socket only."""

    def __init__(self) -> None:
        self.socket_closed = False

    def disconnect(self, close: bool = True) -> None:
        if close:
            raise OSError("STATUS_ACCESS_DENIED")
        self.socket_closed = True


def test_smb_close_never_raises_and_closes_the_socket():
    reader = SmbSysvol("dc1.example.test")
    conn = _RefusingConnection()
    reader._cache["dc1.example.test:445"] = conn
    reader.close()
    assert conn.socket_closed and not reader._cache
