"""clowderctl's exit statuses: one name each, and the table --help and the docs show.

A script must be able to tell "the daemon said no" from "there is no daemon" from "the
daemon did not answer" from "I called it wrong" by the status alone, so each has its
own.  `wait` passes the session's own status through, which can be any number: there
clowderctl's own failures take timeout(1)'s convention instead (124 timed out, 125
clowderctl failed, anything else the program's), and `wait --json` gives the program's
status in its output and exits with the statuses of every other command.
"""

from __future__ import annotations

OK = 0
REFUSED = 1  # the daemon refused the request, a check said no, or it could not be done
USAGE = 2  # the command line (or $CLOWDER_TIMEOUT) is wrong: argparse's own status
UNREACHABLE = 3  # nothing to connect to, no permission on the socket, ssh failed, dropped
PARTIAL = 4  # a fleet: some hosts answered, some did not (their rows say why)
TIMEOUT = 124  # a daemon did not answer within the deadline; `wait --timeout` ran out
WAIT_FAILED = 125  # `wait` (without --json): clowderctl failed, as timeout(1)'s 125
INTERRUPTED = 130  # ^C: 128 + SIGINT, as a shell reports it

# ssh's own status when it could not connect or run the command (ssh(1), EXIT STATUS).
SSH_FAILED = 255

TABLE = f"""\
exit status:
  {OK:<4} success
  {REFUSED:<4} refused: the daemon said no (no such session or agent, not yours, a check
       that failed, e.g. `upgrade --check`), or what was asked could not be done
  {USAGE:<4} usage: a bad command line, or a bad $CLOWDER_TIMEOUT
  {UNREACHABLE:<4} unreachable: nothing listens at the socket, no permission on it, ssh
       could not connect, or the connection dropped; `status`: clowder-control
       answered but the PTY host did not
  {PARTIAL:<4} partial: over several hosts (a fleet), some answered and some did not (each
       shown as "HOST unreachable: why"); when none answered, {UNREACHABLE}
  {TIMEOUT:<4} timeout: a daemon did not answer within the deadline (frozen, wedged, or
       its listen backlog full); `wait --timeout` ran out
  {WAIT_FAILED:<4} `wait` only: clowderctl itself failed, whatever the kind (stderr says
       which), its usage errors too
  {INTERRUPTED:<4} interrupted (^C)
  wait: the session's own status (128+N if signal N ended it), unless clowderctl
       itself failed ({TIMEOUT} or {WAIT_FAILED}); `wait --json` prints the session's
       status and exits as every other command
  attach: the session's status when it ends while attached; before that as above
"""
