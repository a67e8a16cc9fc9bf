"""cached starts on the state directories Debian's sssd-common leaves on a host where
SSSD was installed (the hosts to migrate), and libnss_sss answers from them.

The layout is what sssd-common 2.8.2-4+deb12u1 creates: its data.tar ships
/var/lib/sss/{db,mc,pipes,pipes/private} as 0755 root:root, and its postinst
(``configure``) runs ``chown -R root:root`` on them, then ``chmod 700 db``,
``chmod 775 mc``, ``chmod 755 pipes``, ``chmod 750 pipes/private``. The tree is built
the same way under a temporary root, and the configuration points into it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from testing.checks import SOCKET_ONLY
from testing.marks import requires_nss

pytestmark = [
    requires_nss,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the layout is root:root"),
]

# sssd-common's postinst, in its order: (directory under /var/lib/sss, mode).
SSSD_COMMON = (("db", 0o700), ("mc", 0o775), ("pipes", 0o755), ("pipes/private", 0o750))


def _sssd_common_layout(root: Path) -> Path:
    sss = root / "var" / "lib" / "sss"
    sss.mkdir(parents=True)
    for name, _ in SSSD_COMMON:
        (sss / name).mkdir(mode=0o755)  # as unpacked from the package
    for path in (sss, *(sss / name for name, _ in SSSD_COMMON)):
        os.chown(path, 0, 0)
    for name, mode in SSSD_COMMON:
        os.chmod(sss / name, mode)
    return sss


def test_cached_serves_on_debians_sssd_common_layout(
    daemon_factory, slapd_small, tmp_path_factory
):
    # A short root: <root>/var/lib/sss/pipes/private/be_LDAP must fit in sun_path
    # (108 bytes, unix(7)), which the test's own tmp_path name leaves too little of.
    sss = _sssd_common_layout(tmp_path_factory.mktemp("deb"))
    exp = slapd_small.expected
    d = daemon_factory(slapd_small, daemon={
        "db_dir": sss / "db", "pipes_dir": sss / "pipes", "mc_dir": sss / "mc"})  # fmt: skip
    assert d.mc_dir == sss / "mc" and d.pipes_dir == sss / "pipes"
    user = exp.big_user
    for env in (SOCKET_ONLY, None):
        r = d.run_nss(["getent", "passwd", user], env=env)
        assert r.returncode == 0 and r.stdout.startswith(f"{user}:"), r.stderr
    assert (sss / "mc" / "passwd").is_file()
    assert (sss / "pipes" / "nss").exists()
    # The package's modes are left as they were: SSSD, reinstalled, finds its layout.
    modes = {name: stat.S_IMODE((sss / name).stat().st_mode) for name, _ in SSSD_COMMON}
    assert modes == dict(SSSD_COMMON)
