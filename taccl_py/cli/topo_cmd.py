"""Placeholder: this command group is being built (replaced before landing)."""

import click


@click.command("topo")
def topo() -> None:
    """Not built yet."""
    raise click.ClickException("not built yet")
