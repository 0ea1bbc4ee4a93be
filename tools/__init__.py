"""The repository's own tools, run from a clone and never shipped in the wheel (pyproject.toml packages
`src/` only): `imports.py`, the package's import graph read from its code, `sizes.py`, the code's size limits
(`tests/test_sizes.py`, `scripts/seam_counts.py`), and `lab/`, the lab guide's build (`tinyformer lab build`,
`lab verify`, `make lab`, `make notebooks`)."""
