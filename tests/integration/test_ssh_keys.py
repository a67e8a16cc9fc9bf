"""Users' SSH keys from the directory through Debian's own ``sss_ssh_authorizedkeys``
(``services = nss, ssh``): the same output as SSSD 2.8.2 on the same directory, the
same reply bytes on the socket, and a real sshd whose ``AuthorizedKeysCommand`` it is
(:mod:`testing.sshkeys`): a key login works, keeps working with the server stopped,
and stops working once a key removed in the directory is seen (the user's entry
expired by ``cached cache -u``). Needs root, sssd-common, openssh-server/-client.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cached.ssh import protocol as sshp
from testing import nsenv, sshkeys
from testing import sssd as sssd_mod
from testing.daemon import CachedDaemon
from testing.slapd import Slapd

_SKIP = nsenv.skip_reason() or sshkeys.skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

SSH_FAILED = 255  # ssh's own status when the login fails


def _b64(line: str) -> str:
    """alice2's value as stored (with its newline), for LDIF."""
    return base64.b64encode(line.encode() + b"\n").decode()


@dataclass
class Keys:
    alice: sshkeys.KeyPair
    alice2: sshkeys.KeyPair
    carol: sshkeys.KeyPair
    stranger: sshkeys.KeyPair  # in no entry


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    top = tmp_path_factory.mktemp("sshkeys")
    return Keys(*(sshkeys.keypair(top / n, f"{n}@test")
                  for n in ("alice", "alice2", "carol", "stranger")))  # fmt: skip


def directory_keys(k: Keys) -> dict[str, list[bytes]]:
    # alice: two text lines (the second with a trailing newline, as pasted keys often
    # are); carol: an RFC 4253 blob, which the client prints with its algorithm.
    return {
        "alice": [k.alice.public.encode(), k.alice2.public.encode() + b"\n"],
        "carol": [k.carol.blob],
    }


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Iterator[Slapd]:
    top = tmp_path_factory.mktemp("sshdir")
    path = top / "ssh.ldif"
    path.write_text(sshkeys.ldif(directory_keys(keys)))
    server = Slapd(top / "slapd", path, sshkeys.BASE)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def start_cached(workdir: Path, slapd: Slapd, **opts: Any) -> CachedDaemon:
    daemon = CachedDaemon(workdir, [slapd.uri], sshkeys.BASE,
                          daemon={"services": "nss, ssh"}, **opts)  # fmt: skip
    daemon.start()
    daemon.pipes_dir.chmod(0o755)  # sshd runs the client as nobody
    return daemon


NAMES = ("alice", "bob", "carol", "nosuchuser", "root", "nobody")


def test_authorizedkeys_output_is_sssds(slapd: Slapd, tmp_path: Path) -> None:
    """Keys as text and as a blob, a user without keys, an unknown user, root, a local
    user: the client's output and exit status, and the socket's reply bytes, are
    SSSD 2.8.2's."""
    reason = sssd_mod.skip_reason()
    if reason:
        pytest.skip(reason)
    cached = start_cached(tmp_path / "cached", slapd)
    sssd = sssd_mod.SssdDaemon(tmp_path / "sssd", slapd.uri, sshkeys.BASE,
                               responders={"ssh": {}})  # fmt: skip
    sssd.start()
    try:
        for name in NAMES:
            ours = sshkeys.authorized_keys(cached.pipes_dir, cached.mc_dir, name)
            theirs = sshkeys.authorized_keys(sssd.pipes_dir, sssd.mc_dir, name)
            assert (ours.returncode, ours.stdout, ours.stderr) == (
                theirs.returncode, theirs.stdout, theirs.stderr
            ), name  # fmt: skip
            for cmd in (sshp.Command.GET_USER_PUBKEYS, sshp.Command.GET_HOST_PUBKEYS):
                body = sshp.request_body(name)
                assert sshkeys.raw_request(cached.pipes_dir, cmd, body) == (
                    sshkeys.raw_request(sssd.pipes_dir, cmd, body)
                ), (name, cmd)
        for domain in ("LDAP", "NOSUCHDOMAIN"):
            ours = sshkeys.authorized_keys(cached.pipes_dir, cached.mc_dir, "alice", "-d", domain)
            theirs = sshkeys.authorized_keys(sssd.pipes_dir, sssd.mc_dir, "alice", "-d", domain)
            assert (ours.returncode, ours.stdout, ours.stderr) == (
                theirs.returncode, theirs.stdout, theirs.stderr
            ), domain  # fmt: skip
            assert len(ours.stdout.splitlines()) == (2 if domain == "LDAP" else 0)
    finally:
        sssd.stop()
        cached.stop()


def test_key_login_through_sshd(slapd: Slapd, keys: Keys, tmp_path: Path) -> None:
    cached = start_cached(tmp_path / "cached", slapd)
    work = tmp_path / "sshd"

    def login(user: str, key: sshkeys.KeyPair) -> int:
        done = sshkeys.key_login(cached.pipes_dir, cached.mc_dir, work, user, key.private)
        if done.returncode == 0:
            assert done.stdout.strip() == user, done
        return done.returncode

    try:
        listed = sshkeys.authorized_keys(cached.pipes_dir, cached.mc_dir, "alice")
        assert listed.stdout.splitlines() == [keys.alice.public, keys.alice2.public], listed
        assert login("alice", keys.alice) == 0, sshkeys.sshd_log(work)
        assert login("alice", keys.alice2) == 0, sshkeys.sshd_log(work)
        assert login("carol", keys.carol) == 0, sshkeys.sshd_log(work)
        assert login("alice", keys.stranger) == SSH_FAILED
        assert login("bob", keys.alice) == SSH_FAILED
        report = cached.cli("status").stdout
        assert re.search(r"SSH responder: \d+ connections, \d+ requests, [1-9]\d* keys", report)

        # A key removed in the directory works until alice's entry expires, then not.
        slapd.ldap_modify(
            f"dn: uid=alice,ou=people,{sshkeys.BASE}\nchangetype: modify\n"
            f"delete: sshPublicKey\nsshPublicKey:: {_b64(keys.alice2.public)}\n-\n"
            f"replace: sn\nsn: alice-changed\n"
        )
        assert login("alice", keys.alice2) == 0
        assert cached.cli("cache", "-u", "alice").returncode == 0
        assert login("alice", keys.alice2) == SSH_FAILED
        assert login("alice", keys.alice) == 0, sshkeys.sshd_log(work)

        # Served from the cache, expired, with the server stopped.
        assert cached.cli("cache", "-u", "alice").returncode == 0
        slapd.stop()
        try:
            assert login("alice", keys.alice) == 0, cached.log_tail()
            assert login("alice", keys.alice2) == SSH_FAILED
        finally:
            slapd.start()
    finally:
        cached.stop()
        slapd.ldap_modify(
            f"dn: uid=alice,ou=people,{sshkeys.BASE}\nchangetype: modify\n"
            f"add: sshPublicKey\nsshPublicKey:: {_b64(keys.alice2.public)}\n"
        )
