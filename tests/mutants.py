"""Mutants of the product that the suite must kill (issue 26, item 4): how we know the oracles see what
they claim to see.

    python -m tests.mutants            # every mutant; exit 0 only if each was killed
    python -m tests.mutants --list     # what they are
    python -m tests.mutants NAME ...   # some of them

Each mutant is one textual change to one file of `syncopy/` (the text must occur exactly once, so a
mutant cannot rot silently: tests/unit/test_mutants.py checks that on every `make test`). It is
applied to a copy of the repository in a temporary folder, where the tests it names (files, or
pytest node ids `file::test[id]` to run a fast part) run (`-x`, the first failure is enough); the
mutant is killed when they fail, and survives when they pass. `make
mutants` runs them all (CI runs it before `make test`).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("syncopy", "tests", "templates", "examples", "pyproject.toml", "setup.py")

#: `syncopy verify` on the docs' example kernel (a world of 2, ~20 s), then the all-gather matrix.
CONSUMER_TESTS = ("tests/world/test_verify.py::test_syncopy_verify_passes_the_examples_kernel_and_says_what_each_condition_saw",
                  "tests/world/test_all_gather.py")
PRODUCER_TESTS = ("tests/world/test_reduce.py",)
#: The verifier (syncopy verify's engine, syncopy/verifier.py) on the kernels of the "Proven or as written"
#: issue, each under reordered, held and checked conditions: a mutant that undoes a proof makes it report
#: a difference (the rank, condition, launch, tensor, rows, chunk and first element). One shared world of 2, ~30-45 s.
VERIFY_TESTS = ("tests/world/test_verify_sentinels.py",)

#: The usual mistakes of one rank in a group (runtime/launch/agreement.py), one spawn of 3 (~20 s), and a
#: rank killed mid-launch, whose peers must stop waiting at once (~10 s).
AGREEMENT_TESTS = ("tests/world/test_agreement.py",)
#: The GPU runtime's order of driver calls, on CPU (issue 28): error rings (a stub device) and p2p (a
#: recording fake of its memory and stream operations), a few seconds each.
RING_TESTS = ("tests/unit/test_error_ring_slots.py",)
P2P_ORDER_TESTS = ("tests/unit/test_p2p_driver_order.py",)
KILL_TESTS = ("tests/world/test_faults.py::test_a_rank_that_dies_mid_launch_is_named_by_its_peers_never_a_hang[local_first-False]",)


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant("skip-a-wait", "a tile does not wait for the first chunk of its range", "syncopy/device.py",
           "    for g in range(g_lo, g_hi + 1):\n        # Fast path first",
           "    for g in range(g_lo + 1, g_hi + 1):\n        # Fast path first", CONSUMER_TESTS),
    Mutant("wait-one-short", "a tile waits for every chunk of its range but the last", "syncopy/device.py",
           "    for g in range(g_lo, g_hi + 1):\n        # Fast path first",
           "    for g in range(g_lo, g_hi):\n        # Fast path first", CONSUMER_TESTS),
    Mutant("announce-early", "a producer's chunk is announced one tile before its last store",
           "syncopy/runtime/launch/sequence.py",
           "    if need is not None:\n        ctx.set_targets(need)",
           "    if need is not None:\n        ctx.set_targets([k - 1 if k > 1 else k for k in need])", PRODUCER_TESTS),
    Mutant("flag-before-data", "a received chunk's flag rises before its rows are in place",
           "syncopy/runtime/transport/backends/gloo.py",
           "        extras = self.ctx.extras\n        data = self._unpack(",
           "        self.ctx.land(chunk)\n        time.sleep(0.005)\n        extras = self.ctx.extras\n        data = self._unpack(",
           CONSUMER_TESTS),
    Mutant("nan-from-launch-2", "from the second launch on, every remote chunk lands as NaN (its flag still rises)",
           "syncopy/runtime/transport/backends/gloo.py",
           "        elif data is not view:\n            view.copy_(data)\n        self.ctx.land(chunk)",
           "        elif data is not view:\n            view.copy_(data)\n        if self.ctx.epoch >= 2 and view.is_floating_point():\n"
           "            view.fill_(float('nan'))\n        self.ctx.land(chunk)", CONSUMER_TESTS),
    Mutant("drop-listed-wait", "with several listed tensors (`tensor: [A, B]`) only the first listed waits: B's waits are dropped",
           "syncopy/passes/consumer_wait.py",
           "    bindings = (binding, *others)\n",
           "    bindings = tuple(b for b in (binding, *others) if b.ctx == names.CTX)\n", VERIFY_TESTS),
    Mutant("loop-order-unproven", "every loop that passes the structural checks runs in chunk-arrival order, its accumulators unproven",
           "syncopy/passes/loop_order.py", "    return flow.problem()\n", "    return ''\n", VERIFY_TESTS),
    Mutant("corners-without-affinity", "rows bounded at the loop's corners without the proof that they are affine in its counters",
           "syncopy/frontend/infer.py", '        raise _Fallback("the rows read are not affine in the loop counter")\n',
           "        pass\n", VERIFY_TESTS),
    Mutant("agreement-blind-to-shapes", "a launch's exchange does not compare the shards' shapes (the ranks meet other shapes' chunks)",
           "syncopy/runtime/launch/agreement.py", '        if other.get("shard") != mine.get("shard"):\n',
           "        if False:\n", AGREEMENT_TESTS),
    Mutant("dead-peer-waits-out", "a peer whose connection closed leaves the kernel's waits running out their timeout",
           "syncopy/runtime/transport/backends/gloo.py", "            self.ctx.abort_waits(missing)\n", "            pass\n",
           KILL_TESTS),
    Mutant("autotune-unpruned", "the interpreter's autotune takes its config from the configs before prune_configs_by",
           "syncopy/runtime/launch/tuning.py", "                configs = _pruned(tuner, timing(named))\n",
           "                configs = tuner.configs\n", VERIFY_TESTS),
    Mutant("ring-slot-by-epoch", "an error ring's slot is the launch's epoch modulo the ring (rings that see every other epoch overwrite unread words)",
           "syncopy/runtime/streams/error_ring.py", "        slot = self._next % self.RING\n", "        slot = epoch % self.RING\n",
           RING_TESTS),
    Mutant("no-room-before-kernel", "room in an error ring is not made before the launch's kernel",
           "syncopy/runtime/streams/error_ring.py", "        if over > 0:\n", "        if False:\n", RING_TESTS),
    Mutant("peer-wait-before-error-words", "p2p waits for its pushes on the compute stream before copying the kernel's error words",
           "syncopy/runtime/transport/backends/p2p.py",
           "        self.errors.record(epoch, hc)\n        self.waits.begin(hc)\n        self.waits.wait(self.waits.done, peer_wait.PUSHED, epoch)\n",
           "        self.waits.begin(hc)\n        self.waits.wait(self.waits.done, peer_wait.PUSHED, epoch)\n        self.errors.record(epoch, hc)\n",
           P2P_ORDER_TESTS),
    Mutant("peers-opened-on-their-gpu", "p2p opens a peer's IPC handle on the owner's GPU (no peer access from ours, a context on every peer GPU)",
           "syncopy/runtime/transport/backends/p2p.py", "        args[_storage_device_arg(rebuild)] = torch.device(device).index\n",
           "        pass\n", P2P_ORDER_TESTS),
)


def check(mutant: Mutant, root: Path = ROOT) -> str:
    """'' if the mutant's text occurs exactly once in its file, else why not."""
    text = (root / mutant.file).read_text()
    count = text.count(mutant.old)
    return "" if count == 1 else f"{mutant.name}: its text occurs {count} times in {mutant.file}, not once"


def run(mutant: Mutant) -> tuple[bool, float, str]:
    """(killed, seconds, the tests' last lines) for one mutant, in a copy of the repository."""
    problem = check(mutant)
    if problem:
        raise SystemExit(problem)
    with tempfile.TemporaryDirectory(prefix=f"syncopy-mutant-{mutant.name}-") as tmp:
        copy = Path(tmp)
        for name in COPIED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(source, copy / name)
        target = copy / mutant.file
        target.write_text(target.read_text().replace(mutant.old, mutant.new))
        env = dict(os.environ, PYTHONPATH=str(copy), TRITON_INTERPRET="1")
        env.pop("SYNCOPY_CACHE_DIR", None)  # the mutant's kernels are compiled afresh, never taken from a cache
        start = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *mutant.tests],
                             cwd=copy, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - start
    tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-3:])
    # 1: tests failed (killed). 0: they passed (survived). Anything else (collection errors, usage)
    # says nothing about the oracles: it is reported as a failure of this script.
    if out.returncode not in (0, 1):
        raise SystemExit(f"{mutant.name}: pytest exited {out.returncode}, which is no verdict:\n{tail}")
    return out.returncode == 1, seconds, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    unknown = sorted(set(args.names) - {m.name for m in MUTANTS})
    if unknown:
        print(f"unknown mutant(s) {', '.join(unknown)}; --list shows them", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            print(f"{m.name:18} {m.what} ({m.file}; killed by {', '.join(m.tests)})")
        return 0
    survivors = []
    for k, m in enumerate(chosen, start=1):
        print(f"[{k}/{len(chosen)}] {m.name}: {m.what} ...", flush=True)
        killed, seconds, tail = run(m)
        print(f"    killed in {seconds:.0f} s" if killed else f"    SURVIVED in {seconds:.0f} s; the tests said:\n{tail}", flush=True)
        if not killed:
            survivors.append(m.name)
    print(f"{len(chosen) - len(survivors)} of {len(chosen)} mutants killed" + (f"; survived: {', '.join(survivors)}" if survivors else ""))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
