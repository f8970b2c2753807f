"""GpuSpec catalogue: aliases, exact capacities, unknown-name errors."""

import pytest

from frontier.gpu import GpuSpec, get_gpu, is_sm100_family, list_gpus

REQUIRED = ["A100-40GB", "A100-80GB", "H100-SXM", "H800", "H20", "H200", "B200", "L40S", "L4"]


def test_required_gpus_present():
    assert set(REQUIRED) <= set(list_gpus())


@pytest.mark.parametrize("alias", ["H100", "h100_sxm", "H100-SXM", "NVIDIA H100 80GB HBM3", "h100 sxm5"])
def test_h100_aliases(alias):
    assert get_gpu(alias).name == "H100-SXM"


def test_exact_values():
    h100 = get_gpu("H100-SXM")
    assert h100.memory_bytes == 81559 * 2**20 == 85_520_809_984  # nvidia-smi total
    assert (h100.hbm_bw_bytes_per_s, h100.bf16_flops, h100.fp8_flops) == (3.35e12, 989e12, 1979e12)
    assert (h100.nvlink_bw_bytes_per_s, h100.network_bw_bytes_per_s, h100.sm_version) == (450e9, 50e9, 90)
    assert get_gpu("a100-40gb").fp8_flops == 0 and get_gpu("A100").name == "A100-80GB"
    assert get_gpu("B200").fp4_flops == 9e15 and get_gpu("h800").nvlink_bw_bytes_per_s == 200e9
    assert get_gpu("L40S").memory_bytes == 46068 * 2**20
    assert (h100.fp32_flops, get_gpu("B200").fp32_flops, get_gpu("A100-80GB").fp32_flops) == (67e12, 75e12, 19.5e12)
    assert [is_sm100_family(get_gpu(g).sm_version) for g in ("B200", "B300", "GB200", "H100", "L40S", "A100")] == \
        [True, True, True, False, False, False]


def test_every_entry_has_a_source_and_price():
    for name in list_gpus():
        gpu = get_gpu(name)
        assert gpu.source and gpu.price_per_hour_usd > 0 and gpu.bf16_flops >= 1e14


def test_unknown_gpu_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown GPU 'V100'; valid: A100-40GB, .*H100-SXM") as err:
        get_gpu("V100")
    assert "\n" not in str(err.value)


def test_validation():
    with pytest.raises(ValueError, match="memory_bytes=0 must be > 0"):
        GpuSpec("x", 0, 1.0, 1.0, 0, 0, 1.0, 1.0, 1.0, 8, 1.0, 90, "test")


def test_gb300_and_the_rtx_pro_6000_server():
    """The two NVIDIA GPUs with AIConfigurator vLLM tables added 2026-12-01 (specs: AIC's system yaml)."""
    from frontier.gpu import intra_node_link
    gb300, rtx = get_gpu("gb300"), get_gpu("rtx_pro_6000_server")
    assert (gb300.name, gb300.memory_bytes, gb300.fp4_flops, gb300.gpus_per_node) == ("GB300", 284208 << 20, 15e15, 72)
    # NVL72: the rack is one NVLink domain (a node here); the network runs between racks
    assert (gb300.nvlink_bw_bytes_per_s, gb300.network_bw_bytes_per_s) == (900e9, 100e9) == (
        get_gpu("GB200").nvlink_bw_bytes_per_s, get_gpu("GB200").network_bw_bytes_per_s)
    assert get_gpu("GB200").gpus_per_node == 72
    assert is_sm100_family(gb300.sm_version) and intra_node_link(gb300) == "nvlink"
    assert (rtx.name, rtx.memory_bytes, rtx.bf16_flops, rtx.sm_version) == ("RTX-PRO-6000-Server", 97887 << 20,
                                                                              467.8e12, 120)
    assert not is_sm100_family(rtx.sm_version) and intra_node_link(rtx) == "pcie"   # no NVLink: PCIe Gen5
    assert get_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition") == rtx


def test_cli_gpus_lists_rates_links_and_prices():
    from typer.testing import CliRunner

    from frontier.cli import app
    res = CliRunner().invoke(app, ["gpus"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) == 1 + len(list_gpus()) and lines[0].startswith("GPU ")
    assert "H100-SXM               79.6 GiB   3.35 TB/s      989    1979       -       nvlink 450 GB/s   90  $2.99/h" \
        in lines
    assert "RTX-PRO-6000-Server    95.6 GiB   1.79 TB/s      468     936    1871          pcie 64 GB/s  120  $1.80/h" \
        in lines
