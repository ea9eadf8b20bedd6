"""What a launch reports when it goes wrong: chunks never written, peers whose connection dropped, and the
SyncopyTimeout that names rank, chunk and epoch."""
from __future__ import annotations



from syncopy import device as dev
from syncopy.errors import LaunchError, SyncopyCorruptChunk, SyncopyTimeout
from syncopy.runtime.state.context import Context


def raise_for_consumer(ctx: Context, transfer, epoch: int, timeout_s: float, checked_file: str | None) -> None:
    """A consumer launch whose transfers are over (gloo, a world of one): its first failure, in this
    order: a transfer that failed; a checked-mode violation (`checked_file`: the kernel's file); a
    wait that timed out (the kernel's error words), a chunk that never came; a peer that dropped out;
    a corrupt chunk. A failure the transfers caused leaves the context broken."""
    if transfer is not None and transfer.errors:
        ctx.broken = repr(transfer.errors[0])
        raise LaunchError(f"rank {ctx.plan.rank}: transfer failed: {transfer.errors[0]}")
    if checked_file is not None:
        _read_check().raise_if_violated(ctx, checked_file)
    err = ctx.error()
    c = ctx.plan.chunks_per_rank
    gone = _dropped_out(transfer)
    if err is not None:
        rank, flag, e = err
        chunk = ctx.plan.chunk_of_flag(flag)  # the kernel waits per unit; name the chunk
        ctx.broken = f"chunk {chunk} timed out"
        raise SyncopyTimeout(rank, divmod(chunk, c), e, timeout_s, gone, _advice(gone), stopped=bool(gone) and ctx.aborted)
    if transfer is not None and transfer.lost:
        ctx.broken = f"chunk {transfer.lost[0]} lost"
        raise SyncopyTimeout(ctx.plan.rank, divmod(transfer.lost[0], c), epoch, timeout_s, _and("the transfer never completed", gone),
                             _advice(gone), stopped=bool(gone))
    _raise_if_dropped_out(ctx, epoch, gone, transfer)
    _raise_if_corrupt(ctx, epoch, transfer)


def raise_for_producer(ctx: Context, transfer, epoch: int, timeout_s: float, checked_file: str | None) -> None:
    """A producer launch whose transfers are over (gloo, a world of one: `transfer` None): a transfer
    that failed; a partial sum that never came; a chunk never reduced; a peer that dropped out; a
    corrupt chunk; then a checked-mode violation (`checked_file`: the kernel's file)."""
    if transfer is not None:
        if transfer.errors:
            ctx.broken = repr(transfer.errors[0])
            raise LaunchError(f"rank {ctx.plan.rank}: transfer failed: {transfer.errors[0]}")
        gone = _dropped_out(transfer)
        if transfer.lost:
            chunk, peer = transfer.lost[0]
            ctx.broken = f"chunk {chunk} lost"
            raise SyncopyTimeout(ctx.plan.rank, divmod(chunk, ctx.plan.chunks_per_rank), epoch, timeout_s,
                                 _and(f"its partial sum from rank {peer} never came", gone), _advice(gone), stopped=bool(gone))
        unfinished = [g for g in ctx.plan.owned if not transfer.final[g].is_set()]
        if unfinished:
            ctx.broken = f"chunk {unfinished[0]} never reduced"
            raise SyncopyTimeout(ctx.plan.rank, divmod(unfinished[0], ctx.plan.chunks_per_rank), epoch, timeout_s,
                                 _and("it was never reduced", gone), _advice(gone))
        _raise_if_dropped_out(ctx, epoch, gone, transfer)
        _raise_if_corrupt(ctx, epoch, transfer)
    if checked_file is not None:
        _read_check().raise_if_violated(ctx, checked_file)  # on GPUs a host sync: checked mode only


def _read_check():
    """Checked mode's reports (passes/read_check.py, which needs libcst), imported only when a checked kernel reports."""
    from syncopy.passes import read_check

    return read_check


def announce_unwritten(ctx: Context, tiles_per_chunk: list[int]) -> None:
    """Chunks no tile writes in this launch are final at once (they hold the partial's initial
    contents): raise their flags now, after init_partial, so no transfer waits for a tile."""
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
