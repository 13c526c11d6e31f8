"""Session context: each memory's position in its session, and the text window around it.

A memory alone often does not hold the words a later question uses: the answer sits in one
conversation turn, the topic in the turn before. So every memory with a session has a ``seq``
(its position in the session, ordered by creation time, then insertion order) and a row in
``context_fts``: its own text, the text of up to ``WINDOW`` neighbours on each side, and its date
("8 May 2023") so that questions naming a time can match. Search uses it as the
``lexical_context`` space; the ``context`` dense space averages neighbours' vectors at query time.

Windows are maintained inside the catalog's write transactions: inserting, deleting or editing a
memory refreshes the windows that include it. Appending to a session touches only the new rows
and the ``WINDOW`` rows before them; a memory back-dated into the middle of a session renumbers
the rows after it (and rebuilds their windows). Deleting a memory removes its window and mends
its neighbours'; a large delete (retention) may leave both to after it commits, from the
``context_drop`` and ``context_mend`` queues (:func:`mend_pending`): until then the deleted
memory's window stays in ``context_fts`` (search maps every hit to a stored memory, so it finds
nothing) and a neighbour can still match the deleted memory's words. The tables are
:data:`remindful.engine.schema.CONTEXT_DDL`.

The windows' text is not stored: five-turn windows would store every turn five times.
``context_fts`` is a contentless FTS5 table (its index only), and ``context_members`` keeps each
window's recipe (the rowids of its memories in order, :func:`recipe`, and its date words): a
window's text is rebuilt from the memories when it is read (:func:`texts`) or removed from the index (FTS5 removes a
contentless row given the text it indexed). So the text a window was indexed with must stay
rebuildable until the window is rewritten: a memory's content about to change or to be deleted is
first kept in ``context_gone`` (:func:`before_update`, :func:`before_delete`), which wins over
``memories`` while windows built with it remain; it is emptied once no window is left to mend.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

#: Neighbours on each side included in a memory's lexical context window.
WINDOW = 2


def date_words(epoch: float) -> str:
    """'8 May 2023': the words a question about a date would use."""
    when = datetime.fromtimestamp(epoch, UTC)
    return f"{when.day} {when:%B %Y}"


def after_insert(conn: sqlite3.Connection, ids: Sequence[str]) -> None:
    """Number the new rows within their sessions and build the windows they change."""
    sessions: dict[str, float] = {}
    loose: list[int] = []
    taken: list[int] = []
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for rowid, session_id, created in conn.execute(
            f"SELECT rowid, session_id, created_at FROM memories WHERE id IN ({marks})", chunk
        ):
            taken.append(rowid)
            if session_id is None:
                loose.append(rowid)
            else:
                sessions[session_id] = min(created, sessions.get(session_id, created))
    _settle_reused(conn, taken)
    if loose:
        _write_windows(conn, _loose_windows(conn, loose))
    for session_id, earliest in sessions.items():
        first, last = _renumber(conn, session_id, earliest)
        refresh(conn, session_id, first - WINDOW, last)


def _renumber(conn: sqlite3.Connection, session_id: str, earliest: float) -> tuple[int, int]:
    """Give every row of the session created at/after ``earliest`` its position; returns the seq range."""
    # Positions follow (created_at, rowid), so the last earlier row holds the highest one: one index
    # seek, where max(seq) read every earlier row of the session (a store grew slower with its session).
    before = conn.execute(
        "SELECT seq FROM memories WHERE session_id = ? AND created_at < ? AND seq IS NOT NULL "
        "ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (session_id, earliest),
    ).fetchone()
    base = 0 if before is None else before[0] + 1
    rowids = [
        r[0]
        for r in conn.execute(
            "SELECT rowid FROM memories WHERE session_id = ? AND created_at >= ? ORDER BY created_at, rowid",
            (session_id, earliest),
        )
    ]
    conn.executemany("UPDATE memories SET seq = ? WHERE rowid = ?", [(base + i, r) for i, r in enumerate(rowids)])
    return base, base + len(rowids) - 1


#: A window: (rowid, its text, the rowids of its memories as a :func:`recipe`, its date words).
Window = tuple[int, str, str, str]


def refresh(conn: sqlite3.Connection, session_id: str, first: int, last: int) -> None:
    """Rebuild the windows of the session's rows with seq in [first, last]."""
    _write_windows(conn, _windows(conn, session_id, first, last))


def _windows(conn: sqlite3.Connection, session_id: str, first: int, last: int) -> list[Window]:
    """The windows of the session's rows with seq in [first, last]."""
    rows = conn.execute(
        "SELECT rowid, seq, content, created_at FROM memories WHERE session_id = ? AND seq BETWEEN ? AND ? "
        "ORDER BY seq",
        (session_id, first - WINDOW, last + WINDOW),
    ).fetchall()
    windows = []
    for i, (rowid, seq, _content, created) in enumerate(rows):
        if not first <= seq <= last:
            continue
        around = [r for r in rows[max(0, i - WINDOW) : i + WINDOW + 1] if abs(r[1] - seq) <= WINDOW]
        date = date_words(created)
        windows.append((rowid, _text([r[2] for r in around], date), recipe(rowid, [r[0] for r in around]), date))
    return windows


def before_delete(conn: sqlite3.Connection, *, later: bool = False) -> list[tuple[str, int]]:
    """Remove the windows of the rows about to be deleted (the ids in ``temp.doomed``, see
    :meth:`remindful.engine.catalog.Catalog.delete_ids`), or with ``later`` queue them for
    :func:`mend_pending`; returns where the rows sat, so :func:`after_delete` can mend their
    neighbours."""
    doomed = conn.execute(
        "SELECT rowid, session_id, seq FROM memories WHERE id IN (SELECT id FROM temp.doomed)"
    ).fetchall()
    rowids = [(r[0],) for r in doomed]
    # Their windows and their neighbours' were indexed with their text: kept until those are rewritten.
    conn.execute(
        "INSERT OR IGNORE INTO context_gone (rowid, content) "
        "SELECT rowid, content FROM memories WHERE id IN (SELECT id FROM temp.doomed)"
    )
    if later:
        conn.executemany("INSERT OR IGNORE INTO context_drop (rowid) VALUES (?)", rowids)
    else:
        _drop(conn, [r[0] for r in doomed])
    return [(session_id, seq) for _rowid, session_id, seq in doomed if seq is not None]


def after_delete(conn: sqlite3.Connection, spots: Sequence[tuple[str, int]], *, later: bool = False) -> None:
    """Rebuild the windows that included deleted rows: those within ``WINDOW`` positions of one
    (the gaps stay: positions only order). ``later``: only queue the spots for
    :func:`mend_pending`, in the same transaction (so a crash cannot lose them)."""
    if later:
        conn.executemany("INSERT OR IGNORE INTO context_mend (session_id, seq) VALUES (?, ?)", spots)
    else:
        _mend(conn, spots)
        _forget_gone(conn)


def mend_pending(conn: sqlite3.Connection, limit: int) -> int:
    """Remove up to ``limit`` queued windows of deleted rows or, when none are left, mend the
    windows around up to ``limit`` queued spots; returns how many were handled (0: none left)."""
    drops = [r[0] for r in conn.execute("SELECT rowid FROM context_drop ORDER BY rowid LIMIT ?", (limit,))]
    if drops:
        marks = ",".join("?" * len(drops))
        # A rowid a new memory took since (rowids of the newest rows are reused) holds its window
        # (the deleted row's was dropped then: see _settle_reused).
        taken = {r[0] for r in conn.execute(f"SELECT rowid FROM memories WHERE rowid IN ({marks})", drops)}
        _drop(conn, [r for r in drops if r not in taken])
        conn.execute(f"DELETE FROM context_drop WHERE rowid IN ({marks})", drops)
        return len(drops)
    spots = conn.execute(
        "SELECT session_id, seq FROM context_mend ORDER BY session_id, seq LIMIT ?", (limit,)
    ).fetchall()
    if spots:
        _mend(conn, spots)
        conn.executemany("DELETE FROM context_mend WHERE session_id = ? AND seq = ?", spots)
    _forget_gone(conn)
    return len(spots)


def _mend(conn: sqlite3.Connection, spots: Iterable[tuple[str, int]]) -> None:
    """One read per run of affected positions, one write for all."""
    by_session: dict[str, set[int]] = {}
    for session_id, seq in spots:
        by_session.setdefault(session_id, set()).update(range(seq - WINDOW, seq + WINDOW + 1))
    windows: list[Window] = []
    for session_id, seqs in by_session.items():
        for first, last in _runs(sorted(seqs)):
            windows += _windows(conn, session_id, first, last)
    _write_windows(conn, windows)


def _runs(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive runs in sorted integers: [1, 2, 3, 7, 8] -> [(1, 3), (7, 8)]."""
    runs: list[tuple[int, int]] = []
    for seq in seqs:
        if runs and seq == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


def before_update(conn: sqlite3.Connection, memory_id: str) -> None:
    """A memory's content is about to change: keep the text its windows were indexed with, for
    :func:`after_update`."""
    conn.execute(
        "INSERT OR REPLACE INTO context_gone (rowid, content) SELECT rowid, content FROM memories WHERE id = ?",
        (memory_id,),
    )


def after_update(conn: sqlite3.Connection, memory_id: str) -> None:
    """Rebuild the windows that include a memory whose content changed (after :func:`before_update`)."""
    row = conn.execute("SELECT rowid, session_id, seq FROM memories WHERE id = ?", (memory_id,)).fetchone()
    if row is None:
        return
    rowid, session_id, seq = row
    if session_id is None or seq is None:
        _write_windows(conn, _loose_windows(conn, [rowid]))
    else:
        refresh(conn, session_id, seq - WINDOW, seq + WINDOW)
    # Every window holding it was rewritten: its new content is the one to rebuild them from.
    conn.execute("DELETE FROM context_gone WHERE rowid = ?", (rowid,))


def rebuild(conn: sqlite3.Connection) -> None:
    """Renumber every session and rebuild every window (after an import or a schema upgrade)."""
    conn.execute("INSERT INTO context_fts (context_fts) VALUES ('delete-all')")
    conn.execute("DELETE FROM context_members")
    conn.execute("DELETE FROM context_mend")
    conn.execute("DELETE FROM context_drop")
    conn.execute("DELETE FROM context_gone")
    loose = [r[0] for r in conn.execute("SELECT rowid FROM memories WHERE session_id IS NULL")]
    _write_windows(conn, _loose_windows(conn, loose))
    for (session_id,) in conn.execute("SELECT DISTINCT session_id FROM memories WHERE session_id IS NOT NULL"):
        first, last = _renumber(conn, session_id, float("-inf"))
        refresh(conn, session_id, first, last)


def _loose_windows(conn: sqlite3.Connection, rowids: Sequence[int]) -> list[Window]:
    out: list[Window] = []
    for start in range(0, len(rowids), 500):
        chunk = list(rowids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for rowid, content, created in conn.execute(
            f"SELECT rowid, content, created_at FROM memories WHERE rowid IN ({marks})", chunk
        ):
            date = date_words(created)
            out.append((rowid, _text([content], date), recipe(rowid, [rowid]), date))
    return out


def recipe(rowid: int, members: Sequence[int]) -> str:
    """How ``context_members`` keeps the memories of the window of ``rowid``: ``"-2+5"`` for a run
    of rowids (five of them, from ``rowid - 2``: the rule, since a session's turns stored together
    take consecutive rowids), else the rowids, comma-separated (the only form before schema 15)."""
    first = members[0]
    if list(members) == list(range(first, first + len(members))):
        return f"{first - rowid}+{len(members)}"
    return ",".join(str(m) for m in members)


def members_of(rowid: int, recipe: str) -> list[int]:
    """The rowids a :func:`recipe` of the window of ``rowid`` names, in order."""
    if "+" in recipe:
        offset, count = recipe.split("+")
        first = rowid + int(offset)
        return list(range(first, first + int(count)))
    return [int(m) for m in recipe.split(",")]


def _text(contents: Sequence[str], date: str) -> str:
    return "\n".join(contents) + f"\n({date})"


def texts(conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, str]:
    """The window text of each of ``rowids`` that has a window, as it was indexed: rebuilt from its
    recipe, with the content each memory had then (``context_gone`` before ``memories``)."""
    return read_texts(lambda sql, params: conn.execute(sql, params).fetchall(), rowids)


def read_texts(read: Callable[[str, Sequence[Any]], Sequence[Any]], rowids: Sequence[int]) -> dict[int, str]:
    """:func:`texts` through ``read(sql, params)`` (a catalog's reads, outside a write)."""
    recipes = read_recipes(read, rowids)
    contents = read_contents(read, sorted({m for members, _ in recipes.values() for m in members}))
    return {
        rowid: _text([contents[m] for m in members if m in contents], date)
        for rowid, (members, date) in recipes.items()
    }


def read_recipes(
    read: Callable[[str, Sequence[Any]], Sequence[Any]], rowids: Sequence[int]
) -> dict[int, tuple[list[int], str]]:
    """The members (rowids, in order) and the date words of the window of each of ``rowids`` that
    has one. Its text was indexed as the members' contents, a line each, then ``(date)``
    (:func:`read_contents` gives those contents)."""
    recipes: dict[int, tuple[list[int], str]] = {}
    for start in range(0, len(rowids), 500):
        chunk = list(rowids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for rowid, members, date in read(
            f"SELECT rowid, members, date FROM context_members WHERE rowid IN ({marks})", chunk
        ):
            recipes[rowid] = (members_of(rowid, members), date)
    return recipes


def read_contents(
    read: Callable[[str, Sequence[Any]], Sequence[Any]],
    members: Sequence[int],
    *,
    tables: Sequence[str] = ("context_gone", "memories"),
) -> dict[int, str]:
    """The content each of ``members`` had when the windows that hold it were indexed: a content
    kept in ``context_gone`` wins over the memory's own (see this module's docstring); a member
    found in neither is left out, as the window's text leaves it out. ``tables`` the tables to read."""
    contents: dict[int, str] = {}
    for table in tables:
        left = [m for m in members if m not in contents]
        for start in range(0, len(left), 500):
            chunk = left[start : start + 500]
            marks = ",".join("?" * len(chunk))
            contents.update(read(f"SELECT rowid, content FROM {table} WHERE rowid IN ({marks})", chunk))
    return contents


def _drop(conn: sqlite3.Connection, rowids: Sequence[int]) -> None:
    """Remove the windows of ``rowids`` from the index (given the text each was indexed with)."""
    old = texts(conn, rowids)
    if old:
        conn.executemany(
            "INSERT INTO context_fts (context_fts, rowid, text) VALUES ('delete', ?, ?)", list(old.items())
        )
        conn.executemany("DELETE FROM context_members WHERE rowid = ?", [(r,) for r in old])


def _forget_gone(conn: sqlite3.Connection) -> None:
    """Once nothing is left to mend, no window was indexed with a content kept in ``context_gone``."""
    if not conn.execute("SELECT 1 FROM context_drop UNION ALL SELECT 1 FROM context_mend LIMIT 1").fetchone():
        conn.execute("DELETE FROM context_gone")


def _settle_reused(conn: sqlite3.Connection, rowids: Sequence[int]) -> None:
    """New rows took rowids of deleted ones (SQLite reuses the newest) whose windows, or their
    neighbours', are still to mend: drop the windows left under those rowids and mend everything
    pending now, while their text can still be rebuilt from the deleted rows' content."""
    stale: list[int] = []
    for start in range(0, len(rowids), 500):
        chunk = list(rowids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        stale += [r[0] for r in conn.execute(f"SELECT rowid FROM context_gone WHERE rowid IN ({marks})", chunk)]
    if stale:
        _drop(conn, stale)
        while mend_pending(conn, 1000):
            pass


def _write_windows(conn: sqlite3.Connection, windows: Sequence[Window]) -> None:
    if windows:
        _drop(conn, [w[0] for w in windows])
        conn.executemany("INSERT INTO context_fts (rowid, text) VALUES (?, ?)", [(w[0], w[1]) for w in windows])
        conn.executemany(
            "INSERT INTO context_members (rowid, members, date) VALUES (?, ?, ?)", [(w[0], w[2], w[3]) for w in windows]
        )
