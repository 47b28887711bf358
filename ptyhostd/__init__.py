"""ptyhostd: the clowder PTY host. It owns pseudo-terminals and their backlogs and parks
them in systemd's file-descriptor store so that its own restarts lose nothing."""
