"""`tinyformer serve`: a local web playground over the runs of a folder (see `tinyformer.serve.app`)."""
