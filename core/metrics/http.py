"""The metrics endpoint: ``GET /metrics`` over HTTP/1.1 on trio, rendered by prometheus_client.

Only what a scraper needs: one request per connection read (keep-alive honoured), the format
chosen from its Accept header (Prometheus text or OpenMetrics). The render runs on the node's
event loop, so it reads the node's tables between two of its steps, never while one changes
them. Requests are bounded: a head over :data:`HEAD_BYTES_MAX` or a connection beyond
:data:`CONNECTIONS_MAX` is closed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import MappingProxyType

import trio
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from core.addresses import join_address, split_address

log = logging.getLogger(__name__)

HEAD_BYTES_MAX = 8192
CONNECTIONS_MAX = 32
IDLE_TIMEOUT_S = 30.0


def address_file(data_dir: Path, node: str) -> Path:
    """Where a running node writes the address its metrics are served on."""
    return data_dir / "run" / f"{node}.metrics"


async def serve_node_metrics(registry: CollectorRegistry, listen: str, written_to: Path, *,
                             task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """:func:`serve_metrics` on ``listen`` (host:port, port 0: a free one); the address served
    is written to ``written_to`` while serving and reported."""
    host, port = split_address(listen)
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve_metrics, registry, host, port)
        address = join_address(host, bound)
        written_to.parent.mkdir(parents=True, exist_ok=True)
        written_to.write_text(address + "\n")
        log.info("metrics at http://%s/metrics", address)
        try:
            task_status.started(address)
            await trio.sleep_forever()
        finally:
            written_to.unlink(missing_ok=True)


async def serve_metrics(registry: CollectorRegistry, host: str, port: int, *,
                        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``registry`` on ``host:port`` until cancelled; reports the bound port."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    open_count = 0

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal open_count
        if open_count >= CONNECTIONS_MAX:
            await trio.aclose_forcefully(stream)
            return
        open_count += 1
        try:
            async with stream:
                await _serve_connection(stream, registry)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            open_count -= 1

    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def _serve_connection(stream: trio.SocketStream, registry: CollectorRegistry) -> None:
    buffer = bytearray()
    while True:
        with trio.move_on_after(IDLE_TIMEOUT_S):
            while b"\r\n\r\n" not in buffer:
                if len(buffer) > HEAD_BYTES_MAX:
                    await stream.send_all(_response(431, b"request head too large\n", close=True))
                    return
                data = await stream.receive_some(4096)
                if not data:
                    return
                buffer += data
        if b"\r\n\r\n" not in buffer:
            return  # idle
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        buffer = bytearray(rest)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        close = headers.get("connection", "").lower() == "close" or (len(parts) == 3 and parts[2] == "HTTP/1.0")
        if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
            await stream.send_all(_response(405, b"only GET /metrics\n", close=True))
            return
        path = parts[1].split("?", 1)[0]
        if path == "/metrics":
            encoder, content_type = choose_encoder(headers.get("accept", ""))
            body = encoder(registry)
            answer = _response(200, body, content_type=content_type, close=close, head_only=parts[0] == "HEAD")
        elif path == "/":
            answer = _response(200, b"mqctl node: metrics at /metrics\n", close=close)
        else:
            answer = _response(404, b"not found: metrics are at /metrics\n", close=close)
        with trio.move_on_after(IDLE_TIMEOUT_S) as waited:  # a scraper that never reads does not keep its place
            await stream.send_all(answer)
        if close or waited.cancelled_caught:
            return


_REASONS = MappingProxyType({200: "OK", 404: "Not Found", 405: "Method Not Allowed",
                             431: "Request Header Fields Too Large"})


def _response(status: int, body: bytes, *, content_type: str = "text/plain; charset=utf-8", close: bool = False,
              head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'close' if close else 'keep-alive'}\r\n\r\n")
    return head.encode("latin-1") + (b"" if head_only else body)
