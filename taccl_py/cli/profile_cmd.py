"""Placeholder: this command group is being built (replaced before landing)."""

import click


@click.command("profile")
def profile() -> None:
    """Not built yet."""
    raise click.ClickException("not built yet")
