"""A Vulkan graph split in the trace model and its layout: each node recording an op of its
own, the nodes fused into it its fused second node, and the backend's submits, waits for the
device and copies slices of their own."""

from __future__ import annotations

from profinfer_perfetto.capture.events import HostCall, Kind
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.names import COPY_ARGS, HOST_CALL_SLICES
from profinfer_perfetto.model.trace_model import build
from tests import synthetic

e = synthetic.event
M = synthetic.MAIN



def test_each_recording_is_an_op_without_a_wait_and_fused_nodes_join_it() -> None:
    model = build(synthetic.vulkan_step())
    ops = model.ops
    assert ops.begin.tolist() == [2_100, 2_600, 3_100]
    # Its work and the op end at the recording's return: the loop after it is no wait.
    assert ops.work_end.tolist() == ops.end.tolist() == [2_500, 3_000, 3_400]
    labels = [model.op_label(n, f) for n, f in zip(ops.node, ops.fused, strict=True)]
    assert labels == [("MUL_MAT", "ffn_up-0"), ("RMS_NORM+MUL", "attn_norm-0"),
                      ("ADD", "l_out-0")]
    assert model.dropped_ops == 0


def test_the_last_recording_takes_the_node_fused_into_it_from_the_split_s_end() -> None:
    rec = synthetic.vulkan_step()
    last_end = rec.events["kind"] == Kind.GRAPH_END
    rec.events["arg1"][last_end] = synthetic.ATTN_NORM
    rec.events["arg1"][rec.events["arg0"] == synthetic.OUT] = 0
    ops = build(rec).ops
    assert ops.fused[:2].tolist() == [-1, -1] and ops.fused[2] >= 0


def test_host_calls_nest_and_copies_say_their_bytes_and_direction() -> None:
    model = build(synthetic.vulkan_step())
    calls = model.host_calls
    assert calls is not None
    assert [(HostCall(a), b, e) for a, b, e in zip(
        calls.aux.tolist(), calls.begin.tolist(), calls.end.tolist(), strict=True)] == [
        (HostCall.TO_DEVICE, 1_100, 1_500), (HostCall.SUBMIT, 1_200, 1_300),
        (HostCall.SUBMIT, 3_200, 3_300), (HostCall.WAIT, 3_500, 7_900)]
    layout = build_layout(model)
    names = [layout.strings[n] for n in layout.name[layout.name >= 0]]
    assert names.count(HOST_CALL_SLICES[HostCall.SUBMIT]) == 2
    assert names.count(HOST_CALL_SLICES[HostCall.WAIT]) == 1
    assert "graph Vulkan0" in names
    (copy,) = [a for n, a in zip(layout.name, layout.args, strict=True)
               if n >= 0 and layout.strings[n] == HOST_CALL_SLICES[HostCall.TO_DEVICE]]
    assert dict(layout.arg_sets[copy]) == dict(zip(COPY_ARGS, (256, "host_to_device"),
                                                   strict=True))
