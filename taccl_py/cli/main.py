"""Entry point of the ``taccl`` command: the click group and the error-to-exit-status rule.

Every error the package raises on purpose is a :class:`~taccl_py.errors.TacclError`;
it is printed as one line ``taccl: error: ...`` (exit 2 for bad input, 1 otherwise).
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys

import click

from taccl_py import __version__
from taccl_py.errors import TacclError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="taccl")
def cli() -> None:
    """Synthesize, verify and time collective algorithms for multi-GPU topologies.

    Units: time in microseconds, sizes in bytes (K/M/G binary, as nccl-tests),
    bandwidth in GB/s of 1e9 bytes. Every command that prints figures accepts --json.
    """


def _register() -> None:
    from taccl_py.cli import profile_cmd, report_cmd, sim_cmd, sweep_cmd, synth_cmd, topo_cmd, verify_cmd

    cli.add_command(topo_cmd.topo)
    for command in sim_cmd.COMMANDS:
        cli.add_command(command)
    cli.add_command(verify_cmd.verify)
    cli.add_command(synth_cmd.synthesize_command)
    cli.add_command(profile_cmd.profile)
    cli.add_command(sweep_cmd.sweep_command)
    cli.add_command(report_cmd.report_command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; map project errors to one line and an exit status."""
    try:
        status = cli.main(args=argv, prog_name="taccl", standalone_mode=False)
    except TacclError as exc:
        click.echo(f"taccl: error: {exc}", err=True)
        sys.exit(exc.exit_status)
    except click.exceptions.Abort:
        click.echo("taccl: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"taccl: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(status if isinstance(status, int) else 0)


if __name__ == "__main__":
    main()
