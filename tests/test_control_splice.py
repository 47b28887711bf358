"""controld.server.splice, the copy between a client and the host behind an attach
through clowder-control, on a multiplexed stream (what a remote client's attach rides
on): the host's first bytes (Attached and the repaint), read before the copy starts,
reach the client even when the host sends nothing after them, as for a quiet session.
Before, they went out only with the host's next bytes: a quiet agent's attach through
a mux went unanswered now and then (when its whole answer came in one read)."""

from __future__ import annotations

import asyncio
import socket

from controld.mux import Mux, Stream
from controld.server import splice
import clowder_wire as P


def test_the_hosts_first_bytes_go_out_though_it_sends_nothing_more():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        client, theirs = socket.socketpair()  # the client's connection to control
        host, host_peer = socket.socketpair()  # control's connection to the host
        client.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=theirs)
        mux = Mux(None, 0, reader, writer)
        stream = mux.streams[1] = Stream(mux, 1, "session")
        host_reader, host_writer = await asyncio.open_connection(sock=host)
        stream.write(b"attached-and-repaint")  # as _proxy_attach does with `first`
        task = asyncio.ensure_future(splice(stream, stream, host_reader, host_writer))
        try:
            data = await asyncio.wait_for(loop.sock_recv(client, 1 << 16), 5)
            [frame] = P.FrameReader().feed(data)
            assert isinstance(frame, P.StreamData), frame
            assert (frame.stream, frame.data) == (1, b"attached-and-repaint")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            writer.close()
            for s in (client, host_peer):
                s.close()
    asyncio.run(main())
