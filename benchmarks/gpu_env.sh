# Sourced by the device scripts (gpu_check.sh, wait_backoff.sh), from the repository root: compile
# for the GPU, and install what the device image lacks from the wheels shipped alongside (.whl/).
export TRITON_INTERPRET=0  # conftest defaults to the interpreter; GPUs compile
export PYTHONUNBUFFERED=1 SYNCOPY_CACHE_DIR="${TMPDIR:-/tmp}/syncopy-cache"
# More hardware queues: a stream that waits on a flag (cuStreamWaitValue32) then shares one with the
# kernel that raises it less often, and so overlaps with it (see loopback._launch_producer).
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
if [ -d .whl ] && ! python3 -c "import libcst, pydantic, yaml" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
