"""The ``rayrig`` subcommands: one module per command group, each with ``register(subparsers)``."""
