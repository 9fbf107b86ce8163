"""cl-bench: a config-driven experiment CLI for continual learning in PyTorch."""

__version__ = "0.1.0"
