"""A SQLite store written by an earlier c4 (schema 3: requests and attempts without times)
opens, keeps its rows, and counts them as stored at the upgrade."""

from __future__ import annotations

import sqlite3
import time

from diagnosis.store import Write
from diagnosis.store.sqlite import SQLiteStore
from tests.diagnosis.store.store_builders import ranks_of

OLD_SCHEMA = """
CREATE TABLE applied (sidecar TEXT NOT NULL, seq INTEGER NOT NULL,
  PRIMARY KEY (sidecar, seq)) WITHOUT ROWID;
CREATE TABLE attempts (aid INTEGER PRIMARY KEY, job TEXT NOT NULL, attempt INTEGER NOT NULL,
  first_ns INTEGER NOT NULL DEFAULT 0, last_ns INTEGER NOT NULL DEFAULT 0,
  UNIQUE (job, attempt));
CREATE TABLE ranks (aid INTEGER NOT NULL, rank INTEGER NOT NULL, world_size INTEGER,
  host TEXT, local_rank INTEGER, pid INTEGER, gpu TEXT, nic TEXT, backend TEXT, t_ns INTEGER,
  PRIMARY KEY (aid, rank)) WITHOUT ROWID;
INSERT INTO applied VALUES ('car', 1);
INSERT INTO attempts (aid, job, attempt) VALUES (1, 'old', 0);
INSERT INTO ranks VALUES (1, 0, 1, 'node0', 0, 1, '', '', 'gloo', 0);
PRAGMA user_version = 3;
"""


def test_schema_3_store_upgrades_in_place(tmp_path):
    path = tmp_path / "c4.db"
    conn = sqlite3.connect(path)
    conn.executescript(OLD_SCHEMA)
    conn.close()
    before = time.time_ns()
    s = SQLiteStore(str(path))
    try:
        seen = s.job_seen()
        assert list(seen) == ["old"] and seen["old"] >= before
        assert [r.job for r in s.ranks("old")] == ["old"]
        # the old request is still recognised, and is forgotten like any other
        assert s.write([Write("car", 1, ranks_of("old", 0, 1)[0])]) == [True]
        assert s.forget_applied(time.time_ns()) == 1
        assert s.write([Write("car", 1, ranks_of("old", 0, 1)[0])]) == [False]
    finally:
        s.close()
