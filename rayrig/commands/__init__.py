"""The subcommands of ``rayrig``: one module per area, each exposing ``register(subparsers)``."""
