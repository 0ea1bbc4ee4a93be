"""`python -m tinyformer` is the same CLI as the `tinyformer` command, whose entry point is `start`: the rule
for Ctrl-C and SIGTERM (`tinyformer.interrupt`) holds from its first line, while the command line itself is
being imported, as at any later moment."""

import sys

from tinyformer import interrupt


def start() -> int:
    with interrupt.command():  # start-up: a signal exits at once, with one line
        from tinyformer.cli import main

        return main()


if __name__ == "__main__":
    sys.exit(start())
