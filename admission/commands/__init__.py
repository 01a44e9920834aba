"""One module per ``tenantgate`` subcommand; each exposes ``register(subparsers)``."""
