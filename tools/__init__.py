"""The repository's own tools, run from a clone and never shipped in the wheel (pyproject.toml packages
`src/` only): `imports.py`, the package's import graph read from its code, and `lab/`, the lab guide's build
(`tinyformer lab build`, `make lab`, `make notebooks`)."""
