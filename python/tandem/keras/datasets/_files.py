"""Finding the datasets the set-up command fetched: $TANDEM_DATA, the project's data folder, ./data."""
import os

from ... import _tandem
from ...errors import FileNotFoundError as _NotFound

try:
    from ..._paths import DATA_DIR as _PROJECT_DATA
except ImportError:  # a package copied elsewhere
    _PROJECT_DATA = ""


def directories(name):
    dirs = []
    for d in _tandem.dataset_search_path(""):
        dirs.append(os.path.join(d, name))
    if _PROJECT_DATA:
        dirs.insert(1 if os.environ.get("TANDEM_DATA") else 0, os.path.join(_PROJECT_DATA, name))
    return dirs


def find(name, files):
    """The first directory holding every file (each plain or .gz), and the paths found there."""
    searched = directories(name)
    for d in searched:
        found = []
        for f in files:
            for candidate in (os.path.join(d, f), os.path.join(d, f + ".gz")):
                if os.path.exists(candidate):
                    found.append(candidate)
                    break
        if len(found) == len(files):
            return found
    raise _NotFound(2, f"{name}: no directory holds {', '.join(files)} (plain or .gz); searched "
                       f"{', '.join(searched)}. Run the README's set-up command (bash scripts/setup), or set TANDEM_DATA")


def idx_dataset(name):
    x_train, y_train, x_test, y_test = (_tandem.read_idx(p) for p in find(name, [
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]))
    return (x_train, y_train), (x_test, y_test)
