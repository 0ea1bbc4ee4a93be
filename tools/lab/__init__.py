"""The lab guide's build (docs/lab, README.md, notebooks/): `render.py` fills the templates of
docs/lab/templates from facts alone, `build.py` reads those facts from the sources under runs/ into
docs/lab/facts.json, `plan.py` plans and makes the sources (calibration, estimates, forked workers side by side,
the report card), `stamps.py` stamps each source and tells a stale one (git), `verify.py` checks a source
whose code changed by its behaviour at CI size, and `notebooks.py` makes the guide's notebooks. What the
package itself needs of the guide (its sources and facts, facts.json's reader, the placeholders, the recipes)
is `tinyformer.lab`, which this builds on.
"""
