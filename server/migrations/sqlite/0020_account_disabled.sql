-- When the operator disabled the account (`evi-server admin disable`):
-- its tokens and logins are refused until `admin enable` clears it.
ALTER TABLE users ADD COLUMN disabled_at INTEGER;
