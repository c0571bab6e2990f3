"""Installing the module the Python way: `pip install --no-build-isolation ./python` into a venv
(made with --system-site-packages, so Debian's numpy is seen) builds the engine with CMake for the
interpreter running pip and installs the package there, offline; an interpreter the built engine
does not match is told so on `import tandem`, not shown a missing-symbol trace."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT

TRAIN = ("import numpy as np, tandem; m = tandem.keras.Sequential([tandem.keras.layers.Dense(3, input_shape=(4,))]); "
         "m.compile('sgd', 'mse'); m.fit(np.ones((8, 4), np.float32), np.zeros((8, 3), np.float32), verbose=0); "
         "print(tandem.__file__)")


def test_pip_installs_tandem_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], capture_output=True,
                          text=True, timeout=120)
    if made.returncode != 0:
        pytest.skip(f"python3 -m venv does not work here (Debian: python3-venv): {made.stderr.strip()[-300:]}")
    pip = venv / "bin" / "pip"
    # The build folder the suite was built in is configured for this interpreter: pip reuses it
    # (a plain `pip install ./python` builds in build-python3.11, the same way, from scratch).
    env = dict(os.environ, TANDEM_BUILD_DIR=str(BUILD.resolve()))
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(pip), "install", "--no-build-isolation", "--no-index", str(ROOT / "python")],
                          capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", TRAIN], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().startswith(str(venv))  # the venv's copy, not the build folder's
    # A build folder made for another interpreter is refused by name.
    other = tmp_path / "other-build"
    other.mkdir()
    (other / "CMakeCache.txt").write_text("TANDEM_PYTHON_EXECUTABLE:FILEPATH=/bin/false\n")
    refused = subprocess.run([str(pip), "install", "--no-build-isolation", "--no-index", str(ROOT / "python")],
                             capture_output=True, text=True, timeout=300, env=dict(env, TANDEM_BUILD_DIR=str(other)),
                             cwd=tmp_path)
    assert refused.returncode != 0
    assert "builds for /bin/false, not this interpreter" in refused.stdout + refused.stderr


def test_an_interpreter_the_engine_was_not_built_for_is_told_how_to_build_it(tmp_path):
    """The engine renamed as CPython 3.12's, as a 3.12 build would name it: this 3.11 cannot load
    it and says so, naming both and the command that builds it."""
    package = tmp_path / "tandem"
    shutil.copytree(BUILD.resolve() / "python" / "tandem", package)
    (engine,) = [p for p in package.glob("_tandem*.so")]
    engine.rename(package / "_tandem.cpython-312-x86_64-linux-gnu.so")
    ran = subprocess.run([sys.executable, "-c", "import tandem"], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert ran.returncode != 0
    assert "was built for CPython 3.12" in ran.stderr and "pip install --no-build-isolation ./python" in ran.stderr
    assert "Traceback" in ran.stderr and "undefined symbol" not in ran.stderr
    (package / "_tandem.cpython-312-x86_64-linux-gnu.so").unlink()
    ran = subprocess.run([sys.executable, "-c", "import tandem"], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert "its engine (_tandem) is not built" in ran.stderr
