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


# Reasons a machine may lack what a test needs; a file all of whose tests skipped for one of them
# is reported skipped to ctest (exit 77), and for any other reason it fails: a file that tests
# nothing must be seen, not counted as passed.
EXPECTED_SKIP_REASONS = ("GPU", "PyTorch is not installed", "mpirun is not installed", "network namespaces")
ALL_SKIPPED_EXPECTED = 77


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    stats = reporter.stats
    ran = sum(len(stats.get(kind, [])) for kind in ("passed", "failed", "error", "xfailed", "xpassed"))
    skipped = stats.get("skipped", [])
    if ran or not skipped:
        return
    reasons = [str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
               for report in skipped]
    expected = all(any(known in reason for known in EXPECTED_SKIP_REASONS) for reason in reasons)
    reporter.write_line(f"conftest: every test of this file skipped ({'; '.join(sorted(set(reasons)))}): "
                        + ("reported as skipped" if expected else "a failure, as none of these reasons is one a "
                           "machine may lack"))
    session.exitstatus = ALL_SKIPPED_EXPECTED if expected else 1
