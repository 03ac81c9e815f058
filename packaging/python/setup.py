"""The wheel holds a native library and GPU code: mark it platform-specific with a manylinux-style
tag of the glibc it was built against (packaging/build.sh stages libaotinfer.so and the kernel
package into aotinfer/ before building)."""
import platform

from setuptools import setup
from setuptools.dist import Distribution
from wheel.bdist_wheel import bdist_wheel


class BinaryDistribution(Distribution):
    """Native code inside: install into platlib, not as a pure-Python package."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        libc, version = platform.libc_ver()
        major, minor = (version.split(".") + ["0"])[:2] if libc == "glibc" else ("2", "17")
        return "py3", "none", f"manylinux_{major}_{minor}_{platform.machine()}"


setup(distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
