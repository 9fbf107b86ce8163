"""The consoles cl-bench prints rich output to: stdout for what a user keeps (the config tree, `cl-bench list`, a
run's result table), stderr for what only watches a run (progress, warnings), so `cl-bench train > out.txt` keeps
the result and the terminal keeps the progress."""
import sys


def rich_console(stderr: bool = False):
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    piped = not stream.isatty()  # into a file or a log: tables not cut at 80, and stderr's lines (warnings) not cut
    return Console(stderr=stderr, width=160 if piped else None, soft_wrap=piped and stderr)
