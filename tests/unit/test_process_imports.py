"""What each daemon process loads, in a fresh interpreter: the modules of the NSS
responder and of a plain LDAP domain's backend leave out the heavy libraries only some
configurations use. Every cached host runs a monitor, a backend per domain and a
responder, so what one of them imports for nothing is paid once per host (a fleet of
hosts on one machine, a container per host): gssapi and libkrb5 (a GSSAPI bind,
Kerberos logins), dnspython (``_srv_`` discovery), the AD provider's modules and
smbprotocol (GPOs), dbus-next (the InfoPipe) are imported where those are configured
(measured on one host after a cold ``id bigroupuser``: the backend's RSS 68 MiB with
them, 54 MiB without)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
# Top-level packages no NSS responder needs; the responder never talks LDAP (ldap3).
HEAVY: Final = ("ldap3", "gssapi", "krb5", "dbus_next", "smbprotocol", "spnego", "dns")
CONFIG: Final = """[cached]
domains = LDAP
services = nss
pipes_dir = {d}/pipes
mc_dir = {d}/mc
db_dir = {d}/db
pid_file = {d}/cached.pid
dbus_address = none
[nss]
[domain/LDAP]
id_provider = ldap
ldap_uri = ldap://127.0.0.1:1
ldap_search_base = dc=x
"""


def _loaded(code: str) -> set[str]:
    """The top-level packages in ``sys.modules`` after ``code``, run in a new
    interpreter as the daemon's processes start (``python -m cached``)."""
    script = f"import cached.cli\n{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
        timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return {m.split(".")[0] for m in json.loads(out.stdout.splitlines()[-1])}


def test_the_check_sees_a_heavy_import() -> None:
    assert {"gssapi", "ldap3"} <= _loaded("import cached.ldap.kerberos, cached.ldap.connection")


def test_the_nss_responder_imports_no_directory_or_kerberos_library() -> None:
    # cli.cmd_responder's import; PAM, SSH, sudo and the InfoPipe are imported by
    # run_responder only when their service is configured.
    loaded = _loaded("import cached.responder.main, cached.nss.server")
    assert sorted(loaded & set(HEAVY)) == []


def test_an_ldap_backend_imports_ldap3_and_nothing_of_kerberos_dns_or_ad(tmp_path: Path) -> None:
    (tmp_path / "db").mkdir()
    conf = tmp_path / "cached.conf"
    conf.write_text(CONFIG.format(d=tmp_path))
    loaded = _loaded(
        "from cached.config import load_config\n"
        "from cached.ldap.service import BackendService\n"
        f"cfg = load_config({str(conf)!r})\n"
        "service = BackendService(cfg, cfg.domains[0])\n"
        "service.cache.close()"
    )
    assert "ldap3" in loaded
    assert sorted(loaded & set(HEAVY) - {"ldap3"}) == []
