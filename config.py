"""pyinfra configuration for rayrig deploys (read from the working directory)."""

from pyinfra import config

config.REQUIRE_PYINFRA_VERSION = ">=3.10,<4"
