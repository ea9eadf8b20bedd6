r"""Pipelines: fused operators that feed each other through per-chunk signals on the tensors they share.

    mlp = syncopy.pipeline()
    with mlp:                                         # launches inside are recorded, then run linked
        up[grid_up](x_shard, w1, h, ..., group=pg)    # h = act(all_gather(x_shard) @ w1)
        down[grid_down](h, w2, y, ..., group=pg)      # y = reduce_scatter(h @ w2)

Equivalent to the two launches one after the other. The dependency is inferred from the arguments
(after GrCUDA): `h` is the same tensor in both launches, the first kernel stores into it and the
second loads it, so the first becomes a producer of h's rows and the second a consumer. Each tile
of `up` that finishes its rows counts itself against h's chunks (the tile that completes a chunk
raises the chunk's flag to the pipeline's epoch); each tile of `down` waits for the chunks of h it
reads (passes/link.py). Nothing on the host stands between them:

    up tiles    [rows 0..31][rows 32..63]   ...                       (after their chunks of x land)
    h flags           ^ chunk 0  ^ chunk 1
    down tiles          [wait 0][rows 0..31][wait 1][rows 32..63] ... (their partials leave as they finish)

A launch enqueues and returns, like any CUDA op. Each link's per-launch words (error words cleared,
the epoch, the wait bound, counters from zero, the targets: tiles per chunk, found once per launch
shape by the writer's probe) are one batch of stream write-values on the caller's stream
(streamops.write_batch, no host write of a device word); after the operators, the link's error
words are copied into a pinned ring and read once that copy's event is done (LinkErrors, after
runtime/streams/error_ring.py): at the next launch or `pipe.synchronize()`, raising SyncopyTimeout naming rank,
chunk and epoch. On CPU ranks those copies are done when enqueued, so a starved reader raises as
its launch returns, as before.

Streams. On CPU ranks, from the second launch of a launch shape on, `down` (op 2) runs on a side
thread, started first, beside `up` on the caller's thread (`_beside`; `side_thread=False` keeps
them in order). The Triton interpreter keeps its program index and its patches of triton.language
per process; runtime/pipeline/interpreter_threads.py makes them safe for one kernel per thread. The two
kernels take turns under the GIL, and `down`'s tiles start as `up`'s tiles raise the chunks they
read (the trace shows it: `syncopy run tp_mlp --world 4 --trace t.json --timeline t.png`). The
reader's launch runs in the group turn the caller's thread holds for both (its transfers and the
writer's are told apart by their contexts' tags). On a GPU, from
the second launch of a launch shape on, `down` (op 2) runs on the pipeline's side stream, forked from the
caller's stream after the links' writes and joined back after it, so its tiles start on `up`'s
first finished chunks:

    caller stream  [link words][== up (op 1) ==========================]      [join][error words -> ring]
    side stream                 [== down (op 2): wait 0 | rows 0.. | wait 1 | rows ..==]
                                        ^ chunk 0's flag raised by up's tiles

A waiting tile holds its SM while it spins, and the block scheduler may place `down`'s tiles
before `up`'s (two streams, no order between them): if they could fill every SM, `up`'s remaining
tiles would never be scheduled and `down` would spin out its bound. So `down` goes beside `up`
only when its CTAs (programs x num_ctas) leave `up` an SM (`place`, `reader_side_limit`): at most
SMs - 1 on the copy-engine backends (some SM then holds no waiting tile of `down`), and, where a
transport keeps R SMs for its kernels (nccl), `up` and `down` together within SMs - R. Otherwise,
and on the first launch of each launch shape (compile, probe, the peers' rendezvous), or in pipelines of more than
two operators, both run in order on the caller's stream (`pipe.placement.why` says which).
`down` is enqueued after `up`, except in a world of one (`_reader_first_ok`): there `down` goes
first and already waits on the device when `up` is enqueued. No launch of a world of one waits on
the host for its kernel any more (its error words are read from a pinned ring at the next launch or
`synchronize()`, runtime/launch/sequence.py), but `down`'s launch takes longer on the host (a fused
loopback launch: 0.31 ms on an H100, benchmarks/results/h100-2026-11-27-s10) than `up`'s kernel
runs at small shapes (tens of microseconds), so enqueued after `up` it would start after `up` ended. The cost: `down`'s waits are bounded, and a host sync
of the whole device before `up` is enqueued ends as that link's SyncopyTimeout, never a hang. One
hardware queue for both streams (CUDA_DEVICE_MAX_CONNECTIONS=1) would do the same at every launch
(`down`'s copy of its result behind its kernel would hold `up` back), so there both run in order,
writer first, and `placement.why` says why (runtime/pipeline/placement.py: with one queue `down`
could not start before `up` ended in either order); tests/unit/test_world1_deferred.py checks that a warm world-1
launch (consumer or producer) reads and writes no device word through a host sync. Either way
`down`'s launch follows its own last launch through the fork (`_forked`), not through the caller's
stream, which may by then hold `up`.
A traced launch reads its tiles' records once both operators are enqueued.

What a pipeline keeps, per (operators, argument shapes, group) -- its plan, built at the first launch
of a shape: the edges, each operator's linked variant (its own contexts: buffers and signal pads
made once, reused by every launch) and one `LinkSignals` per edge. `max_plans` bounds them.
"""
from syncopy.runtime.pipeline.run import Pipeline, pipeline, recording

__all__ = ["Pipeline", "pipeline", "recording"]
