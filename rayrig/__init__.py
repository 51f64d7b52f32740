"""rayrig: GPU Ray clusters with pyinfra."""

__version__ = "0.1.0"
