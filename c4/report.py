"""Fault reports and their suspects: the records every detector files (shared specs section 3)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

#: the shared format's kinds, and this project's ``health``: hard evidence a node gave about
#: itself (an XID 79, a port down) before or without any timing fault (diagnosis/health/)
KINDS = ("noncomm_hang", "comm_hang", "noncomm_slow", "comm_slow", "error", "health")
SUSPECT_TYPES = ("gpu", "host", "nic", "switch", "link", "rank")


@dataclass(frozen=True)
class Suspect:
    """A component that may be at fault, with a score in [0, 1]."""

    type: str
    id: str
    score: float
    rank: int | None = None

    def __post_init__(self) -> None:
        if self.type not in SUSPECT_TYPES:
            raise ValueError(f"suspect type {self.type!r} is not one of {SUSPECT_TYPES}")
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"suspect score {self.score} is outside [0, 1]")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "id": self.id, "score": round(self.score, 4)}
        if self.rank is not None:
            out["rank"] = self.rank
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Suspect:
        return cls(type=obj["type"], id=str(obj["id"]), score=float(obj["score"]),
                   rank=obj.get("rank"))


@dataclass(frozen=True)
class FaultReport:
    """One fault: its kind, suspects (most likely first), when it began and why we think so.

    ``id`` and ``job`` identify it in the daemon; ``revision`` grows with each update, so that new
    evidence for an open fault updates this report instead of filing another.
    """

    kind: str
    suspects: tuple[Suspect, ...]
    first_seen_ns: int
    summary: str
    pg: str | None = None
    seq: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    job: str = ""
    last_seen_ns: int = 0
    state: str = "open"
    revision: int = 0
    #: the health findings that explain this fault, most likely first (diagnosis/health/
    #: causes.py): each a dict with kind, target, summary, action, severity, since_ns, score
    causes: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {KINDS}")
        object.__setattr__(self, "suspects", tuple(self.suspects))
        object.__setattr__(self, "causes", tuple(self.causes))

    @property
    def top(self) -> Suspect | None:
        return self.suspects[0] if self.suspects else None

    def with_updates(self, **changes: Any) -> FaultReport:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The object of shared specs section 3 (plus the daemon's identity fields when set)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "suspects": [s.to_json() for s in self.suspects],
            "first_seen_ns": int(self.first_seen_ns),
        }
        if self.pg is not None:
            out["pg"] = self.pg
        if self.seq is not None:
            out["seq"] = int(self.seq)
        out["summary"] = self.summary
        out["evidence"] = _jsonable(self.evidence)
        if self.causes:
            out["causes"] = _jsonable(list(self.causes))
        if self.id:
            out.update(id=self.id, job=self.job, state=self.state, revision=self.revision,
                       last_seen_ns=int(self.last_seen_ns))
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> FaultReport:
        return cls(
            kind=obj["kind"],
            suspects=tuple(Suspect.from_json(s) for s in obj.get("suspects", [])),
            first_seen_ns=int(obj["first_seen_ns"]),
            summary=obj.get("summary", ""),
            pg=obj.get("pg"),
            seq=obj.get("seq"),
            evidence=obj.get("evidence") or {},
            id=obj.get("id", ""),
            job=obj.get("job", ""),
            last_seen_ns=int(obj.get("last_seen_ns", 0)),
            state=obj.get("state", "open"),
            revision=int(obj.get("revision", 0)),
            causes=tuple(obj.get("causes") or ()),
        )


def suspect_ranks(report: FaultReport) -> list[int]:
    """The ranks a report's suspects name: a rank suspect's id, or the rank a GPU or host
    suspect was placed from."""
    return [int(s.rank) if s.rank is not None else int(s.id) for s in report.suspects
            if s.rank is not None or (s.type == "rank" and s.id.isdigit())]


def reports_to_json(reports: list[FaultReport]) -> dict[str, Any]:
    """The whole document ``c4 analyze --format json`` writes: ``{"reports": [...]}``."""
    return {"reports": [r.to_json() for r in reports]}


def _jsonable(value: Any) -> Any:
    """Evidence may hold numpy scalars and arrays; make it plain JSON."""
    return json.loads(json.dumps(value, default=_default))


def _default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot put {type(obj).__name__} into fault evidence")
