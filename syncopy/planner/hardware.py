"""Hardware profiles: what one rank's device and the links between ranks can do.

A profile is data. The shipped ones live in `syncopy/planner/profiles/<name>.yaml`; a user adds one
by writing a YAML file of the same shape and passing its path wherever a profile name is accepted
(`syncopy plan ... --hardware my-box.yaml`). Every number is a published peak or a plausible
overhead; the `efficiency` factors and the overhead terms are what `syncopy.planner.calibrate` fits
from measurements, so the vendor figures themselves stay as printed on the datasheet.

    name: h100-nvlink
    compute:  {sm_count, peak_flops: {fp16, bf16, tf32, fp32}, memory_bandwidth, efficiency, tile, ...}
    links:    {nvlink: {alpha_s, bandwidth, efficiency}}      # kinds: nvlink | pcie | ib | loopback
    network:  {link: nvlink, topology: direct, max_world: 8}  # topology: direct (switched) | ring
    backends: {p2p: {comm_sms: 0}, nccl: {comm_sms: 16}}
    default_backend: p2p
    overheads: {launch_s, stream_sync_s, signal_s, tile_sync_s}
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

PROFILE_DIR = Path(__file__).parent / "profiles"

LinkKind = Literal["nvlink", "pcie", "ib", "loopback"]
Topology = Literal["direct", "ring"]
FlopsKind = Literal["fp16", "bf16", "tf32", "fp32"]

#: Element size of the dtypes the planner models.
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


def reject_booleans(value):
    """A pydantic before-validator: YAML reads yes/no/true/false as booleans, which pydantic would
    quietly turn into 1/0 wherever a number is expected."""
    items = value if isinstance(value, (list, tuple)) else (value,)
    if any(isinstance(v, bool) for v in items):
        raise ValueError("is a boolean; give a number")
    return value


class _Strict(BaseModel):
    # extra="forbid" turns a misspelt key in a user's YAML into an error instead of a silent default.
    model_config = ConfigDict(extra="forbid", frozen=True)

    _no_booleans = field_validator("*", mode="before")(reject_booleans)


class Link(_Strict):
    """Alpha-beta cost of one message on one link: alpha_s + bytes / (bandwidth * efficiency)."""

    alpha_s: NonNegativeFloat
    bandwidth: PositiveFloat  # bytes/s per direction, vendor peak (.inf is allowed: an ideal link)
    efficiency: PositiveFloat = 1.0  # fraction of the peak a transfer sustains; calibration fits it

    def seconds(self, nbytes: float) -> float:
        """Time one message of `nbytes` occupies the link."""
        return self.alpha_s + nbytes / (self.bandwidth * self.efficiency)


class Compute(_Strict):
    """One rank's compute device, as a roofline per tile."""

    sm_count: PositiveInt  # streaming multiprocessors: tiles that run at once (1 under the interpreter)
    peak_flops: dict[FlopsKind, PositiveFloat] = Field(min_length=1)  # dense FLOP/s per dtype
    memory_bandwidth: PositiveFloat  # bytes/s
    efficiency: PositiveFloat = 0.7  # fraction of peak FLOP/s a tuned Triton kernel sustains
    tile: tuple[PositiveInt, PositiveInt] = (128, 128)  # BLOCK_M, BLOCK_N of the kernels modelled
    tile_overhead_s: NonNegativeFloat = 0.0  # fixed cost per program (large under the interpreter)
    # Ranks that can compute at once on the whole machine (CPU cores); None: one device per rank.
    concurrent_ranks: PositiveInt | None = None

    @field_validator("peak_flops", mode="before")
    @classmethod
    def _peaks_are_numbers(cls, value):
        return {k: reject_booleans(v) for k, v in value.items()} if isinstance(value, dict) else value


class Network(_Strict):
    """How ranks are connected: which link kind and which topology."""

    link: LinkKind
    # direct: a switch (NVSwitch, PCIe switch, IB fabric) reaches every peer in one hop through one
    # port per rank; ring: each rank is wired to its two neighbours only, farther peers are relayed.
    topology: Topology = "direct"
    max_world: PositiveInt | None = None  # ranks this profile describes (one NVLink box: 8)


class Backend(_Strict):
    """A way to move chunks; what matters to the model is the SMs it takes from the kernel."""

    comm_sms: NonNegativeInt = 0


class Overheads(_Strict):
    """Per-chunk and per-kernel costs that are not bandwidth."""

    launch_s: NonNegativeFloat  # gap before a kernel starts, paid per kernel on a stream
    stream_sync_s: NonNegativeFloat  # event record + wait that hands a chunk between two streams
    signal_s: NonNegativeFloat  # chunk landed -> its flag visible to a spinning tile (or back)
    tile_sync_s: NonNegativeFloat  # one acquire load / release store per tile of the fused kernel


class HardwareProfile(_Strict):
    """A complete hardware profile; load one with `load_profile`."""

    name: str = Field(min_length=1)
    description: str = ""
    compute: Compute
    links: dict[LinkKind, Link] = Field(min_length=1)
    network: Network
    backends: dict[str, Backend] = Field(min_length=1)
    default_backend: str
    overheads: Overheads

    @model_validator(mode="after")
    def _references_resolve(self) -> "HardwareProfile":
        if self.network.link not in self.links:
            raise ValueError(
                f"network.link is '{self.network.link}' but links defines only {sorted(self.links)}; add it under links"
            )
        if self.default_backend not in self.backends:
            raise ValueError(f"default_backend is '{self.default_backend}' but backends defines only {sorted(self.backends)}")
        for name, backend in self.backends.items():
            if backend.comm_sms >= self.compute.sm_count:
                raise ValueError(
                    f"backends.{name}.comm_sms ({backend.comm_sms}) leaves no SM for compute; make it < compute.sm_count"
                )
        return self

    @property
    def link(self) -> Link:
        """The link between ranks."""
        return self.links[self.network.link]

    def backend(self, name: str | None = None) -> Backend:
        """The named backend, or the default one."""
        name = name or self.default_backend
        if name not in self.backends:
            raise ValueError(f"hardware '{self.name}' has no backend '{name}'; use one of {', '.join(sorted(self.backends))}")
        return self.backends[name]

    def gemm_flops(self, dtype: str) -> float:
        """Peak FLOP/s of a tensor-core dot on `dtype` inputs.

        fp32 inputs use the TF32 rate where the profile has one: tl.dot's default input_precision
        on fp32 is "tf32".
        """
        peaks = self.compute.peak_flops
        key = "tf32" if dtype == "fp32" and "tf32" in peaks else dtype
        if key not in peaks:
            raise ValueError(
                f"hardware '{self.name}' has no peak FLOP/s for {dtype}; add compute.peak_flops.{dtype} to the profile"
            )
        return peaks[key]

    def vector_flops(self) -> float:
        """Peak FLOP/s of elementwise fp32 work (no tensor cores)."""
        return self.compute.peak_flops.get("fp32") or min(self.compute.peak_flops.values())

    def with_emulated_link(
        self, latency_s: float = 0.0, bandwidth_Bps: float = float("inf"), jitter_s: float = 0.0
    ) -> "HardwareProfile":
        """This profile as seen through the CPU backend's link emulator.

        The emulator (syncopy.runtime.transport.link.Link) sleeps latency + bytes/bandwidth (+ uniform jitter)
        before the real send, so its costs add to the native link's: alphas add, and so do the
        inverse bandwidths.
        """
        native = self.link
        alpha = native.alpha_s + latency_s + jitter_s / 2  # mean of the uniform jitter
        inverse = 1.0 / (native.bandwidth * native.efficiency) + 1.0 / bandwidth_Bps
        emulated = Link(alpha_s=alpha, bandwidth=1.0 / inverse if inverse else float("inf"), efficiency=1.0)
        return self.model_copy(update={"links": {**self.links, self.network.link: emulated}})

    def replace(self, path: tuple[str, ...], value) -> "HardwareProfile":
        """A copy with the field at `path` (e.g. ("links", "nvlink", "alpha_s")) set, revalidated."""
        data = self.model_dump()
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return HardwareProfile.model_validate(data)

    def get(self, path: tuple[str, ...]):
        """The value of the field at `path`."""
        node = self.model_dump()
        for key in path:
            node = node[key]
        return node


def profile_names() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str | Path | HardwareProfile) -> HardwareProfile:
    """A profile from a shipped name (`h100-nvlink`) or a path to a YAML file.

    Raises ValueError with one sentence saying what to change when the name is unknown or the file
    is unreadable or invalid.
    """
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    text = str(name_or_path)
    looks_like_path = text.endswith((".yaml", ".yml")) or "/" in text or "\\" in text
    path = Path(text) if looks_like_path else PROFILE_DIR / f"{text}.yaml"
    if not path.is_file():
        if looks_like_path:
            raise ValueError(
                f"hardware profile file '{text}' does not exist; "
                f"give a readable YAML file or a profile name ({', '.join(profile_names())})"
            )
        raise ValueError(f"unknown hardware profile '{text}'; use one of {', '.join(profile_names())} or a path to a YAML file")
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"hardware profile '{text}' is not readable YAML ({_one_line(exc)}); fix the file") from None
    return profile_from_dict(data, source=text)


def profile_from_dict(data, source: str = "<dict>") -> HardwareProfile:
    """Validate a parsed profile; errors name the first bad key in one line."""
    if not isinstance(data, dict):
        raise ValueError(
            f"hardware profile '{source}' must be a YAML mapping with keys "
            "name, compute, links, network, backends, default_backend, overheads"
        )
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"]) or "top level"
        message = err["msg"].removeprefix("Value error, ")
        example = PROFILE_DIR / "h100-nvlink.yaml"
        raise ValueError(f"hardware profile '{source}': {where}: {message} (see {example} for a complete profile)") from None


def save_profile(profile: HardwareProfile, path: str | Path, header: str = "") -> Path:
    """Write `profile` as YAML (loadable by `load_profile`), with `header` as leading comment lines."""
    path = Path(path)
    data = profile.model_dump()
    data["compute"]["tile"] = list(profile.compute.tile)
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    path.write_text(comment + yaml.safe_dump(data, sort_keys=False))
    return path


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
