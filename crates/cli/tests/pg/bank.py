"""Bank transfers over PostgreSQL's protocol with psycopg: prepared
statements in explicit transactions, retried on serialization failure
(SQLSTATE 40001), from several threads at once; then the total.

Usage: python3 bank.py HOST PORT THREADS TRANSFERS
Prints `transfers=N retries=R total=T` and exits 0 if the total is kept.
"""
import random
import sys
import threading
from decimal import Decimal

import psycopg
from psycopg import errors

HOST, PORT = sys.argv[1], int(sys.argv[2])
THREADS, TRANSFERS = int(sys.argv[3]), int(sys.argv[4])
ACCOUNTS, TOTAL = 10000, Decimal("10000000.00")
lock = threading.Lock()
done = {"transfers": 0, "retries": 0, "errors": []}


def connect():
    return psycopg.connect(host=HOST, port=PORT, user="test", dbname="brine")


def transfer(conn, src, dst, amount):
    """One transfer in one transaction; True if it moved money."""
    with conn.transaction():
        with conn.cursor() as cur:
            cur.execute("SELECT balance FROM account WHERE id = %s", (src,), prepare=True)
            (balance,) = cur.fetchone()
            if balance < amount:
                return False
            cur.execute(
                "UPDATE account SET balance = balance - %s WHERE id = %s",
                (amount, src),
                prepare=True,
            )
            cur.execute(
                "UPDATE account SET balance = balance + %s WHERE id = %s",
                (amount, dst),
                prepare=True,
            )
    return True


def worker(seed):
    rng = random.Random(seed)
    try:
        with connect() as conn:
            for _ in range(TRANSFERS):
                # A few hot accounts, so transactions conflict.
                src, dst = rng.sample(range(8), 2)
                amount = Decimal(rng.randint(1, 500)) / 100
                while True:
                    try:
                        transfer(conn, src, dst, amount)
                        break
                    except errors.SerializationFailure:
                        with lock:
                            done["retries"] += 1
                with lock:
                    done["transfers"] += 1
    except Exception as e:  # reported, and the run fails
        with lock:
            done["errors"].append(repr(e))


threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with connect() as conn:
    # The procedure through CALL, as psycopg calls it.
    conn.execute("CALL transfer(%s, %s, %s)", (9, 10, Decimal("1.00")))
    conn.commit()
    (total,) = conn.execute("SELECT SUM(balance) FROM account").fetchone()
print(f"transfers={done['transfers']} retries={done['retries']} total={total}")
if done["errors"]:
    print("errors:", done["errors"][:3])
    sys.exit(1)
sys.exit(0 if total == TOTAL else 2)
