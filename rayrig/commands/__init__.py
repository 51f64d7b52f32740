"""The subcommands of ``rayrig``: one module per command area, each with ``register(subparsers)``."""
