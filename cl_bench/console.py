"""The console cl-bench prints rich output to (the config tree, `cl-bench list`)."""
import sys


def rich_console():
    from rich.console import Console
    return Console(width=None if sys.stdout.isatty() else 160)  # piped into a file or a log: not cut at 80
