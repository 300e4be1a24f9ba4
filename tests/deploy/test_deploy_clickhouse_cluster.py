"""deploy/clickhouse/cluster-schema.sql: its tables mirror the store's (columns, sorting keys,
version columns), and on a real clickhouse-server, as a two-shard cluster on one server
(Replicated engines need ZooKeeper: here plain ReplacingMergeTree, otherwise the same
statements), the daemon's store writes and reads through the Distributed tables with the
exactly-once and latest-version semantics it has on one server, every job on one shard."""

from __future__ import annotations

import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnosis.store.clickhouse import _TABLES
from tests.deploy.deploy_support import DEPLOY

SQL = DEPLOY / "clickhouse" / "cluster-schema.sql"
CREATE = re.compile(
    r"CREATE TABLE IF NOT EXISTS c4\.(\w+) ON CLUSTER c4_cluster (?:\((.*?)\)\s*ENGINE = "
    r"ReplicatedReplacingMergeTree\('([^']*)', '\{replica\}'(?:, (\w+))?\)\s*ORDER BY \((.*?)\)"
    r"|AS c4\.(\w+)\s*ENGINE = Distributed\(c4_cluster, c4, (\w+), (.*?)\));", re.S)


def statements() -> list[str]:
    text = "\n".join(line for line in SQL.read_text().splitlines()
                     if not line.lstrip().startswith("--"))
    return [s.strip() + ";" for s in text.split(";") if s.strip()]


def test_cluster_schema_mirrors_the_store_tables() -> None:
    local: dict[str, tuple[str, str, str, str]] = {}
    dist: dict[str, tuple[str, str, str]] = {}
    stmts = statements()
    assert stmts[0] == "CREATE DATABASE IF NOT EXISTS c4 ON CLUSTER c4_cluster;"
    for stmt in stmts[1:]:
        m = CREATE.fullmatch(stmt)
        assert m, f"unexpected statement: {stmt[:120]}"
        name = m.group(1)
        if m.group(2) is not None:
            columns = ", ".join(c.strip() for c in m.group(2).split(",\n"))
            local[name] = (columns, m.group(4) or "", m.group(5), m.group(3))
        else:
            dist[name] = (m.group(6), m.group(7), m.group(8))
    assert set(local) == {f"{t}_local" for t in _TABLES}
    assert set(dist) == set(_TABLES)
    for table, (columns, ver, key) in _TABLES.items():
        cols, lver, lkey, zk_path = local[f"{table}_local"]
        assert (cols, lver, lkey) == (columns, ver, key), table
        assert zk_path == f"/clickhouse/tables/{{shard}}/c4/{table}"
        as_table, target, sharding = dist[table]
        assert as_table == target == f"{table}_local"
        # every version of a row must land on one shard: shard by a sorting-key column that
        # all versions share (job; the sidecar for applied; faults keep their job)
        shard_col = re.fullmatch(r"cityHash64\((\w+)\)", sharding).group(1)
        assert shard_col in key.split(", ") or (table, shard_col) == ("faults", "job"), table


# -- on a real server ---------------------------------------------------------------------


def _single_server_statements() -> tuple[list[str], list[str]]:
    """The local tables (to create once per shard database) and the Distributed ones, with
    replication dropped and the Distributed tables reading each shard's default database."""
    local, dist = [], []
    for stmt in statements()[1:]:
        stmt = stmt.replace(" ON CLUSTER c4_cluster", "")
        stmt = re.sub(r"ReplicatedReplacingMergeTree\('[^']*', '\{replica\}'(?:, (\w+))?\)",
                      lambda m: f"ReplacingMergeTree({m.group(1) or ''})", stmt)
        if "Distributed(" in stmt:
            stmt = stmt.replace("AS c4.", "AS {db}.").replace("c4_cluster, c4,", "c4_cluster, '',")
            dist.append(stmt)
        else:
            local.append(stmt)
    return local, dist


@pytest.fixture(scope="module")
def two_shard_server() -> Iterator[object]:
    from tests.support.clickhouse import INSTALL_HINT, ClickHouseServer, find_binary

    command = find_binary()
    if command is None:
        pytest.skip(INSTALL_HINT)
    root = Path(tempfile.mkdtemp(prefix="c4-ch-cluster-"))
    try:
        server = ClickHouseServer(root, command)
        tree = ET.parse(server.config)
        remote = ET.SubElement(tree.getroot(), "remote_servers")
        cluster = ET.SubElement(remote, "c4_cluster")
        for db in ("c4_s1", "c4_s2"):
            shard = ET.SubElement(cluster, "shard")
            ET.SubElement(shard, "internal_replication").text = "true"
            replica = ET.SubElement(shard, "replica")
            ET.SubElement(replica, "host").text = "127.0.0.1"
            ET.SubElement(replica, "port").text = str(server.tcp_port)
            ET.SubElement(replica, "default_database").text = db
        tree.write(server.config, encoding="utf-8", xml_declaration=True)
        # the profile the schema's notes ask for
        users = ET.parse(root / "users.xml")
        profile = users.getroot().find("profiles/default")
        ET.SubElement(profile, "insert_distributed_sync").text = "1"
        users.write(root / "users.xml", encoding="utf-8", xml_declaration=True)
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.clickhouse
def test_store_works_on_the_sharded_schema(two_shard_server) -> None:
    from clickhouse_driver import Client

    from diagnosis.store import RankRecord
    from diagnosis.store.api import OpRows
    from diagnosis.store.clickhouse import ClickHouseStore
    from tests.diagnosis.store.store_builders import make_ops, writes_of

    server = two_shard_server
    client = Client("127.0.0.1", port=server.tcp_port)
    local, dist = _single_server_statements()
    for db in ("c4", "c4_s1", "c4_s2"):
        client.execute(f"CREATE DATABASE IF NOT EXISTS {db}")
    for db in ("c4_s1", "c4_s2"):
        for stmt in local:
            client.execute(stmt.rstrip(";").replace("c4.", f"{db}."))
    for stmt in dist:
        client.execute(stmt.rstrip(";").format(db="c4_s1"))
    engines = dict(client.execute("SELECT name, engine FROM system.tables WHERE database = 'c4'"))
    assert set(engines.values()) == {"Distributed"} and set(engines) == set(_TABLES)

    store = ClickHouseStore.from_url(server.url("c4"))  # finds the tables, creates nothing
    try:
        assert set(dict(client.execute(
            "SELECT name, engine FROM system.tables WHERE database = 'c4'")).values()) == {
            "Distributed"}
        jobs = [f"job{i}" for i in range(8)]
        seq = 0
        for k, job in enumerate(jobs):
            open_rows = make_ops(64, done=False, seed=k)
            bodies = [RankRecord(job, 0, r, 8, f"node{r}") for r in range(8)]
            bodies += [OpRows(job, 0, open_rows)]
            assert store.write(writes_of("car-a", seq, bodies)) == [False] * len(bodies)
            # the same requests again: duplicates, stored once
            assert store.write(writes_of("car-a", seq, bodies)) == [True] * len(bodies)
            seq += len(bodies)
            # the completed versions of the same calls replace the open ones
            assert store.write(writes_of("car-b", k, [OpRows(job, 0, make_ops(64, seed=k))])) \
                == [False]
        for job in jobs:
            ops = store.ops(job)
            assert len(ops) == 64 and (ops["t_end_ns"] != -1).all(), job
            assert store.count_ops(job) == 64
            assert len(store.ranks(job)) == 8
        summary = {j.job: j for j in store.jobs()}
        assert set(summary) == set(jobs) and all(j.ops == 64 for j in summary.values())
        # both shards hold jobs, and each job lives on exactly one
        per_shard = {db: {r[0] for r in client.execute(f"SELECT DISTINCT job FROM {db}.ops_local")}
                     for db in ("c4_s1", "c4_s2")}
        assert per_shard["c4_s1"] and per_shard["c4_s2"]
        assert not per_shard["c4_s1"] & per_shard["c4_s2"]
        assert per_shard["c4_s1"] | per_shard["c4_s2"] == set(jobs)
    finally:
        store.close()
        client.disconnect()
