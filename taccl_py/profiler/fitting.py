"""``taccl profile fit`` as a function: measurement files in, a fitted topology out.

Inputs are either nccl-tests logs (pooled into one per-hop fit of the ring or
the direct links the collectives ran on) or point-to-point CSVs (one fit per
measured direction, or per link class of a base topology; the repeats of a
size are reduced to their median first). Without a base
topology the result is a new topology; with one (``--into``) the fitted
values replace the links of the measured pairs or classes and everything else
is kept.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from taccl_py.errors import ProfileInputError
from taccl_py.limits import MAX_GPUS, limit_text
from taccl_py.profiler.calibration import (
    LinkFit,
    link_classes,
    pairs_by_class,
    recalibrate,
    topology_from_fits,
)
from taccl_py.profiler.fit import Observation, fit_alpha_beta
from taccl_py.profiler.measurements import Sample, read_measurements_csv
from taccl_py.profiler.nccl_tests import (
    BINARY_MODELS,
    NcclTestsRun,
    binary_from_name,
    observations_from_run,
    parse_nccl_tests_log,
    resolve_binary,
)
from taccl_py.topology import Topology

__all__ = ["FitOutcome", "FitRequest", "fit_measurements", "is_csv_file", "samples_to_fits"]

GROUPS = ("pair", "class")


@dataclass(frozen=True)
class FitRequest:
    """What to fit and how. ``base`` is the topology to re-calibrate (``--into``), if any."""

    files: tuple[str, ...]
    collective: str | None = None
    ranks: int | None = None
    group: str | None = None
    base: Topology | None = None
    base_where: str = ""
    class_name: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class FitOutcome:
    """The fitted topology, the fits behind it, what was read and every warning."""

    topology: Topology
    fits: tuple[LinkFit, ...]
    inputs: tuple[str, ...]
    warnings: tuple[str, ...]


def is_csv_file(path: str) -> bool:
    """A measurements CSV (by suffix, or a first data line naming ``time_us``) rather than a log."""
    if path.lower().endswith(".csv"):
        return True
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(1 << 16)  # the first data line is near the top; never read a huge file here
    except OSError:
        return False
    for line in head.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return "time_us" in stripped and "," in stripped
    return False


def fit_measurements(request: FitRequest) -> FitOutcome:
    """Fit every file of the request; see the module docstring.

    Raises
    ------
    ProfileInputError
        Unreadable or malformed files, mixed logs and CSVs, a fit that cannot
        be made, or measurements that do not match the base topology.
    """
    if not request.files:
        raise ProfileInputError("no measurement files given", where="taccl profile fit")
    if request.group is not None and request.group not in GROUPS:
        raise ProfileInputError(f"must be pair or class (got {request.group!r})", where="--group")
    for path in request.files:
        if not Path(path).is_file():
            if "@" in path and Path(path.rpartition("@")[0]).is_file():
                raise ProfileInputError("FILE@LO:HI (some of a file's sizes) applies to --runtime fits only",
                                        where=path)
            raise ProfileInputError.not_a_file(path)
    kinds = {is_csv_file(p) for p in request.files}
    if len(kinds) > 1:
        raise ProfileInputError("cannot mix nccl-tests logs and CSV measurements in one fit; fit them in two steps "
                                "(the second with --into)", where=", ".join(request.files))
    if kinds == {True}:
        return _fit_csvs(request)
    return _fit_logs(request)


# ------------------------------------------------------------------------ CSVs
def samples_to_fits(samples: Sequence[Sample], *, files: Sequence[str], group: str,
                    base: Topology | None = None) -> tuple[list[tuple[LinkFit, list[tuple[int, int]]]], list[str]]:
    """Fit point-to-point samples per direction or per link class of ``base``.

    Returns the fits with the GPU pairs each one should set, and warnings.
    """
    where = ", ".join(files)
    warnings: list[str] = []
    by_pair: dict[tuple[int, int], list[Sample]] = {}
    for s in samples:
        by_pair.setdefault((s.src, s.dst), []).append(s)
    model = "t = alpha + size/B (point-to-point, one way)"
    results: list[tuple[LinkFit, list[tuple[int, int]]]] = []
    if group == "pair":
        for pair in sorted(by_pair):
            fit = fit_alpha_beta(_observations(by_pair[pair]), where=f"{where}: pair {pair[0]}->{pair[1]}")
            results.append((LinkFit(f"{pair[0]}->{pair[1]}", fit, (pair,), tuple(files), model), [pair]))
        return results, warnings
    if base is None:
        raise ProfileInputError("grouping by link class needs a topology (--into TOPO)", where="--group")
    classes = link_classes(base)
    grouped = pairs_by_class(base, sorted(by_pair))
    for name in sorted(k for k in grouped if k is not None):
        pairs = grouped[name]
        obs = [o for pair in pairs for o in _observations(by_pair[pair])]
        fit = fit_alpha_beta(obs, where=f"{where}: class {name!r}")
        results.append((LinkFit(name, fit, tuple(pairs), tuple(files), model), list(classes[name])))
    if None in grouped:
        skipped = ", ".join(f"{s}->{d}" for s, d in grouped[None][:6])
        warnings.append(f"pairs without a switch-only route in the topology were not used: {skipped}")
    return results, warnings


def _observations(samples: Sequence[Sample]) -> list[Observation]:
    """One observation per size: the median of its repeats (a hiccup in one repeat does not move the fit)."""
    by_size: dict[int, list[Sample]] = {}
    for s in samples:
        by_size.setdefault(s.size_bytes, []).append(s)
    out = []
    for size in sorted(by_size):
        group = by_size[size]
        origin = group[0].origin if len(group) == 1 else f"{group[0].origin} (median of {len(group)} repeats)"
        out.append(Observation(size, float(statistics.median(s.time_us for s in group)), 1.0, 1.0, origin))
    return out


def _fit_csvs(request: FitRequest) -> FitOutcome:
    samples: list[Sample] = []
    for path in request.files:
        samples.extend(read_measurements_csv(path))
    base = request.base
    if base is not None:
        for s in samples:
            for rank in (s.src, s.dst):
                if rank >= base.num_gpus:
                    raise ProfileInputError(f"rank {rank} is not a GPU of {request.base_where or base.name} "
                                            f"(GPUs 0..{base.num_gpus - 1})", where=s.origin)
    group = request.group or ("class" if base is not None else "pair")
    targets, warnings = samples_to_fits(samples, files=request.files, group=group, base=base)
    if request.class_name is not None:
        targets = [t for t in targets if t[0].label == request.class_name]
        if not targets:
            raise ProfileInputError(f"no fitted class is named {request.class_name!r}", where="--class")
    pairs = sorted({(s.src, s.dst) for s in samples})
    inputs = tuple(f"{p}: point-to-point CSV" for p in request.files)
    if base is None:
        name = request.name or Path(request.files[0]).stem
        source = (f"fitted by taccl profile fit from {', '.join(request.files)}: per-direction alpha-beta fits of "
                  f"{len(samples)} point-to-point measurements over {len(pairs)} GPU pairs")
        topology = topology_from_fits([t[0] for t in targets], name=name, source=source,
                                      where=", ".join(request.files))
    else:
        if not targets:
            raise ProfileInputError("no measured pair has a route in the topology; nothing to re-calibrate",
                                    where=", ".join(request.files))
        note = f"re-calibrated by taccl profile fit from {', '.join(request.files)}"
        topology, more = recalibrate(base, targets, note=note)
        warnings.extend(more)
    return _outcome(topology, [t[0] for t in targets], inputs, warnings)


def _outcome(topology: Topology, fits: Sequence[LinkFit], inputs: Sequence[str],
             warnings: Sequence[str]) -> FitOutcome:
    all_warnings = list(warnings)
    for link_fit in fits:
        all_warnings.extend(f"{link_fit.label}: {w}" for w in link_fit.fit.warnings)
    return FitOutcome(topology, tuple(fits), tuple(inputs), tuple(all_warnings))


# ------------------------------------------------------------------------ logs
def _binary_of(run: NcclTestsRun, path: str, override: str | None) -> str:
    if override is not None:
        return resolve_binary(override)
    if run.binary is not None:
        return resolve_binary(run.binary, where=f"{path}: line {run.first_line}")
    guessed = binary_from_name(Path(path).name)
    if guessed is not None:
        return guessed
    raise ProfileInputError("cannot tell which nccl-tests binary wrote this log (no 'Collective test starting' "
                            "line, no binary name in the log or file name); pass --collective "
                            "(sendrecv, allgather, reducescatter, allreduce, broadcast, reduce, alltoall)", where=path)


def _fit_logs(request: FitRequest) -> FitOutcome:
    observations: list[Observation] = []
    warnings: list[str] = []
    inputs: list[str] = []
    shapes: set[str] = set()
    models: list[str] = []
    max_ranks = 0
    for path in request.files:
        for run in parse_nccl_tests_log(path):
            at = f"{path}: line {run.first_line}"
            binary = _binary_of(run, path, request.collective)
            model = BINARY_MODELS[binary]
            nranks = request.ranks if request.ranks is not None else run.nranks
            if nranks > MAX_GPUS:
                raise ProfileInputError(f"the run has {nranks} ranks; {limit_text('MAX_GPUS', MAX_GPUS)}", where=at)
            if nranks < 2:
                raise ProfileInputError(f"{binary} ran on {nranks} rank: no link between GPUs was measured "
                                        "(pass --ranks N if the log lacks its '#  Rank' lines)", where=at)
            if request.ranks is None and not run.ranks:
                warnings.append(f"{at}: no '#  Rank' lines; assuming nThread x nGpus = {nranks} ranks "
                                "(pass --ranks N if more processes took part)")
            if run.repeated_ranks:
                warnings.append(f"{at}: several processes printed the same rank (nccl-tests built without "
                                "MPI?); each may have run alone")
            if not run.complete:
                warnings.append(f"{at}: the run has no '# Avg bus bandwidth' footer (log truncated?); "
                                f"using its {len(run.rows)} rows")
            wrong = sum(r.wrong for r in run.rows)
            if wrong:
                warnings.append(f"{at}: {wrong} row(s) report wrong results (#wrong > 0) and were not used")
            run_obs = observations_from_run(run, binary, nranks)
            if not run_obs:
                raise ProfileInputError("no usable rows (all report wrong results or size 0)", where=at)
            observations.extend(run_obs)
            shapes.add(model.shape)
            max_ranks = max(max_ranks, nranks)
            hosts = f" on {len(run.hosts)} host{'s' if len(run.hosts) != 1 else ''}" if run.hosts else ""
            inputs.append(f"{path}: {binary}, {nranks} ranks{hosts}, {len(run.rows)} sizes")
            models.append(f"{binary} over {nranks} ranks: {model.formula}")
    if len(shapes) > 1:
        raise ProfileInputError("cannot pool alltoall_perf (direct links) with ring collectives in one fit",
                                where=", ".join(request.files))
    shape = shapes.pop()
    where = ", ".join(request.files)
    fit = fit_alpha_beta(observations, where=where)
    n = max_ranks
    if shape == "ring":
        pairs = tuple(sorted({(r, (r + 1) % n) for r in range(n)}))
        label = "ring hop"
    else:
        pairs = tuple((s, d) for s in range(n) for d in range(n) if s != d)
        label = "direct link"
    link_fit = LinkFit(label, fit, pairs, tuple(request.files), "; ".join(dict.fromkeys(models)))
    base = request.base
    if base is None:
        name = request.name or Path(request.files[0]).stem
        if shape == "ring":
            layout = (f"ring of {n} GPUs assumed, one way 0->1->...->{n - 1}->0 as NCCL's rings and sendrecv_perf "
                      "run it (re-simulating the measured collective gives the measured time; re-calibrate your "
                      "real topology with --into for anything else)" if n > 2 else "ring of 2 GPUs assumed")
        else:
            layout = f"{n} fully connected GPUs assumed, one link per ordered pair"
        source = (f"fitted by taccl profile fit from {'; '.join(inputs)}; {layout}; links carry the fitted per-hop "
                  "alpha and bandwidth")
        topology = topology_from_fits([link_fit], name=name, source=source, num_gpus=n, mirror=False, where=where)
        return _outcome(topology, [link_fit], inputs, warnings)
    return _log_into(request, base, link_fit, n, inputs, warnings)


def _log_into(request: FitRequest, base: Topology, link_fit: LinkFit, n: int, inputs: Sequence[str],
              warnings: list[str]) -> FitOutcome:
    """Re-calibrate the link class the log's pairs run on (or ``--class``)."""
    base_where = request.base_where or base.name
    if n > base.num_gpus:
        raise ProfileInputError(f"the log has {n} ranks but {base_where} has {base.num_gpus} GPUs",
                                where=", ".join(request.files))
    classes = link_classes(base)
    listing = "; ".join(f"{name!r} ({len(pairs)} pairs)" for name, pairs in classes.items())
    if request.class_name is not None:
        if request.class_name not in classes:
            raise ProfileInputError(f"{base_where} has no link class {request.class_name!r} (classes: {listing})",
                                    where="--class")
        chosen = request.class_name
    else:
        found = sorted(k for k in pairs_by_class(base, link_fit.pairs) if k is not None)
        if len(found) != 1:
            what = "no route" if not found else f"{len(found)} link classes ({', '.join(found)})"
            raise ProfileInputError(f"the ring pairs of the log have {what} in {base_where}; pick the class to "
                                    f"re-calibrate with --class (classes: {listing})", where=", ".join(request.files))
        chosen = found[0]
    fit = LinkFit(chosen, link_fit.fit, link_fit.pairs, link_fit.files, link_fit.model)
    note = f"class {chosen!r} re-calibrated by taccl profile fit from {', '.join(request.files)}"
    topology, more = recalibrate(base, [(fit, classes[chosen])], note=note)
    return _outcome(topology, [fit], inputs, [*warnings, *more])
