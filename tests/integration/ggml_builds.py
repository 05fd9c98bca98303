"""What four llama.cpp builds (vendored by llama-cpp-python 0.3.2, 0.3.14, 0.3.19, 0.3.36) are,
as compiled `offsetof` and `ggml_op_name` & co (through ctypes, outside the profiler) gave them
when the builds were made: only a cross-check of what analysis/ggml.py derives from their code."""

from __future__ import annotations

from dataclasses import dataclass

from profinfer_perfetto.analysis.ggml import RuntimeLayout, TensorLayout


@dataclass(frozen=True)
class Build:
    layout: TensorLayout
    runtime: RuntimeLayout
    version: str
    ops: str
    unary_ops: str
    glu_ops: str
    types: str
    """name:block/size of each type, separated by semicolons (names may hold commas)."""


CGRAPH_NODES = 16
"""ggml_cgraph's nodes array: after three ints (size, n_nodes, n_leafs), in every build since
2024 (ggml-impl.h declares the struct; it is internal, so no ctypes offsetof reaches it)."""
_LAYOUT_2025 = TensorLayout(type=0, ne=16, nb=48, op=80, op_params=84, flags=148, src=152,
                           n_src=10, view_src=232, data=248, name=256, name_len=64, size=336)
"""struct ggml_tensor of every build from mid-2025 on (compiled offsetof)."""
_TYPES_2025 = (
    "f32:1/4;f16:1/2;q4_0:32/18;q4_1:32/20;DEPRECATED:0/0;DEPRECATED:0/0;q5_0:32/22;"
    "q5_1:32/24;q8_0:32/34;q8_1:32/36;q2_K:256/84;q3_K:256/110;q4_K:256/144;"
    "q5_K:256/176;q6_K:256/210;q8_K:256/292;iq2_xxs:256/66;iq2_xs:256/74;"
    "iq3_xxs:256/98;iq1_s:256/50;iq4_nl:32/18;iq3_s:256/110;iq2_s:256/82;"
    "iq4_xs:256/136;i8:1/1;i16:1/2;i32:1/4;i64:1/8;f64:1/8;iq1_m:256/56;bf16:1/2;"
    "TYPE_Q4_0_4_4 REMOVED, use Q4_0 with runtime repacking:0/0;"
    "TYPE_Q4_0_4_8 REMOVED, use Q4_0 with runtime repacking:0/0;"
    "TYPE_Q4_0_8_8 REMOVED, use Q4_0 with runtime repacking:0/0;tq1_0:256/54;"
    "tq2_0:256/66;TYPE_IQ4_NL_4_4 REMOVED, use IQ4_NL with runtime repacking:0/0;"
    "TYPE_IQ4_NL_4_8 REMOVED, use IQ4_NL with runtime repacking:0/0;"
    "TYPE_IQ4_NL_8_8 REMOVED, use IQ4_NL with runtime repacking:0/0"
)
"""The types of every build from mid-2025 on; later ones add theirs at the end."""


BUILDS = {
    "0.3.2": Build(
        layout=TensorLayout(type=0, ne=16, nb=48, op=80, op_params=84, flags=148, src=160, n_src=10,
                            view_src=240, data=256, name=264, name_len=64, size=336),
        runtime=RuntimeLayout(4, 16, 0, 0, cgraph_nodes=CGRAPH_NODES),
        version="unknown",
        ops=(
            "NONE DUP ADD ADD1 ACC SUB MUL DIV SQR SQRT LOG SIN COS SUM SUM_ROWS MEAN ARGMAX "
            "COUNT_EQUAL REPEAT REPEAT_BACK CONCAT SILU_BACK NORM RMS_NORM RMS_NORM_BACK "
            "GROUP_NORM MUL_MAT MUL_MAT_ID OUT_PROD SCALE SET CPY CONT RESHAPE VIEW PERMUTE "
            "TRANSPOSE GET_ROWS GET_ROWS_BACK DIAG DIAG_MASK_INF DIAG_MASK_ZERO SOFT_MAX "
            "SOFT_MAX_BACK ROPE ROPE_BACK CLAMP CONV_TRANSPOSE_1D IM2COL IM2COL_BACK "
            "CONV_TRANSPOSE_2D POOL_1D POOL_2D POOL_2D_BACK UPSCALE PAD ARANGE "
            "TIMESTEP_EMBEDDING ARGSORT LEAKY_RELU FLASH_ATTN_EXT FLASH_ATTN_BACK SSM_CONV "
            "SSM_SCAN WIN_PART WIN_UNPART GET_REL_POS ADD_REL_POS RWKV_WKV6 UNARY MAP_UNARY "
            "MAP_BINARY MAP_CUSTOM1_F32 MAP_CUSTOM2_F32 MAP_CUSTOM3_F32 MAP_CUSTOM1 "
            "MAP_CUSTOM2 MAP_CUSTOM3 CROSS_ENTROPY_LOSS CROSS_ENTROPY_LOSS_BACK "
            "OPT_STEP_ADAMW"
        ),
        unary_ops=(
            "ABS SGN NEG STEP TANH ELU RELU SIGMOID GELU GELU_QUICK SILU HARDSWISH "
            "HARDSIGMOID EXP"
        ),
        glu_ops=(
            ""
        ),
        types=(
            "f32:1/4;f16:1/2;q4_0:32/18;q4_1:32/20;DEPRECATED:0/0;DEPRECATED:0/0;q5_0:32/22;"
            "q5_1:32/24;q8_0:32/34;q8_1:32/36;q2_K:256/84;q3_K:256/110;q4_K:256/144;"
            "q5_K:256/176;q6_K:256/210;q8_K:256/292;iq2_xxs:256/66;iq2_xs:256/74;"
            "iq3_xxs:256/98;iq1_s:256/50;iq4_nl:32/18;iq3_s:256/110;iq2_s:256/82;"
            "iq4_xs:256/136;i8:1/1;i16:1/2;i32:1/4;i64:1/8;f64:1/8;iq1_m:256/56;bf16:1/2;"
            "q4_0_4x4:32/18;q4_0_4x8:32/18;q4_0_8x8:32/18;tq1_0:256/54;tq2_0:256/66"
        ),
    ),
    "0.3.14": Build(
        layout=_LAYOUT_2025,
        runtime=RuntimeLayout(4, 16, 0, 0, cgraph_nodes=CGRAPH_NODES),
        version="0.0.0",
        ops=(
            "NONE DUP ADD ADD1 ACC SUB MUL DIV SQR SQRT LOG SIN COS SUM SUM_ROWS MEAN ARGMAX "
            "COUNT_EQUAL REPEAT REPEAT_BACK CONCAT SILU_BACK NORM RMS_NORM RMS_NORM_BACK "
            "GROUP_NORM L2_NORM MUL_MAT MUL_MAT_ID OUT_PROD SCALE SET CPY CONT RESHAPE VIEW "
            "PERMUTE TRANSPOSE GET_ROWS GET_ROWS_BACK SET_ROWS DIAG DIAG_MASK_INF "
            "DIAG_MASK_ZERO SOFT_MAX SOFT_MAX_BACK ROPE ROPE_BACK CLAMP CONV_TRANSPOSE_1D "
            "IM2COL IM2COL_BACK CONV_2D CONV_2D_DW CONV_TRANSPOSE_2D POOL_1D POOL_2D "
            "POOL_2D_BACK UPSCALE PAD PAD_REFLECT_1D ROLL ARANGE TIMESTEP_EMBEDDING ARGSORT "
            "LEAKY_RELU FLASH_ATTN_EXT FLASH_ATTN_BACK SSM_CONV SSM_SCAN WIN_PART WIN_UNPART "
            "GET_REL_POS ADD_REL_POS RWKV_WKV6 GATED_LINEAR_ATTN RWKV_WKV7 UNARY MAP_CUSTOM1 "
            "MAP_CUSTOM2 MAP_CUSTOM3 CUSTOM CROSS_ENTROPY_LOSS CROSS_ENTROPY_LOSS_BACK "
            "OPT_STEP_ADAMW GLU"
        ),
        unary_ops=(
            "ABS SGN NEG STEP TANH ELU RELU SIGMOID GELU GELU_QUICK SILU HARDSWISH "
            "HARDSIGMOID EXP GELU_ERF"
        ),
        glu_ops=(
            "REGLU GEGLU SWIGLU GEGLU_ERF GEGLU_QUICK"
        ),
        types=_TYPES_2025,
    ),
    "0.3.19": Build(
        layout=_LAYOUT_2025,
        runtime=RuntimeLayout(4, 16, 0, 0, cgraph_nodes=CGRAPH_NODES),
        version="0.9.8",
        ops=(
            "NONE DUP ADD ADD_ID ADD1 ACC SUB MUL DIV SQR SQRT LOG SIN COS SUM SUM_ROWS "
            "CUMSUM MEAN ARGMAX COUNT_EQUAL REPEAT REPEAT_BACK CONCAT SILU_BACK NORM RMS_NORM "
            "RMS_NORM_BACK GROUP_NORM L2_NORM MUL_MAT MUL_MAT_ID OUT_PROD SCALE SET CPY CONT "
            "RESHAPE VIEW PERMUTE TRANSPOSE GET_ROWS GET_ROWS_BACK SET_ROWS DIAG "
            "DIAG_MASK_INF DIAG_MASK_ZERO SOFT_MAX SOFT_MAX_BACK ROPE ROPE_BACK CLAMP "
            "CONV_TRANSPOSE_1D IM2COL IM2COL_BACK IM2COL_3D CONV_2D CONV_3D CONV_2D_DW "
            "CONV_TRANSPOSE_2D POOL_1D POOL_2D POOL_2D_BACK UPSCALE PAD PAD_REFLECT_1D ROLL "
            "ARANGE TIMESTEP_EMBEDDING ARGSORT TOP_K LEAKY_RELU TRI FILL FLASH_ATTN_EXT "
            "FLASH_ATTN_BACK SSM_CONV SSM_SCAN WIN_PART WIN_UNPART GET_REL_POS ADD_REL_POS "
            "RWKV_WKV6 GATED_LINEAR_ATTN RWKV_WKV7 SOLVE_TRI GATED_DELTA_NET UNARY "
            "MAP_CUSTOM1 MAP_CUSTOM2 MAP_CUSTOM3 CUSTOM CROSS_ENTROPY_LOSS "
            "CROSS_ENTROPY_LOSS_BACK OPT_STEP_ADAMW OPT_STEP_SGD GLU"
        ),
        unary_ops=(
            "ABS SGN NEG STEP TANH ELU RELU SIGMOID GELU GELU_QUICK SILU HARDSWISH "
            "HARDSIGMOID EXP EXPM1 SOFTPLUS GELU_ERF XIELU FLOOR CEIL ROUND TRUNC"
        ),
        glu_ops=(
            "REGLU GEGLU SWIGLU SWIGLU_OAI GEGLU_ERF GEGLU_QUICK"
        ),
        types=(
            _TYPES_2025 + ";mxfp4:32/17;"
            "nvfp4:64/36"
        ),
    ),
    "0.3.36": Build(
        layout=_LAYOUT_2025,
        runtime=RuntimeLayout(4, 16, 64, 96, batch_ext_pos=80, batch_ext_seq_ids=24,
                              cgraph_nodes=CGRAPH_NODES),
        version="0.25.3",
        ops=(
            "NONE DUP ADD ADD_ID ADD1 ACC SUB MUL DIV SQR SQRT LOG SIN COS SUM SUM_ROWS "
            "CUMSUM MEAN ARGMAX COUNT_EQUAL REPEAT REPEAT_BACK CONCAT SILU_BACK NORM RMS_NORM "
            "RMS_NORM_BACK GROUP_NORM L2_NORM MUL_MAT MUL_MAT_ID OUT_PROD SCALE SET CPY CONT "
            "RESHAPE VIEW PERMUTE TRANSPOSE GET_ROWS GET_ROWS_BACK SET_ROWS DIAG "
            "DIAG_MASK_INF DIAG_MASK_ZERO SOFT_MAX SOFT_MAX_BACK ROPE ROPE_BACK CLAMP "
            "CONV_TRANSPOSE_1D IM2COL IM2COL_BACK IM2COL_3D COL2IM_1D CONV_2D CONV_3D "
            "CONV_2D_DW CONV_TRANSPOSE_2D POOL_1D POOL_2D POOL_2D_BACK UPSCALE PAD "
            "PAD_REFLECT_1D ROLL ARANGE TIMESTEP_EMBEDDING ARGSORT TOP_K LEAKY_RELU TRI FILL "
            "FLASH_ATTN_EXT FLASH_ATTN_BACK SSM_CONV SSM_SCAN WIN_PART WIN_UNPART GET_REL_POS "
            "ADD_REL_POS RWKV_WKV6 GATED_LINEAR_ATTN RWKV_WKV7 SOLVE_TRI GATED_DELTA_NET "
            "LIGHTNING_INDEXER DSV4_HC_COMB DSV4_HC_PRE DSV4_HC_POST UNARY MAP_CUSTOM1 "
            "MAP_CUSTOM2 MAP_CUSTOM3 CUSTOM CROSS_ENTROPY_LOSS CROSS_ENTROPY_LOSS_BACK "
            "OPT_STEP_ADAMW OPT_STEP_SGD GLU"
        ),
        unary_ops=(
            "ABS SGN NEG STEP TANH ELU RELU SIGMOID GELU GELU_QUICK SILU HARDSWISH "
            "HARDSIGMOID EXP EXPM1 SOFTPLUS GELU_ERF XIELU FLOOR CEIL ROUND TRUNC"
        ),
        glu_ops=(
            "REGLU GEGLU SWIGLU SWIGLU_OAI GEGLU_ERF GEGLU_QUICK SWIGLU_CLAMP"
        ),
        types=(
            _TYPES_2025 + ";mxfp4:32/17;"
            "nvfp4:64/36;q1_0:128/18;q2_0:64/18"
        ),
    ),
}
