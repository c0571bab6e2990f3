"""Builds and installs the `tandem` package for the interpreter that runs pip:

    python3 -m venv --system-site-packages venv      # Debian's numpy stays visible
    venv/bin/pip install --no-build-isolation ./python

setuptools over CMake: the extension is the project's own CMake target (tandem_python), built in
build-python<X.Y> beside this folder (kept, so that a reinstall rebuilds only what changed) for
this interpreter, then installed with the package's .py files. TANDEM_BUILD_DIR names a build
folder to use instead (one configured for this same interpreter, e.g. scripts/build's `build`).
Everything comes from the clone and Debian's packages: nothing is downloaded.
"""
import importlib.machinery
import os
import pathlib
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
VERSION = re.search(r'^__version__ = "([^"]+)"', (HERE / "tandem" / "__init__.py").read_text(), re.M).group(1)


def cached(build_dir, name):
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return None
    match = re.search(rf"^{name}:[A-Z]+=(.*)$", cache.read_text(), re.M)
    return match.group(1) if match else None


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        given = os.environ.get("TANDEM_BUILD_DIR")
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        build_dir = pathlib.Path(given).resolve() if given else ROOT / f"build-python{version}"
        interpreter = cached(build_dir, "TANDEM_PYTHON_EXECUTABLE")
        if given and interpreter and os.path.realpath(interpreter) != os.path.realpath(sys.executable):
            same = subprocess.run([interpreter, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                  text=True).stdout.strip() == str(tuple(sys.version_info[:2]))
            if not same:
                sys.exit(f"tandem: TANDEM_BUILD_DIR={build_dir} builds for {interpreter}, not this interpreter "
                         f"({sys.executable}, Python {version}); unset it to build for this one")
        if not (build_dir / "CMakeCache.txt").exists():
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator, "-DCMAKE_BUILD_TYPE=Release",
                            f"-DTANDEM_PYTHON_EXECUTABLE={sys.executable}"], check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "tandem_python", "-j", jobs], check=True)
        built = build_dir / "python" / "tandem"
        suffixes = importlib.machinery.EXTENSION_SUFFIXES
        modules = [p for p in built.glob("_tandem*") if any(p.name == "_tandem" + s for s in suffixes)]
        if not modules:
            found = ", ".join(p.name for p in built.glob("_tandem*")) or "nothing"
            sys.exit(f"tandem: {built} holds {found}, no module this interpreter loads ({' or '.join(suffixes)})")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(modules[0], target)
        shutil.copyfile(built / "_paths.py", target.parent / "_paths.py")


setup(
    name="tandem",
    version=VERSION,
    description="Keras-style training on one device or many, with a C++ engine",
    packages=["tandem", "tandem.keras", "tandem.keras.datasets", "tandem.compat"],
    ext_modules=[Extension("tandem._tandem", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=[],
    zip_safe=False,
)
