"""Kernel timings behind one speculative round at the Alpamayo 1.5-10B shape (bf16, CUDA):
the lm_head GEMM for M query rows, and attention of a short query block over the cache
through each SDPA backend and layout. Prints a markdown table per part.

    python3 scripts/decode_kernels.py [--cache 3300] [--iters 200]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HIDDEN, VOCAB, Q_HEADS, KV_HEADS, HEAD_DIM = 4096, 155697, 32, 8, 128


def time_ms(fn, iters: int) -> float:
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def lm_head_rows(iters: int) -> None:
    weight = torch.randn(VOCAB, HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.02
    weight_t = weight.t().contiguous()  # [H, V]
    gb = weight.numel() * weight.element_size() / 1e6
    print("| rows M | x W^T ms | (W x^T)^T ms | x (W^T stored) ms | best weight read GB/s |\n"
          "|---|---|---|---|---|")
    for rows in (1, 7, 8, 9, 16, 17, 32, 64):
        x = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16)
        times = (time_ms(lambda x=x: F.linear(x, weight), iters),
                 time_ms(lambda x=x: (weight @ x.t()).t(), iters),
                 time_ms(lambda x=x: x @ weight_t, iters))
        cells = " | ".join(f"{ms:.3f}" for ms in times)
        print(f"| {rows} | {cells} | {gb / min(times):.0f} |")


def grouped(q: torch.Tensor) -> torch.Tensor:
    """[1, Hq, T, D] -> [1, Hkv, G*T, D]: the query heads sharing a kv head on one axis."""
    return q.reshape(1, KV_HEADS, Q_HEADS // KV_HEADS * q.shape[2], HEAD_DIM)


def block_attention(cache: int, iters: int) -> None:
    print("\n| query rows | layout | backend | ms per layer | x36 layers ms |\n"
          "|---|---|---|---|---|")
    k = torch.randn(1, KV_HEADS, cache, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    k_full = k.repeat_interleave(Q_HEADS // KV_HEADS, 1)
    v_full = v.repeat_interleave(Q_HEADS // KV_HEADS, 1)
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    for rows in (1, 9, 17):
        q = torch.randn(1, Q_HEADS, rows, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        layouts = {
            "gqa": lambda be, q=q: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            "expanded kv": lambda be, q=q: F.scaled_dot_product_attention(q, k_full, v_full),
            "grouped queries": lambda be, q=q: F.scaled_dot_product_attention(grouped(q), k, v),
        }
        for layout, call in layouts.items():
            for name, backend in backends.items():
                def run(call=call, backend=backend):
                    with sdpa_kernel([backend]):
                        return call(backend)
                try:
                    ms = time_ms(run, iters)
                except RuntimeError as exc:
                    why = str(exc).splitlines()[0][:60]
                    print(f"| {rows} | {layout} | {name} | n/a: {why} | |")
                    continue
                print(f"| {rows} | {layout} | {name} | {ms:.4f} | {36 * ms:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=int, default=3300)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--lm-head-only", action="store_true")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bfloat16, "
          f"cache {args.cache} slots, {args.iters} graph replays per figure\n")
    lm_head_rows(args.iters)
    if not args.lm_head_only:
        block_attention(args.cache, args.iters)


if __name__ == "__main__":
    main()
