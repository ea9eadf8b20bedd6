"""What moves chunks and raises their flags: the backends (gloo on CPU ranks, p2p copy-engine puts and
nccl on GPUs) with their control plane, the emulated link and injected faults, uneven all_to_all
splits, and the one-pass reduction of partial sums."""
