"""cached against the oracle: cases of the PAM matrix through SSSD 2.8.2 and through
cached with the same sssd.conf, compared PAM call by PAM call (return codes and
conversation texts), as ``python -m testing.pamcompat`` does for the whole matrix.

Skipped, with the reason, while cached has no PAM responder (it starts without the PAM
sockets); a difference listed in :data:`testing.pamcompat.DELIBERATE` is accepted. The
frozen-server case is left to the differential's report: over ldaps SSSD waits about
90 s there.

The two daemons of a case run at the same time, each against a directory of its own
(slapd and fault proxies: a case stops, freezes and changes its directory): a case
costs the slower daemon's start, steps and stop rather than the sum of both, and the
test process, which otherwise waits on one daemon at a time, keeps both cores busy.
Each daemon is still started fresh for each case, so the cases stay independent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testing import pamcompat, pamenv, pammatrix

_SKIP = pamenv.skip_reason() or pammatrix.SssdPam().skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

CASES = [(c.name, t) for c in pammatrix.CASES if c.name != "frozen" for t in c.transports]
KINDS: tuple[pammatrix.PamDaemonKind, ...] = (pammatrix.SssdPam(), pammatrix.CachedPam())


@pytest.fixture(scope="module")
def directories(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, pammatrix.MatrixDirectory]]:
    """One matrix directory per daemon kind, by its name."""
    with contextlib.ExitStack() as stack:
        yield {
            kind.name: stack.enter_context(
                pammatrix.MatrixDirectory(tmp_path_factory.mktemp(f"pamdiff-{kind.name}"))
            )
            for kind in KINDS
        }


@pytest.fixture(scope="module")
def cached_pam_missing(
    directories: dict[str, pammatrix.MatrixDirectory], tmp_path_factory: pytest.TempPathFactory
) -> str | None:
    """Why cached cannot run PAM cases here (checked once), or None."""
    probe = pammatrix.run_case(pammatrix.CachedPam(), directories["cached"],
                               pammatrix.cases(["right"])[0], "ldaps",
                               tmp_path_factory.mktemp("probe"))  # fmt: skip
    return probe.skipped


@pytest.mark.parametrize(("name", "transport"), CASES)
def test_cached_answers_as_sssd(
    directories: dict[str, pammatrix.MatrixDirectory],
    cached_pam_missing: str | None,
    tmp_path: Path,
    name: str,
    transport: str,
) -> None:
    case = pammatrix.cases([name])[0]
    if cached_pam_missing is not None:
        pytest.skip(cached_pam_missing)
    with ThreadPoolExecutor(len(KINDS)) as pool:
        running = {
            kind.name: pool.submit(
                pammatrix.run_case, kind, directories[kind.name], case, transport,
                tmp_path / kind.name,
            )
            for kind in KINDS
        }
        got = {kind: future.result() for kind, future in running.items()}
    for r in got.values():
        assert r.error is None, r.error
    if got["cached"].skipped is not None:
        pytest.skip(got["cached"].skipped)
    if name in pamcompat.DELIBERATE:
        return
    assert got["cached"].key() == got["sssd"].key(), (got["sssd"].steps, got["cached"].steps)
