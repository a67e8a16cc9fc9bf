"""cached against the oracle: cases of the PAM matrix through SSSD 2.8.2 and through
cached with the same sssd.conf, compared PAM call by PAM call (return codes and
conversation texts), as ``python -m testing.pamcompat`` does for the whole matrix.

Skipped, with the reason, while cached has no PAM responder (it starts without the PAM
sockets); a difference listed in :data:`testing.pamcompat.DELIBERATE` is accepted. The
frozen-server case is left to the differential's report: over ldaps SSSD waits about
90 s there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testing import pamcompat, pamenv, pammatrix

_SKIP = pamenv.skip_reason() or pammatrix.SssdPam().skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

CASES = [(c.name, t) for c in pammatrix.CASES if c.name != "frozen" for t in c.transports]


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pammatrix.MatrixDirectory]:
    with pammatrix.MatrixDirectory(tmp_path_factory.mktemp("pamdiff")) as d:
        yield d


@pytest.fixture(scope="module")
def cached_pam_missing(
    directory: pammatrix.MatrixDirectory, tmp_path_factory: pytest.TempPathFactory
) -> str | None:
    """Why cached cannot run PAM cases here (checked once), or None."""
    probe = pammatrix.run_case(pammatrix.CachedPam(), directory, pammatrix.cases(["right"])[0],
                               "ldaps", tmp_path_factory.mktemp("probe"))  # fmt: skip
    return probe.skipped


@pytest.mark.parametrize(("name", "transport"), CASES)
def test_cached_answers_as_sssd(
    directory: pammatrix.MatrixDirectory,
    cached_pam_missing: str | None,
    tmp_path: Path,
    name: str,
    transport: str,
) -> None:
    case = pammatrix.cases([name])[0]
    if cached_pam_missing is not None:
        pytest.skip(cached_pam_missing)
    got = {
        kind.name: pammatrix.run_case(kind, directory, case, transport, tmp_path / kind.name)
        for kind in (pammatrix.SssdPam(), pammatrix.CachedPam())
    }
    for r in got.values():
        assert r.error is None, r.error
    if got["cached"].skipped is not None:
        pytest.skip(got["cached"].skipped)
    if name in pamcompat.DELIBERATE:
        return
    assert got["cached"].key() == got["sssd"].key(), (got["sssd"].steps, got["cached"].steps)
