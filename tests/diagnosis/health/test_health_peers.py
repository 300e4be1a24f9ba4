"""The peer model: vectors from records, the odd component named with its features, a healthy
job left alone."""

from __future__ import annotations

import numpy as np

from bench.health_model import gpu_vectors, host_vectors
from c4.proto.health import HealthRecord
from diagnosis.health.peers import PeerModel, health_vectors

S = 1_000_000_000


def test_vectors_gauge_means_counter_rates_reason_shares() -> None:
    recs = [HealthRecord("n1", i * 10 * S, "n1/gpu0",
                         {"temp_c": 60.0 + i, "ecc_dram_corr_vol": 5.0 * i,
                          "sm_clock_max_mhz": 1980.0},
                         ("hw_thermal_slowdown",) if i >= 2 else ())
            for i in range(4)]
    recs.append(HealthRecord("n1", 15 * S, "n1/gpu0", event="xid", code=79))
    [(target, vec)] = health_vectors(recs, 0, 30 * S).items()
    assert target == "n1/gpu0"
    assert vec == {"temp_c": 61.5, "ecc_dram_corr_vol_per_s": 0.5,
                   "reason_hw_thermal_slowdown": 0.5}   # static max clock left out


def test_planted_gpu_named_with_its_features_in_a_large_job() -> None:
    vecs = gpu_vectors(512)
    [o] = PeerModel().outliers(vecs)
    assert o.target == "node00021/gpu2"
    names = [f[0] for f in o.features]
    assert names == ["sm_clock_mhz", "temp_c"]
    _, value, median, z = o.features[0]
    assert value == 1110 and 1970 < median < 1980 and z < -6


def test_healthy_job_has_no_outliers() -> None:
    vecs = gpu_vectors(512)
    vecs["node00021/gpu2"].update(temp_c=62.0, sm_clock_mhz=1978.0)
    assert PeerModel().outliers(vecs) == []
    assert PeerModel().outliers(host_vectors(64) | {"node00021": {
        "psi_cpu_some_avg10": 1.0, "psi_memory_some_avg10": 0.0, "psi_io_full_avg10": 0.1,
        "cpu_steal_pct": 0.0}}) == []


def test_small_group_on_z_scores_and_one_reason_only() -> None:
    rng = np.random.default_rng(3)
    vecs = {f"n{i}/gpu0": {"temp_c": 60 + float(rng.normal(0, 1))} for i in range(6)}
    vecs["n4/gpu0"]["reason_sw_thermal_slowdown"] = 1.0
    [o] = PeerModel().outliers(vecs)
    assert o.target == "n4/gpu0" and o.features[0][0] == "reason_sw_thermal_slowdown"
    assert PeerModel().outliers({"a/gpu0": {"temp_c": 50.0}, "b/gpu0": {"temp_c": 90.0}}) == []


def test_findings_per_component_kind() -> None:
    vecs = gpu_vectors(64) | host_vectors(8)
    found = PeerModel().findings(vecs, 0, 60 * S)
    assert {(f.kind, f.target) for f in found} == {("peer_outlier", "node00002/gpu5"),
                                                   ("peer_outlier", "node00002")}
    gpu = next(f for f in found if "/gpu" in f.target)
    assert "unlike its 63 peer gpus: sm_clock_mhz 1,110 vs" in gpu.summary and not gpu.hard
