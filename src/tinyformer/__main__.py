"""`python -m tinyformer` is the same CLI as the `tinyformer` command, whose entry point is `start`: Ctrl-C
while the command line itself is being imported exits 130 with one line, as it does at any later moment."""

import sys


def start() -> int:
    try:
        from tinyformer.cli import main
    except KeyboardInterrupt:
        print("tinyformer: interrupted", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(start())
