"""scripts/timeline_svg.py's panels: a bar per slice within the window, at its place and width,
labelled where its name fits, a slice on the pixels of the one before left out, the device's
slices coloured by op."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from scripts.timeline_svg import DEVICE, DEVICE_COLOURS, LEFT, RIGHT, WIDTH, Bar, panel

SVG = "{http://www.w3.org/2000/svg}"
MS = 1_000_000


def _drawn(bars: list[Bar], window: tuple[int, int]) -> ET.Element:
    parts, _ = panel(bars, 0, window, 0, "test")
    return ET.fromstring('<svg xmlns="http://www.w3.org/2000/svg">' + "".join(parts) + "</svg>")


def test_a_bar_per_slice_in_the_window_at_its_place() -> None:
    bars = [Bar((0, 0), "decode", 0, 100 * MS), Bar((0, 1), "graph Vulkan0", 10 * MS, 50 * MS),
            Bar((0, 1), "graph CPU", 150 * MS, 5 * MS)]  # after the window
    svg = _drawn(bars, (0, 100 * MS))
    rects = {r.findtext(f"{SVG}title"): r for r in svg.iter(f"{SVG}rect")}
    assert set(rects) == {"decode 100 ms", "graph Vulkan0 50 ms"}
    scale = (WIDTH - LEFT - RIGHT) / (100 * MS)
    graph = rects["graph Vulkan0 50 ms"]
    assert float(graph.get("x", "")) == round(LEFT + 10 * MS * scale, 1)
    assert abs(float(graph.get("width", "")) - 50 * MS * scale) < 1
    labels = [t.text for t in svg.iter(f"{SVG}text")]
    assert "graph Vulkan0 50 ms" in labels and "decode 100 ms" in labels


def test_a_slice_on_the_pixels_of_the_one_before_is_left_out() -> None:
    bars = [Bar((0, 2), "MUL_MAT a", 0, 1000), Bar((0, 2), "MUL_MAT b", 1000, 1000),
            Bar((0, 2), "MUL_MAT c", 50 * MS, 1000)]
    svg = _drawn(bars, (0, 100 * MS))
    titles = [r.findtext(f"{SVG}title") for r in svg.iter(f"{SVG}rect")]
    assert [t.split()[1] for t in titles if t] == ["a", "c"]


def test_device_slices_coloured_by_op_and_clipped_to_the_window() -> None:
    bars = [Bar((DEVICE, 0), "MUL_MAT Qcur-0", 5 * MS, 10 * MS),
            Bar((DEVICE, 0), "ROPE Qcur-0", 15 * MS, 10 * MS)]
    svg = _drawn(bars, (10 * MS, 10 * MS))
    fills = {r.findtext(f"{SVG}title"): r.get("fill") for r in svg.iter(f"{SVG}rect")}
    assert fills == {"MUL_MAT Qcur-0 10 ms": DEVICE_COLOURS["MUL_MAT"],
                     "ROPE Qcur-0 10 ms": DEVICE_COLOURS[""]}
    xs = [float(r.get("x", "")) for r in svg.iter(f"{SVG}rect")]
    assert min(xs) == LEFT and all(x <= WIDTH - RIGHT for x in xs)
    texts = [t.text or "" for t in svg.iter(f"{SVG}text")]
    ticks = [t for t in texts if re.fullmatch(r"\+\S+ ms", t)]
    assert ticks[0] == "+10 ms" and ticks[-1] == "+20 ms"
