"""The one build step pyproject.toml cannot declare: the wheel carries the start-up hook
``eks_inference_node.pth`` at the root of ``site-packages`` (where Python reads ``.pth`` files),
so that jsii runs the pinned Node.js whatever an app imports first (``eks_inference.nodejs``).
Editable installs do not run it; ``make setup`` copies the hook into its environment instead.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HOOK = "eks_inference_node.pth"
SOURCE = Path("eks_inference") / "nodejs" / HOOK


class BuildPyWithStartupHook(build_py):
    """``build_py`` that also puts the start-up hook at the root of the wheel."""

    def run(self) -> None:
        super().run()
        self.copy_file(str(SOURCE), str(Path(self.build_lib) / HOOK))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / HOOK)]


setup(cmdclass={"build_py": BuildPyWithStartupHook})
