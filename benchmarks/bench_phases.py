"""Chapter 05a's two phase kernels at the 434M model's shapes, over their launch parameters: chunks per loop step
(`CB`) and warps per program. GPU time per call from a CUDA graph of 20 calls replayed (the kernels take tens of
microseconds: timing launches from Python would measure the host). dt is read as the training step reads it, a slice
of the in_proj output (B, T, 5136), and once contiguous, to see what the strided read costs. One program per (batch,
head), as before 05a's split (`exp_phases_split.py` sweeps that). Prints one JSON record.

    python benchmarks/bench_phases.py --out benchmarks/results/phases_h200.json
"""
import argparse, itertools, json, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out"); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("bench_phases: needs a CUDA GPU")
    import triton
    from common import emit, graph_ms
    from mamba3_lite.ssd.triton.phases import block_size, phases_bwd_kernel, phases_fwd_kernel
    dev, Q, H, F = torch.device("cuda"), 64, 16, 5136
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for Bsz, T in ((16, 2048), (4, 8192)):
        NC = T // Q
        proj = torch.randn(Bsz, T, F, device=dev, generator=g).bfloat16()
        A_re, A_im = -torch.rand(H, device=dev, generator=g), torch.randn(H, device=dev, generator=g)
        f32 = dict(dtype=torch.float32, device=dev)
        alpha, alpha_lo, da, dth, kdk = (torch.randn(Bsz, NC * Q, H, generator=g, **f32) for _ in range(5))
        cos, sin = torch.empty(Bsz, T, H, **f32), torch.empty(Bsz, T, H, **f32)
        th_end, gs = torch.empty(Bsz, H, **f32), torch.randn(Bsz, NC, H, generator=g, **f32)
        dare, daim = torch.empty(Bsz, H, **f32), torch.empty(Bsz, H, **f32)
        for layout in ("slice of in_proj", "contiguous"):
            dt = proj[..., F - H:] if layout == "slice of in_proj" else proj[..., F - H:].contiguous()
            ddt = torch.empty_like(dt)
            for CB, warps in itertools.product((4, 8, 16, 32), (1, 2, 4, 8)):
                tps = triton.cdiv(NC, CB)                       # one program per (b, h) walks all the tiles
                fwd = lambda: phases_fwd_kernel[(Bsz * H,)](dt, A_re, A_im, A_im, alpha, alpha_lo, cos, sin, th_end,
                                                            *dt.stride(), T, H, Q, NC, tps, BQ=block_size(Q), CB=CB,
                                                            num_warps=warps)
                bwd = lambda: phases_bwd_kernel[(Bsz * H,)](dt, A_re, A_im, da, dth, dare, kdk, gs, alpha, ddt, dare,
                                                            daim, *dt.stride(), *ddt.stride(), T, H, Q, NC, tps,
                                                            HAS_DTHEND=False, HAS_END=True, BQ=block_size(Q), CB=CB,
                                                            num_warps=warps)
                r = dict(B=Bsz, T=T, dt=layout, CB=CB, warps=warps, fwd_us=round(1e3 * graph_ms(fwd), 2),
                         bwd_us=round(1e3 * graph_ms(bwd), 2))
                rows.append(r); print(json.dumps(r), flush=True)
    emit({"shape": "H=16, chunk 64, in_proj width 5136 (the 434M model)", "rows": rows}, device=dev, out=a.out,
         benchmark="phases_launch_sweep")


if __name__ == "__main__":
    main()
