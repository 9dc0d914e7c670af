-- One stream's records in seq order (a session fetched alone, `GET
-- /records?stream=`), read from the index whatever the history's size.
CREATE INDEX IF NOT EXISTS records_by_stream ON records(user_id, stream, seq);
