"""A bounded wait on the compute stream for words that peers (or this rank's own push and send
streams) raise: p2p's replacement for a stream wait that could last forever.

    compute  [== fused kernel ==][error words -> ring][wait_peers: word[p] >= e, every p != rank, bounded][late words -> ring][event]
    push p                        ... [wait ready[p] (no deadline)][chunks][flags][pushed[p] = e]

Why a one-program kernel and not `cuStreamWaitValue32` (or `wait_stream` on the push stream): a
device wait has no deadline, so a peer that died or skipped a launch would hold the compute stream,
and everything the caller enqueues behind it, forever; its launch's ring event would never complete,
so neither the watchdog nor `check` could ever say why. The kernel polls as the fused kernel's own
waits do (device.py: block-wide acquire polls, at most a budget of polls compiled, a span of the
host's clock interpreted), and where the budget runs out it leaves (what, rank, peer, epoch) in the
launch's late words and ends: the ring's copy behind it, and its event, always complete, and the
host raises a SyncopyTimeout naming the peer. It runs after the fused kernel on the same stream,
never beside it, so it cannot be starved of an SM by tiles that spin, and the one budget covers
every peer: the stream goes on within the bound whatever the number of late peers.

Seeing the word is enough to order what follows after the work before it: the word is written by
a stream write-value (a memory barrier first) behind that work, and read with acquire semantics.
"""
from __future__ import annotations

import triton
import triton.language as tl

from syncopy import device as dev

# What a late word says the launch waited for (the first late word; 0: nothing was late).
PUSHED = 1  # consumer: this rank's pushes to the peer (the peer never got ready for the launch)
DELIVERED = 2  # reduce_scatter / all_reduce: the peer's partial sums of this rank's rows
SENT = 3  # reduce_scatter / all_reduce: this rank's sends to the peer (the peer never reduced the last launch)
GATHERED = 4  # all_reduce: the peer's reduced rows
LATE_WORDS = dev.SIG_HEADER  # [what, rank, peer, epoch]: the ring copies as many words as the kernel's error words


@triton.jit(do_not_specialize=["rank", "epoch", "limit"])  # one compiled kernel for every launch, not one per value class
def wait_peers(words, late, rank, world, epoch, limit, WHAT: tl.constexpr):
    """Wait until words[p] >= epoch (cyclically) for every p != rank, within one budget of `limit`
    polls (interpreted: microseconds); the first word still behind when it runs out is recorded in
    `late` as (WHAT, rank, p, epoch). A wait of the same launch that already ran out (late[0] set)
    waits for nothing: its budget was spent."""
    budget = limit.to(tl.int64)
    if dev.TIMED_WAITS:
        budget = budget + dev._now_us()  # interpreted: a deadline on the host's clock
    for p in range(0, world):
        if p != rank:
            if tl.atomic_add(late, 0, sem="relaxed", scope="sys") == 0:
                flag = dev._flag_of_block(words + p)
                if dev.TIMED_WAITS:
                    while dev._behind(flag, epoch) & (dev._now_us() < budget):
                        flag = dev._flag_of_block(words + p)
                else:
                    while dev._behind(flag, epoch) & (budget > 0):
                        dev._backoff()
                        flag = dev._flag_of_block(words + p)
                        budget -= 1
                if dev._behind(flag, epoch):
                    tl.atomic_xchg(late + 1, rank)
                    tl.atomic_xchg(late + 2, p)
                    tl.atomic_xchg(late + 3, epoch)
                    tl.atomic_xchg(late, WHAT, sem="release", scope="sys")
