"""Several ranks without a cluster, for tests, benchmarks and `syncopy run`: local process worlds
(processes: spawn, one rank per process, gloo), the loopback world (one process, peers emulated by
copies into the same GPU) and the thread world (one thread of launches per rank, pipelines included)."""
