import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
# Source checkouts (and the H200 qualification run) import the package from host/ directly.
sys.path.insert(0, str(_HERE.parent / "host"))
