"""Write small random-weight GGUF models with real llama.cpp architectures.

    python scripts/make_models.py OUTDIR [--only NAME ...] [--force]

The weights are seeded random normals, so every run writes the same bytes. The models
produce gibberish, but they load and run through exactly the same llama.cpp code paths
(graph building, matmuls, MoE routing, KV cache) as real checkpoints of that shape.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt

T = gguf.MODEL_TENSOR
QType = gguf.GGMLQuantizationType
Tensor = tuple[str, tuple[int, ...]]  # GGUF name, shape in ggml order (ne0 first)

FILE_TYPES = {QType.F16: gguf.LlamaFileType.MOSTLY_F16, QType.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0}
ALWAYS_F32 = ("_norm.weight", "ffn_gate_inp.weight")  # as convert_hf_to_gguf.py keeps them
WEIGHT_STD = 0.02


@dataclass(frozen=True)
class Spec:
    name: str
    arch: gguf.MODEL_ARCH
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int  # dense FFN width, or the width of one expert for MoE models
    n_expert: int = 0
    n_expert_used: int = 0
    head_dim: int = 0  # 0: n_embd // n_head
    n_vocab: int = 512
    n_ctx: int = 512
    wtype: QType = QType.F16
    rope_base: float = 10000.0
    rms_eps: float = 1e-5
    retyped: tuple[tuple[str, QType], ...] = ()  # tensors of another type than wtype
    weights_of: str = ""  # the model whose weights these are ("": this one's own)

    @property
    def d_head(self) -> int:
        return self.head_dim or self.n_embd // self.n_head


LLAMA, QWEN3MOE = gguf.MODEL_ARCH.LLAMA, gguf.MODEL_ARCH.QWEN3MOE
# ~0.49B params, ~0.52 GB: Qwen2.5-0.5B-like depth and FFN width with a 32k vocab.
MEDIUM_LLAMA = Spec("medium-llama", LLAMA, n_layer=24, n_embd=1024, n_head=16, n_head_kv=4,
                    n_ff=4864, n_vocab=32000, n_ctx=4096, wtype=QType.Q8_0)
SPECS = [
    Spec("tiny-llama", LLAMA, n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=768),
    Spec("tiny-qwen3moe", QWEN3MOE, n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=256,
         n_expert=8, n_expert_used=2, rope_base=1e6, rms_eps=1e-6),
    Spec("tiny-mixtral", LLAMA, n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=512,
         n_expert=4, n_expert_used=2),
    MEDIUM_LLAMA,
    # medium-llama with one tensor of another type (layer 3's ffn_down in Q4_0): the graph
    # diff's case of a quantization change (`nox -s bench -- --only gate`).
    replace(MEDIUM_LLAMA, name="medium-llama-down3", weights_of="medium-llama",
            retyped=(("blk.3.ffn_down.weight", QType.Q4_0),)),
    # ~0.55B total / ~0.25B active params, ~0.59 GB: a shrunken Qwen3-30B-A3B.
    Spec("medium-qwen3moe", QWEN3MOE, n_layer=16, n_embd=1024, n_head=16, n_head_kv=4, n_ff=512,
         n_expert=16, n_expert_used=4, head_dim=128, n_vocab=32000, n_ctx=4096,
         wtype=QType.Q8_0, rope_base=1e6, rms_eps=1e-6),
]

WORDS = (
    "the of and to in is was for on that with as it by at from his her an be this are "
    "which or had not but have one all were they you she he we can there their time out "
    "first new city year world after people capital France Paris London Berlin Hello The "
    "Once upon a quick brown fox jumps over lazy dog story model token test small large"
)


def spm_vocab(n_vocab: int) -> tuple[list[str], list[float], list[gguf.TokenType]]:
    """A SentencePiece ("llama") vocab: specials, 256 byte tokens, then simple pieces.

    Every piece's prefixes are pieces too, so the SPM merge loop can build whole words.
    """
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN] + [gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.BYTE] * 256
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    chars = ["▁", *letters, *(c.upper() for c in letters), *"0123456789.,!?'-:;"]
    words = [f"▁{w}"[:k] for w in WORDS.split() for k in range(2, len(w) + 2)]
    bigrams = [a + b for a in letters for b in letters]
    trigrams = [a + b + c for a in letters for b in letters for c in letters]
    fillers = [p for x in bigrams + trigrams for p in (x, f"▁{x}")]
    seen = set(tokens)
    for piece in chars + words + fillers:
        if len(tokens) == n_vocab:
            break
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(gguf.TokenType.NORMAL)
    assert len(tokens) == n_vocab, "n_vocab too large for the generated pieces"
    scores = [0.0] * 259 + [-float(i) for i in range(n_vocab - 259)]
    return tokens, scores, types


def tn(tensor: gguf.MODEL_TENSOR, bid: int | None = None) -> str:
    return gguf.TENSOR_NAMES[tensor].format(bid=bid) + ".weight"


def common_tensors(s: Spec) -> list[Tensor]:
    """Embeddings, output head and the attention half of every block."""
    q, kv = s.n_head * s.d_head, s.n_head_kv * s.d_head
    out = [(tn(T.TOKEN_EMBD), (s.n_embd, s.n_vocab)), (tn(T.OUTPUT_NORM), (s.n_embd,)),
           (tn(T.OUTPUT), (s.n_embd, s.n_vocab))]
    for i in range(s.n_layer):
        out += [(tn(T.ATTN_NORM, i), (s.n_embd,)), (tn(T.ATTN_Q, i), (s.n_embd, q)),
                (tn(T.ATTN_K, i), (s.n_embd, kv)), (tn(T.ATTN_V, i), (s.n_embd, kv)),
                (tn(T.ATTN_OUT, i), (q, s.n_embd)), (tn(T.FFN_NORM, i), (s.n_embd,))]
    return out


def ffn_tensors(s: Spec, i: int) -> list[Tensor]:
    """SwiGLU FFN of block i: dense, or a routed mixture of n_expert such FFNs."""
    if not s.n_expert:
        return [(tn(T.FFN_GATE, i), (s.n_embd, s.n_ff)), (tn(T.FFN_UP, i), (s.n_embd, s.n_ff)),
                (tn(T.FFN_DOWN, i), (s.n_ff, s.n_embd))]
    e = s.n_expert
    return [(tn(T.FFN_GATE_INP, i), (s.n_embd, e)),
            (tn(T.FFN_GATE_EXP, i), (s.n_embd, s.n_ff, e)),
            (tn(T.FFN_UP_EXP, i), (s.n_embd, s.n_ff, e)),
            (tn(T.FFN_DOWN_EXP, i), (s.n_ff, s.n_embd, e))]


def llama_family(s: Spec, w: gguf.GGUFWriter) -> list[Tensor]:
    """LLaMA / Mixtral: arch "llama", MoE iff expert_count > 0."""
    return common_tensors(s) + [t for i in range(s.n_layer) for t in ffn_tensors(s, i)]


def qwen3moe_family(s: Spec, w: gguf.GGUFWriter) -> list[Tensor]:
    """Qwen3-MoE: llama-like blocks plus per-head Q/K RMS norms; every FFN is routed."""
    assert s.n_expert and s.n_expert_used
    w.add_expert_feed_forward_length(s.n_ff)
    norms = (T.ATTN_Q_NORM, T.ATTN_K_NORM)
    qk_norms = [(tn(t, i), (s.d_head,)) for i in range(s.n_layer) for t in norms]
    return common_tensors(s) + qk_norms + [t for i in range(s.n_layer) for t in ffn_tensors(s, i)]


FAMILIES: dict[gguf.MODEL_ARCH, Callable[[Spec, gguf.GGUFWriter], list[Tensor]]] = {
    LLAMA: llama_family,
    QWEN3MOE: qwen3moe_family,
}


def weight(tname: str, shape: tuple[int, ...], seed: int) -> npt.NDArray[np.float32]:
    """Deterministic weights: norms are ones, everything else N(0, WEIGHT_STD)."""
    np_shape = shape[::-1]  # numpy is row-major: outermost ggml dim first
    if tname.endswith("_norm.weight"):
        return np.ones(np_shape, dtype=np.float32)
    rng = np.random.default_rng([seed, zlib.crc32(tname.encode())])
    data = rng.standard_normal(np_shape, dtype=np.float32)
    data *= WEIGHT_STD
    return data


def write_model(s: Spec, path: Path) -> int:
    """Write spec s to path (via a temporary file); return the parameter count."""
    arch_name = gguf.MODEL_ARCH_NAMES[s.arch]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    w = gguf.GGUFWriter(tmp, arch_name)
    try:
        w.add_name(s.name)
        w.add_file_type(FILE_TYPES[s.wtype])
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        w.add_vocab_size(s.n_vocab)
        w.add_context_length(s.n_ctx)
        w.add_embedding_length(s.n_embd)
        w.add_block_count(s.n_layer)
        w.add_feed_forward_length(s.n_ff)
        w.add_head_count(s.n_head)
        w.add_head_count_kv(s.n_head_kv)
        w.add_key_length(s.d_head)
        w.add_value_length(s.d_head)
        w.add_rope_dimension_count(s.d_head)
        w.add_rope_freq_base(s.rope_base)
        w.add_layer_norm_rms_eps(s.rms_eps)
        if s.n_expert:
            w.add_expert_count(s.n_expert)
            w.add_expert_used_count(s.n_expert_used)

        tokens, scores, types = spm_vocab(s.n_vocab)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)

        n_params = 0
        allowed = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[s.arch]}
        for tname, shape in FAMILIES[s.arch](s, w):
            generic = ".".join("{bid}" if p.isdigit() else p for p in tname.split(".")[:-1])
            assert generic in allowed, f"{tname} is not a {arch_name} tensor"
            data = weight(tname, shape, seed=zlib.crc32((s.weights_of or s.name).encode()))
            n_params += data.size
            wtype = dict(s.retyped).get(tname, s.wtype)
            if len(shape) == 1 or tname.endswith(ALWAYS_F32):
                w.add_tensor(tname, data)
            elif wtype == QType.F16:
                w.add_tensor(tname, data.astype(np.float16))
            else:
                w.add_tensor(tname, gguf.quants.quantize(data, wtype), raw_dtype=wtype)

        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        tmp.replace(path)
    finally:
        w.close()
        tmp.unlink(missing_ok=True)  # only left behind if writing failed
    return n_params


def main(argv: list[str] | None = None) -> int:
    names = [s.name for s in SPECS]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--only", nargs="+", action="extend", metavar="NAME", choices=names,
                    help=f"models to write (default: all): {', '.join(names)}")
    ap.add_argument("--force", action="store_true", help="overwrite existing files")
    args = ap.parse_args(argv)

    args.outdir.mkdir(parents=True, exist_ok=True)
    for s in SPECS:
        path = args.outdir / f"{s.name}.gguf"
        if args.only and s.name not in args.only:
            continue
        if path.exists() and not args.force:
            print(f"{path}: exists, skipping")
            continue
        t0 = time.monotonic()
        n_params = write_model(s, path)
        mib = path.stat().st_size / 2**20
        print(f"{path}: {n_params / 1e6:.1f}M params, {mib:.1f} MiB, "
              f"{time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
