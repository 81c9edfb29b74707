"""Placeholder: this command group is being built (replaced before landing)."""

import click


@click.command("verify")
def verify() -> None:
    """Not built yet."""
    raise click.ClickException("not built yet")
