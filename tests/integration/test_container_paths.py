"""`record --pid` into a container reads the files the process maps, not the host's files a link
planted in the container points at (a mount namespace and pivot_root stand in for a container;
a static program maps a library there)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.target import objects_of_process

pytestmark = pytest.mark.root

MAPS_TARGET = r"""
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
int main(void) {
    int fd = open("/lib/target.so", O_RDONLY);
    if (fd < 0 || mmap(0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED)
        return 1;
    puts("mapped");
    fflush(stdout);
    pause();
    return 0;
}
"""
CONTAINED = ("mount --bind \"$0\" \"$0\" && cd \"$0\" && mkdir old && pivot_root . old "
             "&& exec /maps-target")


def _compile(tmp_path: Path, source: str, out: Path, *flags: str) -> Path:
    src = tmp_path / f"{out.name}.c"
    src.write_text(source)
    subprocess.run(["cc", *flags, "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture
def contained(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A process in its own mount namespace whose root is `root`, mapping /lib/target.so (a
    library defining inside_the_container); its PID and root."""
    root = tmp_path / "root"
    (root / "lib").mkdir(parents=True)
    _compile(tmp_path, MAPS_TARGET, root / "maps-target", "-static", "-O1")
    _compile(tmp_path, "void inside_the_container(void) {}\n", root / "lib" / "target.so",
             "-shared", "-fPIC")
    with subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                           CONTAINED, str(root)], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "mapped\n"
            yield proc.pid, root
        finally:
            proc.kill()


def test_a_link_planted_in_the_container_does_not_lead_out_of_it(
        contained: tuple[int, Path], tmp_path: Path) -> None:
    pid, root = contained
    host = tmp_path / "host"
    host.mkdir()
    _compile(tmp_path, "void on_the_host(void) {}\n", host / "target.so", "-shared", "-fPIC")
    # The mapped file deleted, its name in /proc/PID/maps, "/lib/target.so (deleted)", is made
    # an absolute link: from /proc/PID/root it leads to the host's file.
    (root / "lib" / "target.so").unlink()
    (root / "lib" / "target.so (deleted)").symlink_to(host / "target.so")
    symbols = [ElfFile(p).symbols for p in objects_of_process(pid, [])]
    assert any("inside_the_container" in s for s in symbols)
    assert not any("on_the_host" in s for s in symbols)
