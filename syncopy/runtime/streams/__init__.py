"""The driver underneath the launch and the transports: stream write-values and waits (and their host
emulation on CPU ranks), the error ring a launch's error words are read from off the launch path, the
watchdog that reads it, the SMs a kernel leaves to communication, and CUDA-graph epochs."""
