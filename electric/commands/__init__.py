"""Subcommands of the `electric` CLI (see electric/cli.py)."""
