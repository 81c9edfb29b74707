"""Entry point of the ``taccl`` command: the click group and the error-to-exit-status rule.

Every error the package raises on purpose is a :class:`~taccl_py.errors.TacclError`;
it is printed as one line ``taccl: error: ...`` (exit 2 for bad input, 1 otherwise).
Ctrl-C, in any phase, prints ``taccl: interrupted`` and exits 130; outputs are
written through a temporary file and a rename, so none is left half-written.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

INTERRUPTED_STATUS = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""
HELP_ASKED = "taccl.help_asked"
"""The context's ``meta`` key saying a subcommand's ``--help`` is asked for (options of taccl itself are then not
checked against the subcommand)."""

try:
    import click

    from taccl_py import __version__
    from taccl_py.errors import TacclError
except KeyboardInterrupt:  # Ctrl-C while the command is still starting up
    sys.stderr.write("taccl: interrupted\n")
    sys.exit(INTERRUPTED_STATUS)


class _Commands(click.Group):
    """The command group; the command modules are imported on first use, inside :func:`main`'s error handling
    (so a Ctrl-C while they load is reported like any other)."""

    _loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        from taccl_py.cli import (
            export_cmd,
            profile_cmd,
            report_cmd,
            sim_cmd,
            sweep_cmd,
            synth_cmd,
            topo_cmd,
            verify_cmd,
            workload_cmd,
        )

        self.add_command(topo_cmd.topo)
        for command in sim_cmd.COMMANDS:
            self.add_command(command)
        self.add_command(verify_cmd.verify)
        self.add_command(synth_cmd.synthesize_command)
        self.add_command(profile_cmd.profile)
        self.add_command(sweep_cmd.sweep_command)
        self.add_command(report_cmd.report_command)
        self.add_command(export_cmd.export)
        self.add_command(workload_cmd.workload)
        self._loaded = True

    def invoke(self, ctx: click.Context) -> object:
        # whether a subcommand's help was asked for: an option of taccl itself is then not checked against it
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        ctx.meta[HELP_ASKED] = any(arg in ("--help", "-h") for arg in rest[1:])
        return super().invoke(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._load()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load()
        return super().list_commands(ctx)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="taccl")
@click.option("--ideal", is_flag=True, default=False,
              help="The raw-link model only: ignore a topology's calibrated runtime costs (protocols, per-step and "
                   "launch overheads; shipped DGX A100 / H100 carry them). Bounds are always on the raw-link model.")
@click.option("--launch-offset", "launch_offset", type=click.FloatRange(0, 1e6), default=0.0, metavar="US",
              help="Add US microseconds per collective to the calibrated runtime model's launch: what a benchmark "
                   "harness adds beyond one GPU per process, in series with the GPUs' work (the Azure ND H100 v5 host's "
                   "nccl-tests -g 8: 0.51; a host that overlaps it: --host-overlap). Not with --ideal.")
@click.option("--host-overlap", "host_overlap", metavar="US[,US]",
              help="For simulate, baseline and profile check: a -g N harness's host (nccl-tests launching every GPU "
                   "from one thread) whose launches overlap the GPUs' work: US per collective and, after a comma, US "
                   "per channel the collective runs on; each time is the longer of the GPUs' and the host's "
                   "(profile fit --runtime --overlap fits them; the Azure ND A100 v4 host's: 42.81,0.32, Together's H100 "
                   "host's: 35.51,0.2174). Not with --ideal or --launch-offset.")
@click.pass_context
def cli(ctx: click.Context, ideal: bool, launch_offset: float, host_overlap: str | None) -> None:
    """Synthesize, verify and time collective algorithms for multi-GPU topologies.

    Units: time in microseconds, sizes in bytes (K/M/G binary, as nccl-tests),
    bandwidth in GB/s of 1e9 bytes. Every command that prints figures accepts --json.
    """
    if host_overlap is not None:  # read (a bad value is an error whatever the command) and kept to where it applies
        from taccl_py.cli.common import check_host_overlap_applies, parse_host_overlap

        parse_host_overlap(host_overlap)
        if not ctx.meta.get(HELP_ASKED):
            check_host_overlap_applies(ctx.invoked_subcommand, ("simulate", "baseline", "profile"))


def _leave(status: int) -> NoReturn:
    """Exit with ``status``; interrupted or failed while simulations started in threads are still under way
    (in the compiled kernel, where nothing stops them), at once: the interpreter would wait for work whose result
    is not wanted, and a thread still in the kernel while it finalizes aborts the process. Outputs are written
    to a temporary file and renamed, so nothing is left half-written."""
    from taccl_py.threads import background_running

    if background_running():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError):  # a closed pipe
                stream.flush()
        os._exit(status)
    sys.exit(status)


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` was caused by a Ctrl-C: numba reports one that lands while it loads or runs a compiled
    kernel as a ``SystemError`` raised from the ``KeyboardInterrupt``."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


_TOP_LEVEL_OPTIONS = {"--ideal": "", "--launch-offset": " US", "--host-overlap": " US[,US]"}
"""Options of ``taccl`` itself (with the value they take), which a user may put after the command by mistake."""


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; map project errors to one line and an exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # make_context + invoke rather than cli.main: click's main would print a blank line before our one on Ctrl-C
        with cli.make_context("taccl", args) as ctx:
            status = cli.invoke(ctx)
    except TacclError as exc:
        click.echo(f"taccl: error: {exc}", err=True)
        _leave(exc.exit_status)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("taccl: interrupted", err=True)
        _leave(INTERRUPTED_STATUS)
    except click.exceptions.NoArgsIsHelpError as exc:  # bare `taccl` or `taccl topo`: the help, not an error line
        click.echo(exc.format_message(), err=True)
        sys.exit(2)
    except click.ClickException as exc:
        message = exc.format_message()
        if isinstance(exc, click.exceptions.NoSuchOption) and exc.option_name in _TOP_LEVEL_OPTIONS:
            command = exc.ctx.command_path.split(" ", 1)[-1] if exc.ctx is not None else ""
            value = _TOP_LEVEL_OPTIONS[exc.option_name]
            message = (f"{exc.option_name} is an option of taccl itself: give it before the command "
                       f"(taccl {exc.option_name}{value}{' ' + command if command != 'taccl' else ''} ...)")
            if exc.option_name == "--launch-offset" and command == "profile fit":
                message = ("--launch-offset applies to predictions; profile fit --runtime takes the known cost of "
                           "its FILE...'s harness as --harness-offset US")
        click.echo(f"taccl: error: {message}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # a Ctrl-C that a library reported as its own error
        if not _interrupted(exc):
            raise
        click.echo("taccl: interrupted", err=True)
        _leave(INTERRUPTED_STATUS)
    sys.exit(status if isinstance(status, int) else 0)


if __name__ == "__main__":
    main()
