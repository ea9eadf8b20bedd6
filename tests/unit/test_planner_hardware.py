"""Hardware profiles: the shipped ones load, user files load, bad files fail in one line."""
import math
import sys

import pytest
import yaml

from syncopy.planner.hardware import PROFILE_DIR, load_profile, profile_names, save_profile

SHIPPED = ["a100-nvlink", "cpu-gloo", "h100-nvlink", "h100-pcie", "h200-nvlink"]


def test_every_required_profile_ships():
    assert set(SHIPPED) <= set(profile_names())


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_are_valid(name):
    p = load_profile(name)
    assert p.name == name
    assert p.link.bandwidth > 0 and p.compute.sm_count >= 1
    assert p.gemm_flops("bf16") > 0


def test_fp32_gemms_use_the_tf32_rate_where_there_is_one():
    h100 = load_profile("h100-nvlink")
    assert h100.gemm_flops("fp32") == h100.compute.peak_flops["tf32"]
    assert load_profile("cpu-gloo").gemm_flops("fp32") == load_profile("cpu-gloo").compute.peak_flops["fp32"]


def _write(tmp_path, data) -> str:
    path = tmp_path / "box.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _h100() -> dict:
    return yaml.safe_load((PROFILE_DIR / "h100-nvlink.yaml").read_text())


def test_a_user_profile_loads_from_a_path(tmp_path):
    data = _h100() | {"name": "my-box"}
    data["links"] = {"ib": {"alpha_s": 5e-6, "bandwidth": 50e9}}
    data["network"] = {"link": "ib", "topology": "ring"}
    p = load_profile(_write(tmp_path, data))
    assert p.name == "my-box" and p.link.alpha_s == 5e-6 and p.network.topology == "ring"


def test_save_and_load_round_trip(tmp_path):
    p = load_profile("h100-nvlink").replace(("links", "nvlink", "bandwidth"), math.inf)
    path = save_profile(p, tmp_path / "out.yaml", header="a comment")
    assert path.read_text().startswith("# a comment\n")
    assert load_profile(str(path)) == p


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["compute"].pop("sm_count"), r"compute\.sm_count: Field required"),
        (lambda d: d["compute"].update(sm_count="many"), r"compute\.sm_count: Input should be a valid integer"),
        (lambda d: d["links"]["nvlink"].update(bandwidth=-1), r"links\.nvlink\.bandwidth: Input should be greater than 0"),
        (lambda d: d["overheads"].update(signal_ms=1), r"overheads\.signal_ms: Extra inputs are not permitted"),
        (lambda d: d["network"].update(link="pcie"), r"network\.link is 'pcie' but links defines only \['nvlink'\]"),
        (lambda d: d["network"].update(topology="mesh"), r"network\.topology: Input should be 'direct' or 'ring'"),
        (lambda d: d.update(default_backend="mpi"), r"default_backend is 'mpi'"),
        (lambda d: d["backends"]["nccl"].update(comm_sms=132), r"leaves no SM for compute"),
        (lambda d: d["compute"].update(sm_count=True), r"compute\.sm_count: is a boolean; give a number"),
        (lambda d: d["compute"]["peak_flops"].update(bf16=True), r"compute\.peak_flops: is a boolean"),
    ],
)
def test_bad_profiles_fail_in_one_line_naming_the_key(tmp_path, edit, message):
    data = _h100()
    edit(data)
    with pytest.raises(ValueError, match=message) as err:
        load_profile(_write(tmp_path, data))
    assert "\n" not in str(err.value)


def test_unknown_name_and_missing_file_say_what_to_use(tmp_path):
    with pytest.raises(ValueError, match="unknown hardware profile 'h900'; use one of .*h100-nvlink"):
        load_profile("h900")
    with pytest.raises(ValueError, match="does not exist"):
        load_profile(str(tmp_path / "nope.yaml"))
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ValueError, match="not readable YAML"):
        load_profile(str(tmp_path / "broken.yaml"))
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ValueError, match="must be a YAML mapping"):
        load_profile(str(tmp_path / "list.yaml"))


def test_the_emulated_link_adds_to_the_native_one():
    p = load_profile("cpu-gloo")
    e = p.with_emulated_link(latency_s=0.01, bandwidth_Bps=1e6, jitter_s=0.002)
    n = 1_000_000
    assert e.link.seconds(n) == pytest.approx(p.link.seconds(n) + 0.01 + 0.001 + 1.0)


def test_the_planner_does_not_import_torch_or_triton():
    import subprocess

    code = "import sys, syncopy.planner; print(any(m in sys.modules for m in ('torch', 'triton')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
