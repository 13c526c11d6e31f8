"""What a team store's row-level security costs: the PostgreSQL catalog as a team member (a login
role that row-level security binds, with a token: every statement's policies look its person up)
against the same catalog as its superuser (which row-level security does not bind), in one run,
on one throwaway cluster, two databases holding the same rows.

For each: ingest throughput (batches of ``--batch`` rows), store acknowledgement p50 (one row per
transaction: the author trigger and the insert policy run per row), lexical search p50 in both
spaces (the policies' InitPlans, the window's visibility through its memory) and one statement's
round trip. The superuser's figures are the baseline. Run it under ``nice``; the figures carry the
machine's load.
"""

from __future__ import annotations

import contextlib
from typing import Any

from catalog_backends import _copy, measure, throwaway_cluster, workload
from common import add_data_option, emit, machine, parser, scratch_dir, versus

MEMBER = "bench_member"


def main() -> None:
    p = parser(__doc__)
    add_data_option(p)
    p.add_argument("--memories", type=int, default=20_000, help="rows in each database (default 20000)")
    p.add_argument("--batch", type=int, default=500, help="rows per ingest transaction")
    p.add_argument("--queries", type=int, default=200, help="lexical queries timed per space")
    args = p.parse_args()

    import psycopg

    from remindful.engine.postgres.catalog import PostgresCatalog
    from remindful.engine.postgres.team import TeamRepository
    from remindful.engine.redact import StoreRedactor, build_redactor

    rows, queries = workload(args.data, args.memories, args.queries)

    result: dict[str, Any] = {"memories": args.memories, "batch": args.batch, "queries": len(queries)}
    with scratch_dir() as tmp, contextlib.ExitStack() as stack:
        redaction = StoreRedactor(build_redactor(), tmp)
        url = stack.enter_context(throwaway_cluster())
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE solo")
            conn.execute("CREATE DATABASE team")
            conn.execute(f"CREATE ROLE {MEMBER} LOGIN")
        solo_url, team_url = url.rsplit("/", 1)[0] + "/solo", url.rsplit("/", 1)[0] + "/team"
        solo = PostgresCatalog(solo_url, redaction=redaction)
        result["superuser"] = measure("superuser", solo, [_copy(r) for r in rows], queries, args.batch)
        solo.close()
        admin = PostgresCatalog(team_url, redaction=redaction)  # creates the schema and its policies
        token = TeamRepository(admin).add("bench")
        admin.close()
        member = PostgresCatalog(team_url.replace("//bench@", f"//{MEMBER}@"), redaction=redaction, token=token)
        result["member"] = measure("member", member, [_copy(r) for r in rows], queries, args.batch)
        member.close()
    result["machine"] = machine()
    emit(result, args.json, lines)


def lines(r: dict[str, Any]) -> list[str]:
    m, s = r["member"], r["superuser"]
    return [
        f"team store under row-level security, {r['memories']} memories (20 per session), batches of "
        f"{r['batch']}, {r['queries']} queries per lexical space; baseline: the superuser, not bound by it",
        versus("ingest member", m["ingest_rows_per_s"], "superuser", s["ingest_rows_per_s"], unit="rows/s"),
        versus("store ack p50 member", m["ack_p50_ms"], "superuser", s["ack_p50_ms"]),
        versus("lexical search (text) p50 member", m["search_text_p50_ms"], "superuser", s["search_text_p50_ms"]),
        versus("lexical search (window) p50 member", m["search_window_p50_ms"], "superuser", s["search_window_p50_ms"]),
        versus("lexical search (text) p95 member", m["search_text_p95_ms"], "superuser", s["search_text_p95_ms"]),
        versus("one statement (SELECT 1) p50 member", m["round_trip_p50_ms"], "superuser", s["round_trip_p50_ms"]),
    ]


if __name__ == "__main__":
    main()
