"""Database access: the embedded server's lifecycle, the connection pool and migrations."""
