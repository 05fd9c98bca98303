"""The package's build step (hatchling runs it for `pip install`, editable or not): its C
sources compiled beside them (LIBRARIES: the trace encoder's renderer, encode/render.c, and the
model's passes, model/passes.c), which profinfer_perfetto/compiled.py loads (numpy computes the
same where they are absent). An editable install builds them in place; a wheel carries them,
and is then tagged for this platform. Without a C compiler the package is built without them,
and says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LIBRARIES = {"profinfer_perfetto/encode/_render.so": "profinfer_perfetto/encode/render.c",
             "profinfer_perfetto/model/_passes.so": "profinfer_perfetto/model/passes.c"}
"""Each library the install builds, from its source."""


class LibrariesHook(BuildHookInterface):  # type: ignore[type-arg]
    folder: str | None = None
    """Where a wheel's libraries are built, until the wheel holds them."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        cc = shutil.which(os.environ.get("CC", "cc"))
        if cc is None:
            self.app.display_warning("no C compiler (cc): the trace is modelled and encoded "
                                     "with numpy")
            return
        if version != "editable":
            self.folder = tempfile.mkdtemp()
        for library, source in LIBRARIES.items():
            built = (Path(self.folder, Path(library).name) if self.folder
                     else Path(self.root, library))
            subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(built),
                            str(Path(self.root, source))], check=True)
            if self.folder:
                build_data["force_include"][str(built)] = library
        if self.folder:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """The wheel holds the libraries now: their folder goes."""
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
