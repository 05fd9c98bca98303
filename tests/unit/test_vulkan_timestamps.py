"""record --gpu-timestamps in the trace model and its layout: the values a Vulkan split's GPU
timestamp queries read back, value i+1 less value i the device time of the i-th recording that
enqueued work, laid back to back on the device's track so that the last ends when the host
read them."""

from __future__ import annotations

from profinfer_perfetto.model.backends import VULKAN_NAME
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.names import DEVICE_TIME_ARG
from profinfer_perfetto.model.trace_model import build
from tests import synthetic
from tests.synthetic import READ_AT, VALUES, timed_step


def test_each_timed_recording_has_its_device_time_back_to_back_up_to_the_read() -> None:
    model = build(timed_step())
    device = model.device_ops
    assert device is not None
    assert list(zip(device.begin.tolist(), device.end.tolist(), strict=True)) == [
        (READ_AT - 1_000, READ_AT - 700), (READ_AT - 700, READ_AT)]
    # Each is the op its recording made: the node, and the node fused into it.
    ops = model.ops
    assert device.arg0.tolist() == ops.node[:2].tolist()
    assert device.arg1.tolist() == ops.fused[:2].tolist()
    assert [model.op_label(n, f) for n, f in zip(device.arg0, device.arg1, strict=True)] == [
        ("MUL_MAT", "ffn_up-0"), ("RMS_NORM+MUL", "attn_norm-0")]


def test_the_device_track_holds_slices_named_and_described_as_the_ops() -> None:
    layout = build_layout(build(timed_step()))
    (track,) = [i for i, t in enumerate(layout.tracks) if t.name == VULKAN_NAME]
    begins = (layout.track == track) & (layout.name >= 0)
    names = [layout.strings[n] for n in layout.name[begins]]
    assert names == ["MUL_MAT ffn_up-0", "RMS_NORM+MUL attn_norm-0"]
    for args in layout.args[begins]:
        assert DEVICE_TIME_ARG in layout.arg_sets[args]
    # The op slices on the thread are named the same.
    assert [layout.strings[n] for n in layout.name[(layout.track != track) & (layout.name >= 0)]
            ].count("MUL_MAT ffn_up-0") == 1


def test_a_reading_that_does_not_match_the_split_s_recordings_is_left_out() -> None:
    # Three recordings timed where two enqueued work (a recording's events lost): no guess.
    assert build(timed_step((*VALUES, 102_000))).device_ops is None
    # Without --gpu-timestamps no values come: no device track.
    model = build(synthetic.vulkan_step())
    assert model.device_ops is None
    assert VULKAN_NAME not in [t.name for t in build_layout(model).tracks]
