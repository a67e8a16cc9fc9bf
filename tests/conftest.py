"""Shared fixtures: generated directories and real slapd servers serving them.

Session-scoped, and started only when a test asks for them (pytest creates a fixture
on first use), so a run that needs no bigroupuser server pays nothing for it.

* ``small_2307bis`` / ``small_2307`` / ``big_2307bis`` / ``big_2307`` / ``small_cn`` /
  ``big_cn`` (people named ``cn=<full name>``, rfc2307bis): a generated scenario
  (:class:`testing.slapd.Dataset`: LDIF path + :class:`testing.gendir.Expected`).
* ``slapd_small`` / ``slapd_small_2307`` / ``slapd_big`` / ``slapd_big_2307`` /
  ``slapd_small_cn`` / ``slapd_big_cn``: a running
  slapd serving it (:class:`testing.slapd.LiveDirectory`: ``.slapd`` + ``.expected``).
  Shared by the whole session: read from them, do not change them.
* ``slapd_small_fresh``: a private small rfc2307bis server for one test, which may
  modify, pause or restart it.
* ``tls_files`` / ``slapd_small_tls``: a throwaway CA and server certificate, and a
  small rfc2307bis server that also listens on ldaps:// (StartTLS works on ldap://).

The Samba AD DCs, one per shape, each shared by every module that uses that shape
(provisioning a DC takes 5-10 s, joining a host to one 20-60 s); a test that changes
one creates its own objects with unique names or restores what it changed:

* ``ad``: the small AD directory (testing/addir.py) on a plain DC serving TLS, also
  where test_gpo_ad.py makes its GPOs and test_pam_ad.py its users with passwords;
* ``kerberos_dc``: the DC with its KDC and the host keytab (testing/adkrb.py);
  ``kdc``, per module, is it with ``KRB5_CONFIG`` naming its KDC for the module;
* ``joined_host``: a DC and a host joined to it with adcli (testing/adjoin.py),
  serving :func:`testing.adjoin.joined_directory`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testing import addc, addir, adjoin, adkrb
from testing.backend import close_clients
from testing.daemon import CachedDaemon
from testing.gendir import BIGROUPUSER, BIGROUPUSER_CN, SMALL, SMALL_CN, Scenario, generate
from testing.slapd import Dataset, LiveDirectory, Slapd, TLSFiles, make_tls_material

# -- the run on several workers (pytest-xdist: make test runs `pytest -n auto`) ----------

# The session fixtures too costly to make twice (each Samba DC takes 10-60 s to provision,
# load and join), and the modules that use each: one group apiece, run by one worker.
# pytest_collection_modifyitems below refuses a module that uses one and is not listed,
# as the scheduler (on xdist's controller, which collects nothing) sees only node ids.
_DC_FIXTURES = {"ad": "dc-ad", "kerberos_dc": "dc-krb5", "joined_host": "dc-joined"}
_DC_GROUPS = {
    "tests/integration/test_ad.py": "dc-ad",
    "tests/integration/test_addc.py": "dc-ad",
    "tests/integration/test_gpo_ad.py": "dc-ad",
    "tests/integration/test_hostile_sid.py": "dc-ad",
    "tests/integration/test_pam_ad.py": "dc-ad",
    "tests/integration/test_pam_krb5.py": "dc-krb5",
    "tests/integration/test_pam_krb5_sssd.py": "dc-krb5",
    "tests/integration/test_adaccess.py": "dc-joined",
    "tests/integration/test_adjoin.py": "dc-joined",
}
# The longest groups, handed out first so that none is left to end the run alone (their
# total time on a 2-worker run, under load: 150, 115, 95, 75, 70, 65, 65 s; the rest of
# the modules take under 50 s each).
_FIRST = (
    "tests/integration/test_pam_differential.py",
    "dc-krb5",
    "dc-joined",
    "tests/integration/test_refresh_ahead.py",
    "tests/integration/test_pam_access.py",
    "dc-ad",
    "tests/integration/test_faults.py",
)


def _group(module: str) -> str:
    """The unit of work of a module: its DC's group, else the module itself (its
    module-scoped fixtures are made once)."""
    return _DC_GROUPS.get(module, module)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker's base directory ``<basetemp>/popen-gwN`` as ``<basetemp>/gwN``
    (before pytest's tmpdir plugin reads it): six bytes more for the sockets tests make
    under their tmp_path, whose paths must fit in sun_path (108 bytes, unix(7))."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    basetemp = config.option.basetemp
    if worker and basetemp and Path(basetemp).name == f"popen-{worker}":
        config.option.basetemp = str(Path(basetemp).with_name(worker))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load-by-scope scheduling with :func:`_group` as the scope, in collection
    order (which pytest_collection_modifyitems makes :data:`_FIRST` first). xdist's own
    ``--dist loadgroup`` cannot carry the groups under pytest 9: it renames
    ``item._nodeid``, which pytest 9's nodes no longer read."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False
    return ByGroup(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """:data:`_FIRST` first (a stable sort: the order within a module stays); a module
    using a DC of :data:`_DC_FIXTURES` missing from :data:`_DC_GROUPS` is an error."""
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        for fixture, group in _DC_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and _DC_GROUPS.get(module) != group:
                raise pytest.UsageError(
                    f"{module} uses the fixture {fixture!r}: add it to _DC_GROUPS in "
                    f"tests/conftest.py as {group!r}, so that one worker runs the modules "
                    "sharing that DC"
                )
    rank = {group: n for n, group in enumerate(_FIRST)}
    items.sort(key=lambda item: rank.get(_group(item.nodeid.split("::", 1)[0]), len(rank)))


@pytest.fixture(autouse=True)
def _close_backend_clients() -> Iterator[None]:
    """The LDAP connections of the backends a test made (testing.backend) end with it."""
    yield
    close_clients()


def _dataset(scenario: Scenario, outdir: Path) -> Dataset:
    generated = generate(scenario, outdir)
    return Dataset(ldif=generated.ldif, expected=generated.expected())


def _serve(
    factory: pytest.TempPathFactory, name: str, data: Dataset, tls: TLSFiles | None = None
) -> Iterator[LiveDirectory]:
    # mktemp gives a unique, numbered directory whose path stays short enough for the
    # ldapi socket inside it (108 bytes, unix(7)).
    with Slapd(factory.mktemp(name), data.ldif, data.expected.base_dn, tls=tls) as server:
        yield LiveDirectory(slapd=server, expected=data.expected)


@pytest.fixture(scope="session")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gendir")


@pytest.fixture(scope="session")
def small_2307bis(gen_dir: Path) -> Dataset:
    return _dataset(SMALL.with_schema("rfc2307bis"), gen_dir)


@pytest.fixture(scope="session")
def small_2307(gen_dir: Path) -> Dataset:
    return _dataset(SMALL.with_schema("rfc2307"), gen_dir)


@pytest.fixture(scope="session")
def big_2307bis(gen_dir: Path) -> Dataset:
    return _dataset(BIGROUPUSER.with_schema("rfc2307bis"), gen_dir)


@pytest.fixture(scope="session")
def big_2307(gen_dir: Path) -> Dataset:
    return _dataset(BIGROUPUSER.with_schema("rfc2307"), gen_dir)


@pytest.fixture(scope="session")
def small_cn(gen_dir: Path) -> Dataset:
    return _dataset(SMALL_CN, gen_dir)


@pytest.fixture(scope="session")
def big_cn(gen_dir: Path) -> Dataset:
    return _dataset(BIGROUPUSER_CN, gen_dir)


@pytest.fixture(scope="session")
def slapd_small(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset
) -> Iterator[LiveDirectory]:
    yield from _serve(tmp_path_factory, "slapd_small", small_2307bis)


@pytest.fixture(scope="session")
def slapd_small_2307(
    tmp_path_factory: pytest.TempPathFactory, small_2307: Dataset
) -> Iterator[LiveDirectory]:
    yield from _serve(tmp_path_factory, "slapd_small_2307", small_2307)


@pytest.fixture(scope="session")
def slapd_big(
    tmp_path_factory: pytest.TempPathFactory, big_2307bis: Dataset
) -> Iterator[LiveDirectory]:
    yield from _serve(tmp_path_factory, "slapd_big", big_2307bis)


@pytest.fixture(scope="session")
def slapd_big_2307(
    tmp_path_factory: pytest.TempPathFactory, big_2307: Dataset
) -> Iterator[LiveDirectory]:
    yield from _serve(tmp_path_factory, "slapd_big_2307", big_2307)


@pytest.fixture(scope="session")
def slapd_small_cn(
    tmp_path_factory: pytest.TempPathFactory, small_cn: Dataset
) -> Iterator[LiveDirectory]:
    yield from _serve(tmp_path_factory, "slapd_small_cn", small_cn)


@pytest.fixture(scope="session")
def slapd_big_cn(
    tmp_path_factory: pytest.TempPathFactory, big_cn: Dataset
) -> Iterator[LiveDirectory]:
    yield from _serve(tmp_path_factory, "slapd_big_cn", big_cn)


@pytest.fixture
def slapd_small_fresh(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset
) -> Iterator[LiveDirectory]:
    """A private server (~0.1 s to set up) for a test that changes, pauses or restarts it."""
    yield from _serve(tmp_path_factory, "slapd_fresh", small_2307bis)


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def slapd_small_tls(
    tmp_path_factory: pytest.TempPathFactory, small_2307bis: Dataset, tls_files: TLSFiles
) -> Iterator[LiveDirectory]:
    yield from _serve(tmp_path_factory, "slapd_tls", small_2307bis, tls=tls_files)


# -- cached daemons ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def cached_small(
    tmp_path_factory: pytest.TempPathFactory, slapd_small: LiveDirectory
) -> Iterator[CachedDaemon]:
    """`cached serve` on the small directory, shared by the session: read only."""
    s = slapd_small.slapd
    with CachedDaemon(tmp_path_factory.mktemp("cached_small"), [s.uri], s.base_dn) as d:
        yield d


@pytest.fixture(scope="session")
def cached_big(
    tmp_path_factory: pytest.TempPathFactory, slapd_big: LiveDirectory
) -> Iterator[CachedDaemon]:
    """`cached serve` on the bigroupuser directory, shared by the session: read only."""
    s = slapd_big.slapd
    with CachedDaemon(tmp_path_factory.mktemp("cached_big"), [s.uri], s.base_dn) as d:
        yield d


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Callable[..., CachedDaemon]]:
    """Start private daemons for one test (faults, options); all stopped after it.
    ``uris``: the servers it is given instead of the directory's own (a fault proxy
    in front of it, a dead address first)."""
    started: list[CachedDaemon] = []

    def make(directory: LiveDirectory, uris: list[str] | None = None, **opts: Any) -> CachedDaemon:
        s = directory.slapd
        uris = [s.uri] if uris is None else uris
        d = CachedDaemon(tmp_path / f"cached{len(started)}", uris, s.base_dn, **opts)
        started.append(d)
        d.start()
        return d

    yield make
    for d in started:
        d.stop()


@pytest.fixture(scope="session")
def ad(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[addc.SambaDC, addir.ADDirectory]]:
    """A real Samba AD DC serving the small AD directory (testing/addir.py), one per run:
    provisioning and loading take 10-20 s. It serves ldaps and StartTLS with a throwaway
    CA's certificate for localhost (``dc.tls``). Tests that write to it add objects of
    their own and delete them (test_ad.py's scratch groups, test_gpo_ad.py's OUs and
    GPOs, test_pam_ad.py's users and lockout threshold)."""
    missing = addc.available()
    assert missing is None, missing
    # A short path: <dir>/private/ldapi must fit in sun_path.
    work = Path(tmp_path_factory.mktemp("ad", numbered=True))
    dc = addc.SambaDC(work / "dc")
    data = addir.small()
    dc.provision()
    dc.serve_tls(make_tls_material(work / "tls"))
    dc.load(data.entries, modify=data.modify)
    with dc:
        yield dc, data


@pytest.fixture(scope="session")
def kerberos_dc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[adkrb.KerberosDC]:
    """The DC with its KDC, its users and the host's keytab (testing/adkrb.py), one per
    run. A test that changes a user's password or state restores it; one that stops
    the DC starts it again."""
    work = Path(tmp_path_factory.mktemp("krb5", numbered=True))
    with adkrb.kerberos_dc(work) as k:
        yield k


@pytest.fixture(scope="module")
def kdc(kerberos_dc: adkrb.KerberosDC) -> Iterator[adkrb.KerberosDC]:
    """:func:`kerberos_dc`, with ``KRB5_CONFIG`` naming its KDC while the module runs:
    the daemons started there inherit it (CachedDaemon passes this environment);
    modules after it see the machine's own krb5.conf again."""
    old = os.environ.get("KRB5_CONFIG")
    os.environ["KRB5_CONFIG"] = str(kerberos_dc.krb5_conf)
    try:
        yield kerberos_dc
    finally:
        if old is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = old


@pytest.fixture(scope="session")
def joined_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[adjoin.JoinedHost]:
    """A DC and a host joined to it (testing/adjoin.py), one per run: provisioning,
    loading and joining take 20-60 s. Tests that change the DC restore it (a GPO
    linked by a fixture is unlinked when its module ends)."""
    # A short path: the DC's <dir>/private/ldapi must fit in sun_path.
    work = tmp_path_factory.mktemp("adj", numbered=True)
    with adjoin.JoinedHost(work, adjoin.joined_directory(), smb=True) as h:
        yield h
