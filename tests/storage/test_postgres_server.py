"""The test PostgreSQL itself: a halt (the outage tests' crash) keeps what the server acknowledged.

The outage and chaos tests assert that nothing is lost; they can only do so when the harness's crash
loses nothing a production server would keep."""

from __future__ import annotations

import subprocess
import threading

import pytest

from tests.postgres import PostgresServer

pytestmark = [pytest.mark.own_database, pytest.mark.slow]  # a server of its own, halted and resumed


def test_a_halt_keeps_every_commit_acknowledged_before_it(own_postgres: PostgresServer) -> None:
    server = own_postgres
    database = server.create()
    server.sql(database, "CREATE TABLE acknowledged (n integer)")
    committed: list[int] = []
    writing = threading.Event()

    def write() -> None:  # one commit after another until the server is gone
        for n in range(100_000):
            try:
                server.sql(database, f"INSERT INTO acknowledged VALUES ({n})")
            except subprocess.CalledProcessError:
                return
            committed.append(n)
            writing.set()

    writer = threading.Thread(target=write)
    writer.start()
    assert writing.wait(60)
    server.halt()  # while commits arrive, as in the chaos tests
    writer.join(60)
    server.resume()
    stored = server.sql(database, "SELECT n FROM acknowledged ORDER BY n").split()
    assert [int(n) for n in stored][: len(committed)] == committed
