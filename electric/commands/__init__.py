"""The old home of the CLI's subcommands, now `electric.cli`; only the `score` re-export is left (see there)."""
