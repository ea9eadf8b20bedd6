"""What a launch reports when it goes wrong: chunks never written, peers whose connection dropped, and the
SyncopyTimeout that names rank, chunk and epoch."""
from __future__ import annotations



from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyCorruptChunk, SyncopyTimeout
from syncopy.runtime.state.context import Context


def _announce_unwritten(ctx: Context, tiles_per_chunk: list[int]) -> None:
    """Chunks no tile writes in this launch are final at once (they hold the partial's initial
    contents): raise their flags now, after _init_partial, so no transfer waits for a tile."""
    for g, count in enumerate(tiles_per_chunk):
        if count == 0:
            ctx.signals[dev.SIG_HEADER + g : dev.SIG_HEADER + g + 1] = ctx.word  # a fill: no host sync on GPUs


def _dropped_out(transfer) -> str:
    """What a backend knows of peers whose connection failed during the launch ('' if none)."""
    return transfer.dropped_out() if hasattr(transfer, "dropped_out") else ""


def _and(detail: str, gone: str) -> str:
    return f"{detail}; {gone}" if gone else detail


def _advice(gone: str) -> str:
    """What a SyncopyTimeout should tell the user to do: a peer that dropped out is no slow link."""
    # A peer that only gave up on its own timeout (backends/gloo.py) is alive: the usual advice holds.
    lost = "dropped out" in gone or "it died" in gone
    return "look for the cause in that rank's own output, then restart the job" if lost else SyncopyTimeout.ADVICE


def _raise_if_corrupt(ctx: Context, epoch: int, transfer) -> None:
    """verify_chunks: a chunk landed whose bytes do not match its sender's checksum (the first one
    found is named). The transfers completed: the operator and its group may launch again."""
    corrupt = getattr(transfer, "corrupt", None)
    if corrupt:
        chunk, peer, upstream = corrupt[0]
        raise SyncopyCorruptChunk(ctx.plan.rank, divmod(chunk, ctx.plan.chunks_per_rank), epoch, peer, upstream)


def _raise_if_dropped_out(ctx: Context, epoch: int, gone: str, transfer=None) -> None:
    """Everything this rank needed arrived, but a peer died on the way, or never took what this rank
    sent it: its other peers cannot finish, and neither can this rank's next launch."""
    unreceived = getattr(transfer, "unreceived", None)
    if unreceived and not gone:
        peer, chunk = unreceived[0]
        src, index = divmod(chunk, ctx.plan.chunks_per_rank)
        ctx.broken = f"rank {peer} never received chunk {chunk}"
        raise LaunchError(f"rank {ctx.plan.rank}: rank {peer} did not receive chunk {index} of rank {src} (epoch {epoch}) within "
                          f"the timeout; check that every rank launched the kernel with the same shapes, or raise timeout_s")
    if gone:
        ctx.broken = gone
        raise LaunchError(f"rank {ctx.plan.rank}: {gone} during launch {epoch}; this rank's result is complete, but the "
                          "operator's peers cannot finish: restart the job (or re-create the process group)")
