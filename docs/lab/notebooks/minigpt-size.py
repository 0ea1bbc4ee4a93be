# The command line minigpt.py would get: at ci size a few steps, else the course's 3,000.
argv = ["--steps", "20"] if SIZE == "ci" else []
if "TINYFORMER_DATA" not in os.environ:  # the package's copy of Tiny Shakespeare, downloaded once
    from tinyformer.data.tinyshakespeare import resolve_path

    os.environ["TINYFORMER_DATA"] = str(resolve_path(None))
