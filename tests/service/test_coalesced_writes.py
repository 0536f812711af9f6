"""The HTTP protocol's transport sends what one event-loop step writes in one piece, and nothing is lost at close
(served through a real uvicorn server, keep-alive and a 431 then close included: ``test_header_limit.py``)."""

from __future__ import annotations

import asyncio

from service.http_protocol import CoalescedWrites


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"extra {name}"


def test_a_head_leaves_with_its_body_and_alone_at_the_steps_end_or_at_close() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"

    async def main() -> RecordingTransport:
        transport = RecordingTransport()
        coalesced = CoalescedWrites(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
        coalesced.write(head)
        assert transport.writes == []  # held for its body
        coalesced.write(b"{}")
        assert transport.writes == [head + b"{}"]  # at once, in one write
        coalesced.write(b"more")  # not a head: written as it comes
        assert transport.writes[-1] == b"more"
        coalesced.write(head)  # a head whose body does not follow in this step
        await asyncio.sleep(0)
        assert transport.writes[-1] == head
        coalesced.write(head)
        coalesced.close()  # what is held leaves before the connection closes
        assert transport.writes[-1] == head and transport.closed
        assert coalesced.get_extra_info("peername") == "extra peername"  # the rest is the transport's
        await asyncio.sleep(0)  # the flush scheduled for the last head finds nothing left
        return transport

    transport = asyncio.run(main())
    assert len(transport.writes) == 4
