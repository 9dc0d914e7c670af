-- User names compare without regard to ASCII case (the only letters a name
-- may hold), so `alice` and `Alice` are one account. Not UNIQUE: a database
-- from before may hold two names that differ only in case, and both keep
-- working (each under its exact spelling; see SqliteStore::credentials).
-- Registration refuses any new name that matches one already there.
CREATE INDEX users_by_name_nocase ON users(name COLLATE NOCASE);
