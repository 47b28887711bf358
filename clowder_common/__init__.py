"""clowder_common: the little that clowder's two daemons and its client share besides
the wire protocol (clowder_wire): the version, logging to the journal, systemd's notify
protocol, the fd-limit refusal, the listening socket, the raw-line model, and the
journal lines rate-limited per key (ratelog.py).

It imports nothing of ptyhostd, controld or ctl (tests/test_layering.py).
"""

__version__ = "0.1.0"
