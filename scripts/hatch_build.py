"""The package's build step (hatchling runs it for `pip install`, editable or not): the trace
encoder's renderer, encode/render.c, compiled to encode/_render.so, which encode/native.py loads
(numpy renders the same bytes where it is absent). An editable install builds it in place; a
wheel carries it, and is then tagged for this platform. Without a C compiler the package is
built without it, and says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

RENDERER = "profinfer_perfetto/encode/_render.so"


class RendererHook(BuildHookInterface):  # type: ignore[type-arg]
    folder: str | None = None
    """Where a wheel's renderer is built, until the wheel holds it."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        cc = shutil.which(os.environ.get("CC", "cc"))
        if cc is None:
            self.app.display_warning("no C compiler (cc): the trace encoder renders with numpy")
            return
        if version != "editable":
            self.folder = tempfile.mkdtemp()
        built = Path(self.folder, "_render.so") if self.folder else Path(self.root, RENDERER)
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(built),
                        str(Path(self.root, "profinfer_perfetto/encode/render.c"))], check=True)
        if self.folder:
            build_data["force_include"][str(built)] = RENDERER
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """The wheel holds the renderer now: its folder goes."""
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
