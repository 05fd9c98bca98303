"""The reader of GGML_SCHED_DEBUG=2's printout (tests/integration/vulkan_oracle.py), on what
the Vulkan build printed for Gemma-3-270M at -ngl 99 (its 725-node graph cut to a few nodes)."""

from __future__ import annotations

from tests.integration.vulkan_oracle import Node, parse_sched_debug

SPLITS = """\

## SPLIT #0: CPU # 0 inputs
node #  0 (  GET_ROWS):                 embd (   2K) [  CPU         ] use=1,c=1:    token_embd.weight ( 170M) [  CPU         ]           inp_tokens (   0K) [  CPU         ]

## SPLIT #1: Vulkan0 # 9 inputs: [embd (   2K)] [inp_pos (   0K)] [attn_inp_k_idxs (   0K)] [attn_inp_v_idxs (   0K)] [attn_inp_kq_mask (   0K)] [attn_inp_k_idxs (   0K)] [attn_inp_v_idxs (   0K)] [attn_inp_kq_mask (   0K)] [out_ids (   0K)]
node #  1 (     SCALE):           inp_scaled (   2K) [Vulka         ] use=2,c=1:       Vulkan0#embd#0 (   2K) [ NULL         ]
node #  3 (       MUL):          attn_norm-0 (   2K) [Vulka         ] use=3,c=1:               norm-0 (   2K) [Vulka         ] blk.0.attn_norm.weig (   2K) [Vulka         ]
node #722 (       MUL):     ffn_post_norm-17 (   2K) [Vulka         ] use=1,c=1:                 norm (   2K) [Vulka         ] blk.17.post_ffw_norm (   2K) [Vulka         ]

## SPLIT #2: CPU # 1 inputs: [result_norm (   2K)]
node #726 (   MUL_MAT):        result_output (   1M) [  CPU         ] use=0,c=1:    token_embd.weight ( 170M) [  CPU         ]    CPU#result_norm#0 (   2K) [ NULL         ]
"""  # noqa: E501


def test_each_printout_is_a_graph_and_a_reserved_one_is_marked() -> None:
    text = ("graph_reserve: reserving a graph for ubatch with n_tokens =    1, n_seqs =  1\n"
            + SPLITS + "n_past = 3\nn_remain: 3\n" + SPLITS)
    reserved, computed = parse_sched_debug(text)
    assert reserved.reserved and not computed.reserved
    assert reserved.splits == computed.splits
    assert [(s.backend, s.inputs, len(s.nodes)) for s in computed.splits] == [
        ("CPU", 0, 1), ("Vulkan0", 9, 3), ("CPU", 1, 1)]
    assert computed.splits[1].nodes == (Node(1, "SCALE", "inp_scaled"),
                                        Node(3, "MUL", "attn_norm-0"),
                                        Node(722, "MUL", "ffn_post_norm-17"))
    assert computed.splits[2].nodes == (Node(726, "MUL_MAT", "result_output"),)


def test_a_name_with_spaces_and_brackets_is_read_whole() -> None:
    line = ("node #  5 (      CONT):    x (copy) [3] of y (   2K) [Vulka         ] use=1,c=1:"
            "                 norm (   2K) [Vulka         ]")
    (graph,) = parse_sched_debug("## SPLIT #0: Vulkan0 # 0 inputs\n" + line)
    assert graph.splits[0].nodes == (Node(5, "CONT", "x (copy) [3] of y"),)
