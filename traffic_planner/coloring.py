"""Exact placement for the common case: equal flows on a full leaf/spine mesh.

When every flow that has a choice picks a spine (candidate ``k`` = up arc to spine ``k``, down
arc from it, the same spine order for every flow), all flows ask the same rate ``d``, and every
such arc (all of one capacity) holds exactly one of them (``d <= cap < 2d``), placing the flows is
edge colouring of a bipartite multigraph: source leaves on one side, destination leaves on the
other, a flow an edge, a spine a colour. By Konig's theorem a proper colouring with as many
colours as spines exists when no leaf has more flows than spines, and the classic algorithm
finds it: colour each edge with a colour free at both ends, or else swap two colours along an
alternating (Kempe) path first. Every link then carries at most one flow: the optimum. Where the
conditions do not hold, :func:`colour` returns None and the general solver runs.
"""

from __future__ import annotations

import logging

from traffic_planner.problem import Problem

log = logging.getLogger(__name__)


def colour(problem: Problem) -> list[int] | None:
    """A choice of candidate per flow with at most one flow per variable arc, or None."""
    p = problem
    movable = [f for f, cs in enumerate(p.cands) if len(cs) > 1]
    if not movable:
        return None
    first = p.cands[movable[0]]
    n_colours = len(first)
    spines = [p.arcs[up][1] for up, _ in first] if len(first[0]) == 2 else None
    d = p.demand[movable[0]]
    if spines is None:
        return None
    src_of: dict[str, int] = {}
    dst_of: dict[str, int] = {}
    edges: list[tuple[int, int]] = []
    seen_lists: set[int] = set()
    used_arcs: set[int] = set()
    for f in movable:
        cs = p.cands[f]
        if p.demand[f] != d or len(cs) != n_colours:
            return None
        if id(cs) not in seen_lists:
            seen_lists.add(id(cs))
            for k, arcs in enumerate(cs):
                if len(arcs) != 2:
                    return None
                up, down = arcs
                if p.arcs[up][1] != spines[k] or p.arcs[down][0] != spines[k]:
                    return None
                if p.arcs[up][0] != p.arcs[cs[0][0]][0] or p.arcs[down][1] != \
                        p.arcs[cs[0][1]][1]:
                    return None
                used_arcs.add(up)
                used_arcs.add(down)
        u = src_of.setdefault(p.arcs[cs[0][0]][0], len(src_of))
        v = dst_of.setdefault(p.arcs[cs[0][1]][1], len(dst_of))
        edges.append((u, v))
    caps = {p.cap[a] for a in used_arcs}
    if len(caps) != 1 or not d <= caps.pop() < 2 * d:
        return None
    # Nothing else may load these arcs: no fixed load, no flow without a choice.
    if any(a in used_arcs for arcs in p.fixed for a in arcs):
        return None
    if any(a in used_arcs for cs in p.cands if len(cs) == 1 for a in cs[0]):
        return None
    degree_s, degree_d = [0] * len(src_of), [0] * len(dst_of)
    for u, v in edges:
        degree_s[u] += 1
        degree_d[v] += 1
    if max(degree_s) > n_colours or max(degree_d) > n_colours:
        return None
    colours = _bipartite_edge_colouring(edges, len(src_of), len(dst_of), n_colours)
    choice = [0] * len(p.flows)
    for f, c in zip(movable, colours, strict=True):
        choice[f] = c
    log.debug("edge colouring placed %d flows on %d spines", len(movable), n_colours)
    return choice


def _bipartite_edge_colouring(edges: list[tuple[int, int]], n_src: int, n_dst: int,
                              n_colours: int) -> list[int]:
    """Colour ``edges`` (source, destination) so no two at one vertex share a colour."""
    at_src = [[-1] * n_colours for _ in range(n_src)]    # vertex -> colour -> edge or -1
    at_dst = [[-1] * n_colours for _ in range(n_dst)]
    colour_of = [-1] * len(edges)
    for e, (u, v) in enumerate(edges):
        su, sv = at_src[u], at_dst[v]
        both = next((c for c in range(n_colours) if su[c] < 0 and sv[c] < 0), -1)
        if both < 0:
            alpha = su.index(-1)             # free at u, used at v
            beta = sv.index(-1)              # free at v, used at u
            # Swap alpha and beta along the path from v that starts with its alpha edge; in a
            # bipartite graph it cannot end at u, so alpha becomes free at both ends.
            path = []
            side, vertex, want = "d", v, alpha
            while True:
                table = at_dst if side == "d" else at_src
                edge = table[vertex][want]
                if edge < 0:
                    break
                path.append(edge)
                x, y = edges[edge]
                side, vertex = ("s", x) if side == "d" else ("d", y)
                want = beta if want == alpha else alpha
            for edge in path:
                x, y = edges[edge]
                at_src[x][colour_of[edge]] = -1
                at_dst[y][colour_of[edge]] = -1
            for edge in path:
                x, y = edges[edge]
                new = beta if colour_of[edge] == alpha else alpha
                colour_of[edge] = new
                at_src[x][new] = edge
                at_dst[y][new] = edge
            both = alpha
        colour_of[e] = both
        su[both] = e
        sv[both] = e
    return colour_of
