-- c4's store on a replicated, sharded ClickHouse cluster (large sites).
--
-- The same tables as the daemon's ClickHouse store creates on one server
-- (diagnosis/store/clickhouse.py), split in two:
--   <table>_local  ReplicatedReplacingMergeTree on every node: the rows of one shard, kept on
--                  each of its replicas through ZooKeeper/Keeper;
--   <table>        Distributed over <table>_local: what the daemons read and write. The daemon
--                  finds these tables already there and creates nothing.
-- Rows go to a shard by job (the sidecar for `applied`), so every version of a row lands on the
-- same shard and `SELECT ... FINAL` collapses duplicates and stale versions exactly as on one
-- server; a job's queries touch one shard's data.
--
-- Before running it (clickhouse-client --multiquery < cluster-schema.sql):
--   * replace c4_cluster with the cluster's name in <remote_servers>, with
--     <internal_replication>true</internal_replication> on every shard;
--   * define the macros {shard} and {replica} on every node;
--   * give the daemons' user a profile with insert_distributed_sync = 1, so that an insert
--     returns once every shard has its rows: the daemon acknowledges a batch to the sidecar
--     only after the insert returned, and exactly-once depends on that.
-- Keep to what the store's server version understands (it is written for 18.16 and later).

CREATE DATABASE IF NOT EXISTS c4 ON CLUSTER c4_cluster;

CREATE TABLE IF NOT EXISTS c4.applied_local ON CLUSTER c4_cluster (
    sidecar String,
    seq UInt64,
    t_ns Int64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/applied', '{replica}')
ORDER BY (sidecar, seq);

CREATE TABLE IF NOT EXISTS c4.applied ON CLUSTER c4_cluster AS c4.applied_local
ENGINE = Distributed(c4_cluster, c4, applied_local, cityHash64(sidecar));

CREATE TABLE IF NOT EXISTS c4.attempts_local ON CLUSTER c4_cluster (
    job String,
    attempt UInt32
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/attempts', '{replica}')
ORDER BY (job, attempt);

CREATE TABLE IF NOT EXISTS c4.attempts ON CLUSTER c4_cluster AS c4.attempts_local
ENGINE = Distributed(c4_cluster, c4, attempts_local, cityHash64(job));

CREATE TABLE IF NOT EXISTS c4.ranks_local ON CLUSTER c4_cluster (
    job String,
    attempt UInt32,
    rank Int32,
    world_size Int32,
    host String,
    local_rank Int32,
    pid Int32,
    gpu String,
    nic String,
    backend String,
    t_ns Int64,
    cuda_device String
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/ranks', '{replica}')
ORDER BY (job, attempt, rank);

CREATE TABLE IF NOT EXISTS c4.ranks ON CLUSTER c4_cluster AS c4.ranks_local
ENGINE = Distributed(c4_cluster, c4, ranks_local, cityHash64(job));

CREATE TABLE IF NOT EXISTS c4.pgroups_local ON CLUSTER c4_cluster (
    job String,
    attempt UInt32,
    pg String,
    ranks Array(Int32),
    description String
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/pgroups', '{replica}')
ORDER BY (job, attempt, pg);

CREATE TABLE IF NOT EXISTS c4.pgroups ON CLUSTER c4_cluster AS c4.pgroups_local
ENGINE = Distributed(c4_cluster, c4, pgroups_local, cityHash64(job));

CREATE TABLE IF NOT EXISTS c4.ops_local ON CLUSTER c4_cluster (
    job String,
    attempt UInt32,
    rank Int32,
    pg String,
    seq Int64,
    op String,
    nbytes Int64,
    dtype String,
    t_enter_ns Int64,
    t_start_ns Int64,
    t_end_ns Int64,
    status UInt8,
    peer Int32,
    error String,
    done UInt8
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/ops', '{replica}', done)
ORDER BY (job, attempt, rank, pg, op, peer, seq);

CREATE TABLE IF NOT EXISTS c4.ops ON CLUSTER c4_cluster AS c4.ops_local
ENGINE = Distributed(c4_cluster, c4, ops_local, cityHash64(job));

CREATE TABLE IF NOT EXISTS c4.conns_local ON CLUSTER c4_cluster (
    job String,
    attempt UInt32,
    rank Int32,
    local String,
    remote String,
    t_ns Int64,
    bytes_acked Int64,
    bytes_received Int64,
    rtt_us Int64,
    delivery_rate Int64,
    retrans Int64,
    busy_us Int64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/conns', '{replica}')
ORDER BY (job, attempt, rank, local, remote, t_ns);

CREATE TABLE IF NOT EXISTS c4.conns ON CLUSTER c4_cluster AS c4.conns_local
ENGINE = Distributed(c4_cluster, c4, conns_local, cityHash64(job));

CREATE TABLE IF NOT EXISTS c4.faults_local ON CLUSTER c4_cluster (
    id String,
    job String,
    state String,
    revision UInt64,
    first_seen_ns Int64,
    body String
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/faults', '{replica}', revision)
ORDER BY (id);

CREATE TABLE IF NOT EXISTS c4.faults ON CLUSTER c4_cluster AS c4.faults_local
ENGINE = Distributed(c4_cluster, c4, faults_local, cityHash64(job));


-- Whole batches of a job's reduced telemetry (progress, linkstat, port) and its sampling
-- schedules, one row per batch (body: base64 of the protobuf batch).
CREATE TABLE IF NOT EXISTS c4.batches_local ON CLUSTER c4_cluster (
    job String,
    attempt UInt32,
    kind String,
    t_lo Int64,
    t_hi Int64,
    count UInt32,
    sidecar String,
    seq UInt64,
    body String
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/batches', '{replica}')
ORDER BY (job, attempt, t_lo, sidecar, seq);

CREATE TABLE IF NOT EXISTS c4.batches ON CLUSTER c4_cluster AS c4.batches_local
ENGINE = Distributed(c4_cluster, c4, batches_local, cityHash64(job));

-- The full records nodes sent around a fault report (detail on demand; body: base64 of the
-- DetailBatch).
CREATE TABLE IF NOT EXISTS c4.details_local ON CLUSTER c4_cluster (
    fault_id String,
    job String,
    attempt UInt32,
    host String,
    count UInt32,
    sidecar String,
    seq UInt64,
    body String
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/details', '{replica}')
ORDER BY (job, fault_id, sidecar, seq);

CREATE TABLE IF NOT EXISTS c4.details ON CLUSTER c4_cluster AS c4.details_local
ENGINE = Distributed(c4_cluster, c4, details_local, cityHash64(job));

-- When each job attempt was last written to (what --max-jobs counts as live and retention ages
-- out), the newest by seen_ns.
CREATE TABLE IF NOT EXISTS c4.activity_local ON CLUSTER c4_cluster (
    job String,
    attempt UInt32,
    seen_ns Int64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/activity', '{replica}', seen_ns)
ORDER BY (job, attempt);

CREATE TABLE IF NOT EXISTS c4.activity ON CLUSTER c4_cluster AS c4.activity_local
ENGINE = Distributed(c4_cluster, c4, activity_local, cityHash64(job));

-- Each host's internals as its sidecar discovered them (JSON), the newest by t_ns.
CREATE TABLE IF NOT EXISTS c4.hosts_local ON CLUSTER c4_cluster (
    host String,
    t_ns UInt64,
    internals String,
    digest String,
    sidecar String
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/c4/hosts', '{replica}', t_ns)
ORDER BY (host);

CREATE TABLE IF NOT EXISTS c4.hosts ON CLUSTER c4_cluster AS c4.hosts_local
ENGINE = Distributed(c4_cluster, c4, hosts_local, cityHash64(host));
