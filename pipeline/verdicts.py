"""The status rules as column expressions over one queue reference ``(trace, node, queue)``.

A reference's verdict depends on its own counts, on its node's restarts, and for a
store-and-forward queue ``sf.<peer>`` on one fact about the whole trace: whether the peer's
log shows it.  The rules read a reference's fields through a getter, so the same rules
judge a row (a destination queue, right after the per-reference aggregate) and an element
of a trace's array of bridge hops (once the trace's nodes are known).  A verdict is
``struct(r, verdict, detail)`` with ``r`` the rank, so the worst of a trace is the largest.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from waystation.core.names import SF_PREFIX

#: Precedence, worst last: the worst verdict of a trace's references is its status.
RANK = {
    "delivered": 1,
    "in_flight": 2,
    "lost": 3,
    "expired": 4,
    "dead_lettered": 5,
    "duplicated": 6,
}

#: The fields a reference needs: its place, counts, and ``gone`` (a non-durable message
#: whose node restarted after its last event there).
FIELDS = ("node", "queue", "n_routed", "n_acked", "n_forwarded", "n_dead", "n_expired", "gone")

Getter = Callable[[str], Column]


def peer(g: Getter) -> Column:
    """The node a store-and-forward queue ``sf.<peer>`` forwards to."""
    return F.substring(g("queue"), len(SF_PREFIX) + 1, 1 << 20)


def delivered() -> Column:
    """The verdict of a reference acknowledged once and nothing else (most of them)."""
    return F.struct(
        F.lit(RANK["delivered"]).alias("r"),
        F.lit("delivered").alias("verdict"),
        F.lit(None).cast("string").alias("detail"),
    )


def simple(g: Getter) -> Column:
    """True when a destination reference is plainly delivered: :func:`delivered` holds."""
    return (g("n_routed") == 1) & (g("n_acked") == 1) & (g("n_dead") == 0) & (g("n_expired") == 0)


def _dest_rules(g: Getter) -> list[tuple[Column, str]]:
    """A destination queue's verdict: the first rule that holds (else ``in_flight``)."""
    return [
        ((g("n_routed") > 1) | (g("n_acked") > 1), "duplicated"),
        (g("n_dead") > 0, "dead_lettered"),
        (g("n_expired") > 0, "expired"),
        (g("n_acked") > 0, "delivered"),
        (g("gone"), "lost"),
    ]


def _hop_rules(g: Getter, peer_seen: Column, peer_logged: Column) -> list[tuple[Column, str]]:
    """A store-and-forward queue's verdict: the first rule that holds (else ``in_flight``)."""
    out = g("n_forwarded") + g("n_acked") > 0
    return [
        (g("n_dead") > 0, "dead_lettered"),
        (g("n_expired") > 0, "expired"),
        (peer_seen, "delivered"),
        (out & peer_logged, "lost"),
        (out, "in_flight"),  # the peer's log was not given
        (g("gone"), "lost"),
    ]


def _chain(rules: list[tuple[Column, str]], value: Callable[[str], Column]) -> Column:
    c = F.when(rules[0][0], value(rules[0][1]))
    for cond, v in rules[1:]:
        c = c.when(cond, value(v))
    return c.otherwise(value("in_flight"))


def _peer_logged(g: Getter, nodes: list[str]) -> Column:
    return peer(g).isin(nodes) if nodes else F.lit(False)


def _unseen_fwd(g: Getter, sf: Column, peer_seen: Column) -> Column:
    return sf & ~peer_seen & (g("n_forwarded") > 0)


def has_detail(g: Getter, sf: Column, peer_seen: Column) -> Column:
    """True exactly when :func:`verdict` gives a non-null ``detail`` (its conditions, in
    numbers only: the fast path builds the text only for the few traces that need it)."""
    return (
        _unseen_fwd(g, sf, peer_seen)
        | (g("gone") & (g("n_acked") + g("n_dead") + g("n_expired") == 0))
        | (g("n_routed") > 1)
        | (g("n_acked") > 1)
    )


def dest_rank(g: Getter) -> Column:
    """The rank of a destination reference's verdict (:func:`verdict` with ``sf`` false)."""
    return _chain(_dest_rules(g), lambda v: F.lit(RANK[v]))


def hop_rank(g: Getter, peer_seen: Column, peer_logged: Column) -> Column:
    """The rank of a store-and-forward reference's verdict (:func:`verdict` with ``sf``;
    ``peer_logged``: the peer is one of the nodes whose logs are read)."""
    return _chain(_hop_rules(g, peer_seen, peer_logged), lambda v: F.lit(RANK[v]))


def verdict(g: Getter, nodes: list[str], peer_seen: Column) -> Column:
    """``struct(r, verdict, detail)`` of one reference (``peer_seen``: the peer's log has
    the trace; only read for a store-and-forward queue)."""
    sf = g("queue").startswith(SF_PREFIX)
    p = peer(g)
    peer_logged = _peer_logged(g, nodes)
    dest = _chain(_dest_rules(g), F.lit)
    hop = _chain(_hop_rules(g, peer_seen, peer_logged), F.lit)
    at = F.concat(g("node"), F.lit(":"), g("queue"))
    unseen_fwd = _unseen_fwd(g, sf, peer_seen)
    detail = (
        F.when(unseen_fwd & peer_logged,
               F.concat(F.lit("forwarded to "), p, F.lit(", never accepted there")))
        .when(unseen_fwd, F.concat(F.lit("forwarded to "), p, F.lit(", whose log was not given")))
        .when(g("gone") & (g("n_acked") + g("n_dead") + g("n_expired") == 0),
              F.concat(F.lit("non-durable, in "), at, F.lit(" when the node restarted")))
        .when(g("n_routed") > 1,
              F.concat(F.lit("routed "), g("n_routed").cast("string"), F.lit(" times to "), at))
        .when(g("n_acked") > 1,
              F.concat(F.lit("acknowledged "), g("n_acked").cast("string"), F.lit(" times on "),
                       at))
    )  # fmt: skip
    v = F.when(sf, hop).otherwise(dest)
    rank = F.create_map(*[F.lit(x) for kv in RANK.items() for x in kv])
    return F.struct(rank[v].alias("r"), v.alias("verdict"), detail.alias("detail"))
