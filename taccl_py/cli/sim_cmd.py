"""Placeholder: simulate/baseline/bound are being built (replaced before landing)."""

import click

COMMANDS: list[click.Command] = []
