"""controld: the clowder control daemon (clowder-control), which keeps the agents that should exist in existence."""
