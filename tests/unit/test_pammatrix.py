"""The PAM matrix's pure parts: the case list, date normalization, the runner's skipping
of a daemon without PAM, and the differential's verdicts (testing/pammatrix.py,
testing/pamcompat.py). The runs themselves are tests/integration/test_pam_sssd_oracle.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from testing import pamcompat, pammatrix


def test_case_names_are_unique_and_transports_known() -> None:
    names = [c.name for c in pammatrix.CASES]
    assert len(names) == len(set(names))
    for case in pammatrix.CASES:
        assert set(case.transports) <= set(pammatrix.TRANSPORTS), case.name
        assert any(isinstance(s, pammatrix.Login) for s in case.steps), case.name


def test_unknown_case_names_are_refused() -> None:
    with pytest.raises(KeyError, match="nosuch"):
        pammatrix.cases(["right", "nosuch"])
    assert [c.name for c in pammatrix.cases(["plain", "right"])] == ["plain", "right"]


def test_dates_in_conversation_texts_are_normalized() -> None:
    text = "Authentication is denied until: Mon Dec  7 05:09:04 2026."
    assert pammatrix.normalize(text) == "Authentication is denied until: <date>."
    assert pammatrix.normalize("Tue Jan 13 11:00:00 2027, then") == "<date>, then"
    assert pammatrix.normalize("Authenticated with cached credentials.") == (
        "Authenticated with cached credentials."
    )


class _NoPam:
    """A daemon whose start says it has no PAM responder (cached before the responder)."""

    pipes_dir = Path("/nonexistent")
    mc_dir = Path("/nonexistent")

    def start(self) -> None:
        raise pammatrix.Unsupported("no pipes/pam socket after start")

    def stop(self) -> None:
        pass

    def age(self, user: str, attribute: str, seconds: int) -> None:
        raise AssertionError("not reached")

    def log_tail(self, lines: int = 40) -> str:
        return ""


class _Kind:
    name = "fake"
    title = "fake"

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason
        self.made = 0

    def skip_reason(self) -> str | None:
        return self.reason

    def make(self, workdir: Path, config: pammatrix.PamConfig) -> pammatrix.PamDaemon:
        self.made += 1
        return _NoPam()


class _Directory:
    def options(self, transport: str) -> dict[str, Any]:
        return {"ldap_uri": f"{transport}://example"}

    def reset(self) -> None:
        pass


def test_a_daemon_without_pam_is_started_once_and_every_case_skipped(tmp_path: Path) -> None:
    kind = _Kind()
    results = pammatrix.run_matrix(kind, cast(Any, _Directory()), tmp_path)
    assert kind.made == 1
    assert len(results) == sum(len(c.transports) for c in pammatrix.CASES)
    assert {r.skipped for r in results} == {"no pipes/pam socket after start"}
    assert all(r.key() is None for r in results)


def test_a_daemon_that_cannot_run_is_never_made(tmp_path: Path) -> None:
    kind = _Kind("SSSD is not installed")
    results = pammatrix.run_matrix(kind, cast(Any, _Directory()), tmp_path, transports=["plain"])
    assert kind.made == 0
    assert [(r.case, r.skipped) for r in results] == [("plain", "SSSD is not installed")]


def _result(case: str, codes: list[int], seconds: float = 0.1, bound: float | None = None,
            skipped: str | None = None) -> dict[str, Any]:  # fmt: skip
    steps = [{"label": "alice", "calls": [["authenticate", rc, []] for rc in codes],
              "seconds": seconds, "bound": bound}]  # fmt: skip
    return {"case": case, "transport": "ldaps", "daemon": "x", "steps": [] if skipped else steps,
            "skipped": skipped, "error": None}  # fmt: skip


def _meta() -> dict[str, Any]:
    return {"date": "d", "command": "c", "environment": {}, "options": {}}


def test_report_verdicts() -> None:
    results = {
        "sssd": [_result("right", [0]), _result("wrong", [7]), _result("plain", [6])],
        "cached": [
            _result("right", [0]),
            _result("wrong", [9]),
            _result("plain", [], skipped="no PAM responder"),
        ],
    }
    text = pamcompat.report(results, _meta())
    rows = {line.split(":", 1)[0]: line for line in text.splitlines() if line.startswith("| `")}
    assert rows["| `right`"].endswith("| ✓ |")
    assert rows["| `wrong`"].endswith("| **differs** |")
    assert rows["| `plain`"].endswith("| — |")
    assert "Equal: 1; different: 1; not compared (skipped or failed): 1." in text
    assert "**cached skipped:** no PAM responder" in text


def test_report_flags_a_login_over_its_bound() -> None:
    results = {"sssd": [_result("frozen", [9], seconds=90.0, bound=19.0)], "cached": []}
    assert "over the 19 s bound" in pamcompat.report(results, _meta())
    results = {"sssd": [_result("frozen", [0], seconds=3.2, bound=19.0)], "cached": []}
    assert "over the" not in pamcompat.report(results, _meta())
