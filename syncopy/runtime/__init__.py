"""The runtime: what a launch of a fused operator does, and what moves its chunks.

Folders, from the top (each imports only from the ones below it; tests/unit/test_layering.py):

    worlds/     several ranks in one process or on one machine, for tests, benchmarks and `syncopy run`:
                the loopback world (peers emulated on one GPU), the thread world, local process worlds
    pipeline/   fused operators that feed each other through per-chunk signals on the tensors they share
    launch/     one launch of one operator, in order: bind the arguments, find the context, order the
                tiles, start the transfers, run the kernel, report (the sequence), and the operator's
                tuning, warm-up, tracing and reference
    transport/  what moves chunks: the backends (gloo, p2p, nccl) and their control plane, the emulated
                link and injected faults, uneven splits, the one-pass reduction
    state/      what the launch and the transports share: a rank's plan, its instruction graph, the
                context (buffers, signal pad, epoch)
    streams/    the driver underneath: stream write-values and waits, the error ring read off the launch
                path, the watchdog, SMs left to communication kernels, CUDA-graph epochs
    trace/      what a launch did, as records, a Chrome trace and a timeline picture
    where.py    where a launch runs: interpreted or compiled, the poll budget of a wait, the launch's GPU
"""
