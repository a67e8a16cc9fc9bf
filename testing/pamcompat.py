"""``make compat`` for PAM: the matrix of :mod:`testing.pammatrix` through real SSSD 2.8.2
and through cached, compared call by call.

Both daemons get the same sssd.conf options (``services = nss, pam``, ``id_provider =
ldap``, ``auth_provider = ldap``, ``cache_credentials = true``, the TLS settings of each
transport) and answer the real ``pam_sss.so`` driven by :mod:`testing.pamdriver` in a
private mount namespace, against one slapd behind fault proxies. A case's answer is, per
login, each PAM call's return code and the conversation texts (dates replaced by
``<date>``); two answers are equal when all of those are.

cached's side is skipped, with the reason in the report, while cached has no PAM
responder (it refuses ``services = nss, pam`` or starts without ``pipes/pam``); it runs
with no change here once the responder exists.

Writes ``results.json`` and ``report.md`` into ``perf/results/<date>-pam-compat/`` (or
``--out``). ``--render DIR`` rewrites ``report.md`` from a ``results.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from testing import install, pamenv, pammatrix, sssd
from testing.daemon import REPO

RESULTS_DIR = REPO / "perf" / "results"
KINDS: tuple[pammatrix.PamDaemonKind, ...] = (pammatrix.SssdPam(), pammatrix.CachedPam())
PACKAGES = (*sssd.PACKAGES, "ldb-tools")

#: Differences from SSSD that cached makes on purpose, by case name: why (and where
#: docs/compatibility.md says so). A difference not listed here is a bug to fix.
DELIBERATE: dict[str, str] = {
    "passwd-server-gone": (
        "The server stopped after the last login, and the password change is the first "
        "request since: cached finds no server for the old password's bind and answers "
        "as offline (20, `System is offline, password change not possible`), as both "
        "daemons answer once they know they are offline (`passwd-offline`); SSSD 2.8.2 "
        "answers 4 (PAM_SYSTEM_ERR) without a message (docs/compatibility.md §9.8, "
        "\"Password changes\")."
    ),
    "frozen": (
        "Over ldaps a frozen server costs cached's login its `ldap_network_timeout` and "
        "`ldap_opt_timeout` (the TLS handshake runs under the latter), then the cached "
        "hash decides; SSSD 2.8.2's backend blocks in the handshake, which no LDAP "
        "timeout bounds, until its watchdog restarts it, and answers 9 after about 90 s "
        "(docs/compatibility.md §9.8, \"A hung or slow server\")."
    ),
}

#: What SSSD 2.8.2's answers show, by case, where it is not what one would guess.
#: Measured on the runs of this module (debug_level 6 logs of sssd_be).
SSSD_NOTES: dict[str, str] = {
    "plain": (
        "SSSD's authentication connection runs StartTLS on an `ldap://` URI even with "
        "`ldap_id_use_start_tls = false`. Against a server without TLS the StartTLS fails "
        "(`unsupported extended operation`), the backend goes offline and the login is "
        "decided by cached credentials: none yet, so 6 (PAM_PERM_DENIED). No password is "
        "sent unencrypted."
    ),
    "frozen": (
        "The fault proxy accepts the TCP connection and forwards nothing. Over StartTLS "
        "the operation times out after `ldap_opt_timeout` (3 s here), the backend goes "
        "offline and the cached hash decides: 0. Over ldaps sssd_be blocks in the TLS "
        "handshake, which neither `ldap_network_timeout` (connect) nor `ldap_opt_timeout` "
        "bounds; its watchdog kills it about every 30 s (`terminated by own WATCHDOG`), "
        "the restarted backend connects again and blocks again, and after about 90 s the "
        "PAM responder answers 9 (PAM_AUTHINFO_UNAVAIL, `SSSD is offline`); the next "
        "login, during a restart, got 4 (PAM_SYSTEM_ERR). Measured with debug_level 6."
    ),
    "offline-right": (
        "`pam_verbosity = 1` (the default) hides `OFFLINE_AUTH` when the cached password "
        "never expires: the login succeeds without a message."
    ),
    "offline-no-hash": "A cached user without a cached hash gets 6 (PAM_PERM_DENIED).",
    "offline-delay": (
        "After `offline_failed_login_attempts` failures the right password gets 6 and "
        "`Authentication is denied until: <date>.`; once `lastFailedLogin` is older than "
        "the delay it succeeds (the counter resets)."
    ),
}


def _run_all(workdir: Path, selected: list[pammatrix.Case], transports: list[str]
             ) -> dict[str, list[pammatrix.CaseResult]]:  # fmt: skip
    out: dict[str, list[pammatrix.CaseResult]] = {}
    with pammatrix.MatrixDirectory(workdir / "directory") as directory:
        for kind in KINDS:
            print(f"pamcompat: {kind.title} …", file=sys.stderr, flush=True)
            out[kind.name] = pammatrix.run_matrix(kind, directory, workdir, selected,
                                                  transports)  # fmt: skip
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "(not run)"
    if r.get("skipped"):
        return "skipped"
    if r.get("error"):
        return "error: " + _md(r["error"].splitlines()[0])
    parts = []
    for step in r["steps"]:
        calls = ", ".join(
            f"{op} → {rc}" + (f" «{' / '.join(msgs)}»" if msgs else "")
            for op, rc, msgs in step["calls"]
        )
        bound = step.get("bound")
        over = bound is not None and step["seconds"] > bound
        parts.append(
            _md(calls) + f" ({step['seconds']:.1f} s"
            + (f", **over the {bound:g} s bound**" if over else "") + ")"
        )  # fmt: skip
    return "<br>".join(parts)


def _key(r: dict[str, Any] | None) -> Any:
    if r is None or r.get("skipped") or r.get("error"):
        return None
    return [[[op, rc, msgs] for op, rc, msgs in s["calls"]] for s in r["steps"]]


def report(results: dict[str, list[dict[str, Any]]], meta: dict[str, Any]) -> str:
    by = {kind: {(r["case"], r["transport"]): r for r in rs} for kind, rs in results.items()}
    titles = {c.name: c for c in pammatrix.CASES}
    lines = [
        "# make compat: the PAM matrix through SSSD 2.8.2 and cached",
        "",
        f"Generated {meta['date']} by `{meta['command']}` (testing/pamcompat.py).",
        "",
        "## Environment",
        "",
        *(f"- {k}: {v}" for k, v in meta["environment"].items()),
        "",
        "## What was run",
        "",
        "Each case of `testing/pammatrix.py`, over each of its transports (ldaps; "
        "`ldap://` with StartTLS; `ldap://` to a server without TLS), through a daemon "
        "started fresh for it with the same sssd.conf options "
        f"(`{', '.join(f'{k} = {v}' for k, v in meta['options'].items())}`), the "
        "transport's TLS options and the case's `[pam]` options. Logins are the real "
        "`pam_sss.so` (Debian's libpam-sss) under `testing/pamdriver.py` in a private mount "
        "namespace, as root (private socket) or uid 65534 (public socket). A cell lists, "
        "per login of the case, each PAM call's return code and the conversation texts "
        "(`<date>` for dates), and the login's wall time; a login with the server frozen "
        f"may take at most {pammatrix.FROZEN_BOUND} s (three network timeouts and slack), "
        "and the cell says when it took longer. Times are not compared.",
        "",
    ]
    cached_skips = {r.get("skipped") for r in results.get("cached", []) if r.get("skipped")}
    if cached_skips:
        lines += ["**cached skipped:** " + "; ".join(sorted(s for s in cached_skips if s)), ""]
    equal = differ = skipped = 0
    lines += ["| case | transport | steps | SSSD | cached | equal? |", "|---|---|---|---|---|---|"]
    for kind_results in [results["sssd"]]:
        for r in kind_results:
            key = (r["case"], r["transport"])
            s, c = by["sssd"].get(key), by.get("cached", {}).get(key)
            ks, kc = _key(s), _key(c)
            if ks is None or kc is None:
                verdict = "—"
                skipped += 1
            elif ks == kc:
                verdict = "✓"
                equal += 1
            elif r["case"] in DELIBERATE:
                verdict = "deliberate (below)"
                differ += 1
            else:
                verdict = "**differs**"
                differ += 1
            case = titles.get(r["case"])
            steps = "<br>".join(_md(st["label"]) for st in (s or {}).get("steps", []))
            lines.append(
                f"| `{r['case']}`: {_md(case.title if case else '')} | {r['transport']} | "
                f"{steps} | {_cell(s)} | {_cell(c)} | {verdict} |"
            )
    lines += [
        "",
        f"Equal: {equal}; different: {differ}; not compared (skipped or failed): {skipped}.",
        "",
        "## Deliberate differences",
        "",
        *(f"- `{name}`: {text}" for name, text in DELIBERATE.items()),
        *([] if DELIBERATE else ["None so far."]),
        "",
        "## Notes on SSSD's answers",
        "",
        *(f"- `{name}`: {text}" for name, text in SSSD_NOTES.items()),
        "",
    ]
    if meta.get("install_log"):
        lines += ["## Installation", "", *(f"- {x}" for x in meta["install_log"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testing.pamcompat", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    p.add_argument("--transports", default=",".join(pammatrix.TRANSPORTS))
    p.add_argument("--out", type=Path, help="result directory")
    p.add_argument("--render", type=Path, help="only rewrite report.md of this directory")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args(argv)
    if args.render:
        data = json.loads((args.render / "results.json").read_text())
        (args.render / "report.md").write_text(report(data["results"], data["meta"]))
        print(args.render / "report.md")
        return 0
    reason = pamenv.skip_reason()
    if reason:
        print(f"testing.pamcompat: cannot run PAM clients: {reason}", file=sys.stderr)
        return 2
    log: list[str] = []
    try:
        install.ensure_packages(PACKAGES, ("sssd",), log)
    except install.InstallError as e:
        print(f"testing.pamcompat: {e}", file=sys.stderr)
        return 2
    try:
        selected = pammatrix.cases([c for c in args.cases.split(",") if c.strip()])
    except KeyError as e:
        print(f"testing.pamcompat: {e.args[0]}", file=sys.stderr)
        return 2
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    bad = set(transports) - set(pammatrix.TRANSPORTS)
    if bad:
        print(f"testing.pamcompat: unknown transports {sorted(bad)}", file=sys.stderr)
        return 2
    now = dt.datetime.now(dt.UTC)
    out = args.out or RESULTS_DIR / f"{now:%Y-%m-%d}-pam-compat"
    workdir = Path(tempfile.mkdtemp(prefix="pamcompat-"))  # short: socket paths
    try:
        results = _run_all(workdir, selected, transports)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    meta = {
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python -m testing.pamcompat", *(argv or sys.argv[1:])]),
        "environment": {
            "SSSD": f"{sssd.SssdDaemon.version()} (Debian {install.package_version('sssd-ldap')})",
            "libpam-sss": install.package_version("libpam-sss"),
            "slapd": install.package_version("slapd"),
            "kernel": platform.release(),
        },
        "options": {k: v for k, v in pammatrix.base_domain_options().items()},
        "install_log": log,
    }
    data = {
        "meta": meta,
        "results": {k: [dataclasses.asdict(r) for r in rs] for k, rs in results.items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "report.md").write_text(report(data["results"], meta))
    print(out / "report.md")
    errors = [r for rs in results.values() for r in rs if r.error]
    for r in errors:
        print(f"testing.pamcompat: {r.daemon} {r.case}/{r.transport}: {r.error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
