-- Opens every write transaction of the store: IMMEDIATE takes the database's write lock at
-- once, so no transaction fails on upgrading a read lock to it, and processes sharing the file
-- take turns (each waits up to the connection's busy timeout).
BEGIN IMMEDIATE
