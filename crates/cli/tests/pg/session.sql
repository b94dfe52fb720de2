-- psql against a brine node serving apps/bank.toml (crates/cli/tests/pg_clients.rs).
\set ON_ERROR_STOP 1
\dt
\d account
BEGIN;
UPDATE account SET balance = balance - 5 WHERE id = 1;
UPDATE account SET balance = balance + 5 WHERE id = 2;
COMMIT;
BEGIN;
UPDATE account SET balance = 0 WHERE id = 3;
ROLLBACK;
SELECT id, balance FROM account WHERE id <= 3 ORDER BY id;
SELECT SUM(balance) AS total FROM account;
CALL total();
