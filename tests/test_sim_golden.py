"""Simulated times are the recorded ones: every case of ``tests/sim_golden.py`` against ``tests/data/sim_golden.json``.

The fixture was written with the simulator as it was before its event kernel was rewritten, so this test
is what keeps every refactoring of the simulator, the fluid network and the XML timing exact (times to
1e-9 relative, verdicts and messages identical; the XML timing's critical path may name another chain of
the same length, see ``_check``). Small topologies run always; the large ones are marked slow (they still
run in ``make test``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import pytest
from sim_golden import REL, VECTORS, Case, all_cases, differences, load_golden, produced_differently

CASES = all_cases()
GOLDEN = load_golden()


def _groups() -> dict[tuple[str, str], list[Case]]:
    found: dict[tuple[str, str], list[Case]] = defaultdict(list)
    for case in CASES:
        found[(case.section, case.group)].append(case)
    return found


GROUPS = _groups()


def _check(case: Case, want: dict[str, Any]) -> list[str]:
    got = case.run()
    if case.section == "programs" and "path" in want:
        # The XML timing's critical path: when several sends finish in one batch, the order they complete in
        # (so which one a waiting transmission names as its cause) changed with the kernel (one finish event per
        # flow group, no longer per flow); the times are the same and so is the path's length.
        want, got = {**want, "path": want["path"][0]}, {**got, "path": got["path"][0]}
    changed = produced_differently(want, got)
    if changed is None:
        return differences(want, got)
    lowered = "schedule_time_us" in want and want.get("schedule") == got.get("schedule")
    if not lowered:
        return [changed]
    # the lowering changed but the schedule did not: a program times exactly as its schedule
    time, expected = got.get("time_us"), want["schedule_time_us"]
    if got["correct"] and isinstance(time, float) and math.isclose(time, expected, rel_tol=REL):
        return []
    return [f"{changed}; and the new program takes {time!r} us, not its schedule's {expected!r} us"]


@pytest.mark.parametrize("section,group", [
    pytest.param(section, group, id=f"{section}-{group}",
                 marks=[pytest.mark.slow] if any(c.slow for c in cases) else [])
    for (section, group), cases in GROUPS.items()])
def test_simulated_times_are_the_recorded_ones(section: str, group: str) -> None:
    recorded = GOLDEN[section]
    failures = []
    for case in GROUPS[(section, group)]:
        want = recorded.get(case.key)
        if want is None:
            failures.append(f"{case.key}: not in the fixture (regenerate with .venv/bin/python tests/sim_golden.py)")
            continue
        failures += [f"{case.key}: {line}" for line in _check(case, want)]
    assert not failures, f"{len(failures)} difference(s):\n" + "\n".join(failures[:30])


def test_every_recorded_case_is_still_run() -> None:
    """A case dropped from the generator would silently stop being checked."""
    run = {(c.section, c.key) for c in CASES}
    recorded = {(section, key) for section, rows in GOLDEN.items() for key in rows}
    assert recorded == run, sorted(recorded ^ run)[:10]


def test_the_fixture_covers_what_it_claims() -> None:
    baselines = GOLDEN["baselines"]
    assert len(baselines) > 800
    assert all(r["correct"] for r in baselines.values()), "every shipped baseline is correct"
    programs = GOLDEN["programs"]
    assert sum(k.startswith("vector/") for k in programs) == 4 * len(list(VECTORS.glob("*.xml")))
    assert sum(k.startswith("lowered/") for k in programs) >= 60
    invalid = GOLDEN["invalid"]
    assert sum(not r["correct"] for r in invalid.values()) >= 50  # a few mutations happen to stay correct
    messages = " ".join(r["error"] for r in invalid.values() if r.get("error"))
    for what in ("does not hold", "a second time", "deadlock", "post-condition violated", "route"):
        assert what in messages, what
    perturbed = GOLDEN["perturbed"]
    assert all(r["correct"] for r in perturbed.values())
