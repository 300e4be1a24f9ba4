"""The open-fault gauge follows the reports the hub files: labelled by job, kind and the top
suspect's host, gone when resolved or when the job is removed, seeded from the store at start,
and read at scrape time without reading a report from the store."""

from __future__ import annotations

from c4.report import FaultReport, Suspect
from diagnosis.daemon.fault_metrics import OpenFaults
from diagnosis.daemon.faults import FaultHub
from diagnosis.store import RankRecord, Write, open_store

T0 = 1_700_000_000_000_000_000


def _report(kind: str, *suspects: Suspect) -> FaultReport:
    return FaultReport(kind=kind, suspects=suspects, first_seen_ns=T0, summary=kind)


def _gauge(faults: OpenFaults) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels[k] for k in ("job", "kind", "host")): s.value
            for fam in faults.collect() if fam.name == "c4_open_faults" for s in fam.samples}


def _total(faults: OpenFaults) -> float:
    return next(s.value for fam in faults.collect() if fam.name == "c4_daemon_open_faults"
                for s in fam.samples)


class _CountingStore:
    """The memory store, counting the reads of fault reports."""

    def __init__(self, store) -> None:
        self._store = store
        self.report_reads = 0

    def list_faults(self, *args, **kwargs):
        self.report_reads += 1
        return self._store.list_faults(*args, **kwargs)

    def get_fault(self, fault_id):
        self.report_reads += 1
        return self._store.get_fault(fault_id)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_open_faults_by_job_kind_and_host(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/c4.db")
    store.write([Write("car", 1, RankRecord("train", 0, 3, 4, "node7"))])
    hub = FaultHub(store)
    faults = OpenFaults(hub, store)
    hang = hub.file("train", _report("noncomm_hang", Suspect("rank", "3", 0.9, rank=3)))
    hub.file("train", _report("comm_slow", Suspect("link", "leaf1~node2/nic0", 0.8)))
    hub.file("train", _report("comm_slow", Suspect("switch", "leaf1", 0.6)))
    hub.file("other", _report("noncomm_slow", Suspect("gpu", "node4/gpu1", 0.7)))
    assert _gauge(faults) == {("train", "noncomm_hang", "node7"): 1,
                              ("train", "comm_slow", "node2"): 1,
                              ("train", "comm_slow", ""): 1,
                              ("other", "noncomm_slow", "node4"): 1}
    assert _total(faults) == 4 == store.count_faults(open_only=True)

    hub.resolve(hang.id, "the job ended")
    assert ("train", "noncomm_hang", "node7") not in _gauge(faults) and _total(faults) == 3
    # a daemon started later counts what is stored open
    again = OpenFaults(FaultHub(store), store)
    assert _gauge(again) == _gauge(faults)
    faults.forget_job("train")
    assert _gauge(faults) == {("other", "noncomm_slow", "node4"): 1}
    store.close()


def test_a_scrape_reads_no_report():
    store = _CountingStore(open_store("memory://"))
    hub = FaultHub(store)
    faults = OpenFaults(hub, store)
    hub.file("j", _report("noncomm_slow", Suspect("gpu", "node1/gpu0", 0.7)))
    reads = store.report_reads
    for _ in range(3):
        assert _gauge(faults) == {("j", "noncomm_slow", "node1"): 1}
    assert store.report_reads == reads
