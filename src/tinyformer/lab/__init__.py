"""The lab guide (docs/lab): pages filled from the runs' own reports, never from typed numbers.

What the package itself needs of the guide lives here, and works from a pip install: the sources the guide
quotes and the facts each states (`sources.py`, `tinyformer lab facts`), how the guide makes each study
(`studies.py`), how a page quotes a fact (`placeholders.py`, read by the notebooks' `tinyformer.notebook`), and
the course's recipes against the presets (`recipes.py`, `tinyformer lab recipes`). The guide's build (render,
plan, stamps, notebooks: `tinyformer lab build`, `make lab`) is the repository's, in a clone's `tools/lab/`.
"""
