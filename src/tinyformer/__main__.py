"""`python -m tinyformer` is the same CLI as the `tinyformer` command."""

import sys

from tinyformer.cli import main

sys.exit(main())
