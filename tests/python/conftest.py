"""Shared pieces of the Python tests: small data made here, the project's paths."""
import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TANDEM_BUILD_DIR", ROOT / "build"))
CLI = BUILD / "tandem"


def small_data(n=256, features=20, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, features)).astype(np.float32)
    y = (np.arange(n) * 7 % classes).astype(np.int32)
    return x, y


def dataset_or_skip(name="mnist"):
    """keras.datasets.<name>.load_data(), or the test skipped with the reason when the files are missing."""
    import tandem

    try:
        return getattr(tandem.keras.datasets, name).load_data()
    except tandem.FileNotFoundError as e:
        pytest.skip(f"{name} is not here ({e}); the README's set-up command fetches it")


def mnist_or_skip():
    return dataset_or_skip("mnist")


@pytest.fixture
def tf():
    import tandem

    return tandem
