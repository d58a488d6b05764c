"""The backing store: secrets as rows of one table in a SQLite file.

This is the part to replace with a client of your own secret store. server.py builds a `Store`
from a SqliteStore object's spec and calls the methods below; they return plain values and
raise the errors of errors.py.

The table holds one value per key, as bytes, with no versions:

    CREATE TABLE secrets (key TEXT PRIMARY KEY, value BLOB NOT NULL);
"""

import contextlib
import os
import re
import sqlite3
import urllib.parse

from errors import Conflict, InvalidSpec, ProviderError, Unavailable

TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# SQLite's errors that a later try may not meet.
TRANSIENT = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_FULL")


class Store:
    def __init__(self, spec, data_dir, where):
        """`spec` is the SqliteStore's spec; `where` names the object in messages."""
        path, table = spec.get("path"), spec.get("table") or "secrets"
        if not isinstance(path, str) or not os.path.isabs(path):
            raise InvalidSpec(f"{where}: spec.path must be an absolute path")
        # The file must lie inside --data-dir: a SqliteStore cannot point the server at any
        # other file it can read.
        real, root = os.path.realpath(path), os.path.realpath(data_dir)
        if os.path.commonpath([real, root]) != root:
            raise InvalidSpec(f"{where}: spec.path {path!r} is outside the server's data directory")
        if not isinstance(table, str) or not TABLE_NAME.match(table):
            raise InvalidSpec(f"{where}: spec.table must be a plain SQL name (letters, digits, _)")
        self.path, self.table, self.where = path, table, where
        # A team that only reads (say, secrets another system writes) sets spec.readOnly.
        self.read_only = spec.get("readOnly") is True

    def writable(self):
        """Refuses a write to a read-only store (the operator refuses it first, by Capabilities)."""
        if self.read_only:
            raise Conflict(f"{self.where} is read-only (spec.readOnly)")

    @contextlib.contextmanager
    def _db(self):
        """A connection for one call, in autocommit mode; errors become ours."""
        try:
            # mode=rw: a missing file is an error, not a new empty database.
            uri = "file:" + urllib.parse.quote(self.path) + "?mode=rw"
            db = sqlite3.connect(uri, uri=True, timeout=5, isolation_level=None)
        except sqlite3.Error as e:
            raise Unavailable(f"{self.where}: cannot open {self.path}: {e}") from None
        try:
            yield db
        except sqlite3.Error as e:
            name = getattr(e, "sqlite_errorname", "")
            if "no such table" in str(e):
                raise InvalidSpec(self._no_table()) from None
            if name == "SQLITE_NOTADB":
                raise InvalidSpec(f"{self.where}: {self.path} is not a SQLite database") from None
            if name.startswith(TRANSIENT):
                raise Unavailable(f"{self.where}: {self.path}: {e}") from None
            raise ProviderError(f"{self.where}: {self.path}: {e}") from None  # UNKNOWN
        finally:
            db.close()

    def missing_table(self):
        """None when the file opens and has the table, else what is wrong (for Validate)."""
        with self._db() as db:
            found = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (self.table,)
            ).fetchone()
        return None if found else self._no_table()

    def _no_table(self):
        return f"{self.where}: table {self.table!r} does not exist in {self.path}"

    def get(self, key):
        """The value of `key` as bytes, or None."""
        with self._db() as db:
            row = db.execute(f'SELECT value FROM "{self.table}" WHERE key = ?', (key,)).fetchone()
        return None if row is None else _bytes(row[0])

    def items(self, prefix=""):
        """Every (key, value) whose key starts with `prefix`."""
        with self._db() as db:
            rows = db.execute(
                f'SELECT key, value FROM "{self.table}" WHERE substr(key, 1, ?) = ? ORDER BY key',
                (len(prefix), prefix),
            ).fetchall()
        return [(k, _bytes(v)) for k, v in rows]

    def update(self, key, change):
        """Replaces the value of `key` with `change(old value or None)` in one transaction;
        `change` returning None deletes the row."""
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")  # no other writer between our read and our write
            try:
                row = db.execute(f'SELECT value FROM "{self.table}" WHERE key = ?', (key,)).fetchone()
                new = change(None if row is None else _bytes(row[0]))
                if new is None:
                    db.execute(f'DELETE FROM "{self.table}" WHERE key = ?', (key,))
                else:
                    db.execute(
                        f'INSERT INTO "{self.table}" (key, value) VALUES (?, ?) '
                        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (key, new),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise


def _bytes(value):
    # Rows written with the sqlite3 shell hold TEXT; ours hold BLOB.
    return value.encode() if isinstance(value, str) else bytes(value)
