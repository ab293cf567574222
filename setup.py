"""The package build compiles every shader variant into vkx/shaders/spirv.zip (vkx.loader.gpu.spirv), so
that the installed runtime needs no glslc; the project's metadata is in pyproject.toml."""
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ARCHIVE = Path("vkx", "shaders", "spirv.zip")


_RUN = """import sys
sys.path.insert(0, sys.argv[1])
# the package being built, not an editable install of it in the building environment
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
from vkx.loader.gpu import spirv
sys.exit(spirv.main([sys.argv[2], "--if-stale"]))
"""


def build_spirv(package_root: str, out: Path) -> None:
    """Run vkx.loader.gpu.spirv from the laid-out package at `package_root` (an sdist's archive is kept
    when it is current; otherwise glslc builds it)."""
    subprocess.run([sys.executable, "-c", _RUN, package_root, str(out)], check=True)


class BuildPyWithSpirv(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:  # an editable install uses `make shaders`' archive in the tree
            build_spirv(self.build_lib, Path(self.build_lib) / ARCHIVE)


class SdistWithSpirv(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        self.run_command("build_py")
        built = self.get_finalized_command("build_py").build_lib
        target = Path(base_dir, "shaders", "spirv.zip")
        target.unlink(missing_ok=True)  # a hard link to the tree's copy: never write through it
        target.write_bytes(Path(built, ARCHIVE).read_bytes())


setup(cmdclass={"build_py": BuildPyWithSpirv, "sdist": SdistWithSpirv})
