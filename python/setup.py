"""Build step of the afinar Python package: compile the C library with the project's own Makefile
(`make lib` in the repository, into a temporary build folder) and ship libafinar.so inside the
package. No second build system: the sources, flags and optional parts (Vulkan, MPI, serve) are
the Makefile's.

Environment: AFINAR_SRC (the repository root; default: the folder above this one),
AFINAR_BUILD_DIR (a build folder to use and keep, e.g. to reuse objects between installs),
AFINAR_MAKE_JOBS (parallel jobs; default: the CPU count), AFINAR_MAKE_ARGS (extra make arguments,
e.g. "VULKAN=0")."""
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.environ.get("AFINAR_SRC") or os.path.join(HERE, ".."))


def _version():
    h = os.path.join(ROOT, "include", "afinar.h")
    try:
        with open(h, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        raise SystemExit("afinar: %s not found: build the package from the afinar repository "
                         "(pip install ./python), or set AFINAR_SRC to the repository root" % h)
    parts = [re.search(r"#define AF_VERSION_%s\s+(\d+)" % k, text) for k in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise SystemExit("afinar: %s: no AF_VERSION_MAJOR/MINOR/PATCH" % h)
    return ".".join(p.group(1) for p in parts)


class BuildWithMake(build_py):
    """build_py, then `make lib` and libafinar.so copied into the package."""

    def run(self):
        super().run()
        keep = os.environ.get("AFINAR_BUILD_DIR")
        bdir = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="afinar-build-")
        jobs = os.environ.get("AFINAR_MAKE_JOBS") or str(os.cpu_count() or 2)
        cmd = ["make", "-C", ROOT, "lib", "BUILD=" + bdir, "-j" + jobs]
        cmd += shlex.split(os.environ.get("AFINAR_MAKE_ARGS", ""))
        self.announce("afinar: " + " ".join(cmd), level=2)
        try:
            r = subprocess.run(cmd)
            if r.returncode != 0:
                raise SystemExit("afinar: building the C library failed (%s exited with %d); install the "
                                 "build dependencies with scripts/setup.sh" % (" ".join(cmd), r.returncode))
            so = os.path.realpath(os.path.join(bdir, "libafinar.so"))
            dst = os.path.join(self.build_lib, "afinar", "libafinar.so")
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(so, dst)
            # the Makefile compiles with -g: ship the library without its debug sections (symbols stay)
            if shutil.which("strip"):
                subprocess.run(["strip", "--strip-debug", dst])
        finally:
            if not keep:
                shutil.rmtree(bdir, ignore_errors=True)


class BinaryDistribution(Distribution):
    """The wheel holds a compiled library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(version=_version(), cmdclass={"build_py": BuildWithMake}, distclass=BinaryDistribution)
