"""clowder-web: a live view of a user's sessions in a browser (docs/design.md, "The web
view").  Read-only by default; socket-activated by clowder-web.socket."""
