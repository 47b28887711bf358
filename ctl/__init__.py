"""clowderctl: query and drive the clowder PTY host."""
