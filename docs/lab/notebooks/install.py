# The notebook's size: ci (seconds per cell), laptop (the default) or full; set TINYFORMER_SIZE to change it.
import os
import subprocess
import sys
from pathlib import Path

SIZE = os.environ.get("TINYFORMER_SIZE", "laptop")
REPO = os.environ.get("TINYFORMER_REPO", "")  # Colab: the address of a tinyformer repository to clone

try:
    import tinyformer
except ImportError:  # Colab, or a kernel without tinyformer: the clone around this notebook, else REPO
    root = next((p for p in [Path.cwd(), *Path.cwd().parents] if (p / "pyproject.toml").is_file()), None)
    if root is None:
        if not REPO:
            raise SystemExit("tinyformer is not installed: set REPO above to a repository address") from None
        subprocess.run(["git", "clone", "--depth", "1", REPO, "tinyformer"], check=True)
        root = Path("tinyformer").resolve()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", f"{root}[hf]"], check=True)
    sys.path.insert(0, str(root / "src"))  # this kernel started before the install
    os.environ["TINYFORMER_ROOT"] = str(root)
    import tinyformer

print(f"tinyformer {tinyformer.__version__}, size {SIZE}")
