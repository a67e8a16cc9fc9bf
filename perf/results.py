"""What a perf run measured, as plain dataclasses saved to (and read from) ``results.json``.

The report (:mod:`perf.report`) is made from this file alone, so it can be re-rendered
(``python -m perf.report DIR``) without measuring again.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1

# Steps in report order: id, label. "{user}" and "{group}" are filled in per scenario.
STEPS: dict[str, str] = {
    "id_cold": "cold `id {user}` (empty cache)",
    "id_warm_socket": "warm `id {user}`, socket only (`SSS_NSS_USE_MEMCACHE=NO`)",
    "id_warm_mc": "warm `id {user}`, memory cache allowed",
    "invalidate": "`{inval}` alone",
    "id_after_inval": "`id {user}` after `-E` (server unchanged)",
    "id_after_inval_1changed": "`id {user}` after `-E`, one group changed on the server",
    "initgr_cold": "cold `getent initgroups {user}`",
    "group_cold": "cold `getent group {group}`",
    "group_warm_socket": "warm `getent group {group}`, socket only",
    "group_warm_mc": "warm `getent group {group}`, memory cache allowed",
}


@dataclass
class Sample:
    """One measured execution of a step."""

    wall: float  # seconds, spawn to exit of the client command (perf.timecmd)
    client_cpu: float = 0.0  # the client command's own CPU (wait4 rusage)
    daemon_cpu: dict[str, float] = field(default_factory=dict)  # per daemon process
    slapd_cpu: float = 0.0
    host_busy: float = 0.0  # CPU-seconds all processes on the host used meanwhile
    searches_daemon: int | None = None  # the daemon's own count (cached: ldap.search)
    searches_slapd: int = 0  # logical searches in slapd's stats log (pages once)
    search_ops: int = 0  # search operations (every page) in slapd's log
    entries: int = 0  # entries slapd returned
    slapd_etime: float = 0.0  # sum of slapd's etime over those operations
    counters: dict[str, list[float]] | None = None  # cached: counter diff of the step
    ok: bool = True  # the answer matched the generator's expected answer
    note: str = ""
    waited: float = 0.0  # seconds waited for a quiet host before the step
    search_shapes: dict[str, int] = field(default_factory=dict)  # see steps.search_shape
    # Cores that processes other than ours used on average during the step (other
    # engineers' test runs on this shared machine); see steps.measure.
    other_load: float = 0.0
    # Seconds of steps.speed_probe's fixed work just before the step (0: not taken).
    probe: float = 0.0

    @property
    def daemon_cpu_total(self) -> float:
        return sum(self.daemon_cpu.values())


@dataclass
class StepRun:
    target: str  # "cached", "sssd", "nslcd"
    scenario: str
    step: str  # key of STEPS
    samples: list[Sample] = field(default_factory=list)
    na: str = ""  # why the step could not be measured ("n/a: ...")

    @property
    def good(self) -> list[Sample]:
        """The samples whose answer was right: a fast wrong answer is not a time."""
        return [s for s in self.samples if s.ok]

    @property
    def wrong(self) -> int:
        return sum(1 for s in self.samples if not s.ok)

    def values(self, attr: str = "wall") -> list[float]:
        return [float(getattr(s, attr)) for s in self.good]

    def stats(self, attr: str = "wall") -> Stats | None:
        vals = self.values(attr)
        return Stats.of(vals) if vals else None

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.samples)


@dataclass(frozen=True)
class Stats:
    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        return cls(statistics.median(values), min(values), max(values), len(values))


@dataclass
class ScenarioInfo:
    name: str
    user_groups: int
    large_size: int
    users: int
    groups: int
    big_user: str
    large_group: str
    expected_gids: int  # the big user's gids at the nesting level used
    expected_members: int  # members of the large group at that level
    ldif_bytes: int = 0
    slapd_db_bytes: int = 0
    same_as: str = ""  # a sweep point whose directory is another scenario's


@dataclass
class Results:
    meta: dict[str, Any] = field(default_factory=dict)
    scenarios: dict[str, ScenarioInfo] = field(default_factory=dict)
    steps: list[StepRun] = field(default_factory=list)
    # target -> scenario -> file -> [apparent, allocated] bytes
    stores: dict[str, dict[str, dict[str, list[int]]]] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)  # target -> config text
    notes: list[str] = field(default_factory=list)

    def step(self, target: str, scenario: str, step: str) -> StepRun | None:
        for s in self.steps:
            if (s.target, s.scenario, s.step) == (target, scenario, step):
                return s
        return None

    def get_or_add(self, target: str, scenario: str, step: str) -> StepRun:
        found = self.step(target, scenario, step)
        if found is None:
            found = StepRun(target, scenario, step)
            self.steps.append(found)
        return found

    def targets(self) -> list[str]:
        seen: dict[str, None] = {}
        for s in self.steps:
            seen.setdefault(s.target, None)
        return list(seen)

    def save(self, path: Path) -> None:
        data = {"format": FORMAT, **asdict(self)}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=False))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Results:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: results format {data.get('format')!r} is not {FORMAT}")
        return cls(
            meta=data["meta"],
            scenarios={k: ScenarioInfo(**v) for k, v in data["scenarios"].items()},
            steps=[
                StepRun(
                    target=s["target"],
                    scenario=s["scenario"],
                    step=s["step"],
                    samples=[Sample(**x) for x in s["samples"]],
                    na=s["na"],
                )
                for s in data["steps"]
            ],
            stores=data["stores"],
            configs=data["configs"],
            notes=data["notes"],
        )
