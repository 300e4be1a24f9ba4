"""``c4 topology show --job``: a job's assembled topology (``JobTopology.to_json``) in words."""

from __future__ import annotations

from typing import Any

from c4.topology.importers.common import Issue

#: ranks and issues listed in the text; ``--format json`` lists every one
MAX_RANKS_SHOWN = 64
MAX_ISSUES_SHOWN = 40


def job_text(obj: dict[str, Any], max_ranks: int = MAX_RANKS_SHOWN,
             max_issues: int = MAX_ISSUES_SHOWN) -> str:
    hosts, found = obj["hosts"], obj["discovered"]
    lines = [f"job {obj['job']}: {len(hosts)} hosts, {len(found)} discovered; fabric: "
             f"{obj['fabric'] or 'none'}"]
    c = obj.get("counts")
    if c:
        tiers = ", ".join(f"{n} {t}" for t, n in c["tiers"].items()) or "no tiers"
        lines.append(f"topology: {c['hosts']} hosts, {c['gpus']} GPUs, {c['nics']} NICs, "
                     f"{c['switches']} switches ({tiers}), {c['links']} links")
    else:
        lines.append("topology: none (no fabric file and no host discovered)")
    if obj["undiscovered"]:
        lines.append(f"not discovered: {_few(obj['undiscovered'])}")
    ranks = obj["ranks"]
    by_source: dict[str, int] = {}
    for r in ranks:
        by_source[r["from"]] = by_source.get(r["from"], 0) + 1
    lines.append(f"ranks: {len(ranks)} (" + ", ".join(
        f"{n} {src}" for src, n in sorted(by_source.items())) + ")")
    if ranks:
        rows = [("rank", "host", "gpu", "nic", "from")] + [
            (str(r["rank"]), r["host"], r["gpu"] or "-", r["nic"] or "-", r["from"])
            for r in ranks[:max_ranks]]
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip()
                  for row in rows]
        if len(ranks) > max_ranks:
            lines.append(f"  … {len(ranks) - max_ranks} more ranks (--format json lists all)")
    issues = sorted(obj["issues"], key=lambda i: i["level"] != "warning")
    for issue in issues[:max_issues]:
        lines.append(f"{issue['level']}: {Issue.from_json(issue)}")
    if len(issues) > max_issues:
        warnings = sum(i["level"] == "warning" for i in issues[max_issues:])
        lines.append(f"… {len(issues) - max_issues} more issues ({warnings} warnings; "
                     "--format json lists all)")
    return "\n".join(lines)


def _few(items: list[str], n: int = 8) -> str:
    return ", ".join(items[:n]) + (f", … ({len(items) - n} more)" if len(items) > n else "")
