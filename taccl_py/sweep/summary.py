"""One row per grid point (topology, collective, size) from a sweep's synthesize and baselines records."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from taccl_py.sweep.runner import JobRecord
from taccl_py.units import algbw_gbps

__all__ = ["PointSummary", "summarize"]


def _algbw(size: int, time_us: float | None) -> float | None:
    return algbw_gbps(size, time_us) if time_us else None


@dataclass(frozen=True)
class PointSummary:
    """What taccl and the baselines reach at one point; None where a task was not run or failed."""

    topology: str
    collective: str
    size_bytes: int
    gpus: int | None
    bound_us: float | None
    time_us: float | None
    """What ``taccl synthesize`` returns (a baseline when it is faster)."""
    algorithm: str | None
    synthesized_time_us: float | None
    """The synthesizer's own best candidate."""
    baselines_us: dict[str, float | None]
    errors: tuple[str, ...]

    @property
    def best_baseline(self) -> tuple[str, float] | None:
        timed = [(t, name) for name, t in self.baselines_us.items() if t is not None]
        return (min(timed)[1], min(timed)[0]) if timed else None

    @property
    def efficiency(self) -> float | None:
        return self.bound_us / self.time_us if self.bound_us and self.time_us else None

    @property
    def speedup_vs_best_baseline(self) -> float | None:
        best = self.best_baseline
        return best[1] / self.time_us if best and self.time_us else None

    def algbw(self, time_us: float | None) -> float | None:
        return _algbw(self.size_bytes, time_us)

    def to_json(self) -> dict[str, Any]:
        best = self.best_baseline
        return {"topology": self.topology, "collective": self.collective, "size_bytes": self.size_bytes,
                "gpus": self.gpus, "time_us": self.time_us, "algbw_GBps": self.algbw(self.time_us),
                "algorithm": self.algorithm, "synthesized_time_us": self.synthesized_time_us,
                "bound_us": self.bound_us, "bound_algbw_GBps": self.algbw(self.bound_us),
                "efficiency": self.efficiency, "baselines_us": self.baselines_us,
                "best_baseline": best[0] if best else None,
                "best_baseline_algbw_GBps": self.algbw(best[1]) if best else None,
                "speedup_vs_best_baseline": self.speedup_vs_best_baseline, "errors": list(self.errors)}


def summarize(records: Iterable[JobRecord]) -> list[PointSummary]:
    """Merge the records of each point, in the order points first appear."""
    points: dict[tuple[str, str, int], dict[str, Any]] = {}
    for record in records:
        job = record.job
        key = (str(job["topology"]), str(job["collective"]), int(job["size_bytes"]))
        point = points.setdefault(key, {"errors": [], "baselines_us": {}})
        if record.error is not None or record.result is None:
            point["errors"].append(f"{job['task']}: {record.error}")
            continue
        result = record.result
        point["gpus"] = result.get("gpus")
        point["bound_us"] = result.get("bound_us")
        if job["task"] == "synthesize":
            point.update(time_us=result.get("time_us"), algorithm=result.get("algorithm"),
                         synthesized_time_us=result.get("synthesized_time_us"))
            for name, t in result.get("baselines_us", {}).items():
                point["baselines_us"].setdefault(name, t)
        else:  # the baselines task times them as `taccl baseline` does: it wins over the synthesizer's copy
            point["baselines_us"].update(result.get("baselines_us", {}))
    return [PointSummary(topology, collective, size, p.get("gpus"), p.get("bound_us"), p.get("time_us"),
                         p.get("algorithm"), p.get("synthesized_time_us"), dict(sorted(p["baselines_us"].items())),
                         tuple(p["errors"])) for (topology, collective, size), p in points.items()]
