"""Chapter 05c's one-kernel backward (`bwd_chunk_kernel`) at the 434M model's training shape, launched a few times so
that Nsight Compute can profile one launch: where its warps wait (stall reasons), its occupancy, and its memory and
tensor-core throughput against the GPU's peaks; or (`--kernel state_bwd`) 05b's reverse state pass at the tiles the
package launches for that shape. The script only launches; the figures come from `ncu`:

    ncu -k regex:bwd_chunk_kernel --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \\
        python benchmarks/ncu_bwd_chunk.py > benchmarks/results/ncu_bwd_chunk_h200.txt

    ncu -k regex:state_bwd_kernel --launch-skip 3 --launch-count 1 --metrics \
        regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
        python benchmarks/ncu_bwd_chunk.py --kernel state_bwd --batch 4 --seq 8192

(the second form lists the warps' stall reasons, per issued instruction). `--batch 4 --seq 8192` for the long run's
micro-batch. On a CPU it refuses.
"""
import argparse, sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=5); p.add_argument("--kernel", choices=("bwd_chunk", "state_bwd"), default="bwd_chunk")
    p.add_argument("--batch", type=int, default=16); p.add_argument("--seq", type=int, default=2048); a = p.parse_args()
    if not torch.cuda.is_available(): sys.exit("ncu_bwd_chunk: needs a CUDA GPU")
    from common import TRAINING_SHAPE, scan_backward_inputs
    from mamba3_lite.ssd.triton.chunk_scan import scan_backward_chunk
    from mamba3_lite.ssd.triton.chunk_state import states_backward
    from mamba3_lite.ssd.triton.phases import device_capability
    from mamba3_lite.ssd.triton.real_ssd import batch_head_pairs, state_blocks, tune_for
    s = dict(TRAINING_SHAPE, Bsz=a.batch, T=a.seq)
    q, k, x, dy, alpha, states, dstates, g = scan_backward_inputs(*s.values())
    theta = torch.rand(a.batch, a.seq, s["H"], device="cuda", generator=g) * 6.28
    cos, sin, tune = theta.cos(), theta.sin(), tune_for(device_capability(q))
    for _ in range(a.calls):           # the first compiles; ncu's --launch-skip passes over the warm-up launches
        if a.kernel == "state_bwd":
            states_backward(q, dy, alpha, None, s["Q"], states.dtype, **state_blocks(tune, batch_head_pairs(q), backward=True))
        else:
            scan_backward_chunk(q, k, x, dy, alpha, states, dstates, s["Q"], cos, sin, x.dtype,
                                num_warps=tune["warps_chunk"], num_stages=tune["stages_chunk"], end_terms_apart=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
