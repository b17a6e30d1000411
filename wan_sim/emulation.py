"""An emulated WAN with real traffic: a shaping Kafka proxy per directed link (docs/wan.md, "Emulated WAN").

The simulator scores plans with the same flow model the optimizer plans
with. This module is the independent check: every stream that crosses a
link in a plan crosses a real TCP connection shaped to that link's bandwidth
and delay, and what arrives is measured at the sinks.

How the traffic is routed. The runtime reads a stream produced at site ``a``
from a query at site ``b`` through the address the runtime is given for the
link ``a -> b`` (``SparkRuntime(links=...)``); here that address is a
:class:`LinkProxy` in front of the one broker. A Kafka client connects to
the broker address that Metadata names, not to the one it bootstrapped from,
so the proxy rewrites the broker addresses in Metadata and FindCoordinator
responses to its own: every connection of a cross-site reader, and all its
fetches, go through the link. Same-site reads and every write go to the
broker directly.

The proxies run in a process of their own (:class:`Emulator`). Shaping.
Broker-to-client bytes (fetch responses: the data that crosses
``a -> b``) pass one token bucket per link, shared by every connection on
it, so concurrent readers share the link's bandwidth as streams on one WAN
link do; then they wait the link's one-way delay. Client-to-broker bytes
(requests, small) wait the reverse delay only. A link's queue is the
client's unread fetch: TCP backpressure throttles the broker side as a
saturated link would. Only loopback is used: the proxies listen on
127.0.0.1.

Assumption: a single broker (the embedded Tansu). Each proxy rewrites every
broker in Metadata to itself; with several brokers it would need a port per
broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

log = logging.getLogger(__name__)

METADATA, FIND_COORDINATOR, API_VERSIONS = 3, 10, 18
CHUNK = 64 * 1024


# -- the Kafka wire format, as far as the rewrite needs it ----------------------------------------------------------

def _uvarint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _put_uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _skip_tags(data: bytes, at: int) -> int:
    count, at = _uvarint(data, at)
    for _ in range(count):
        _, at = _uvarint(data, at)
        size, at = _uvarint(data, at)
        at += size
    return at


class _Reader:
    """Reads fields of one response body, compact (flexible versions) or classic."""

    def __init__(self, data: bytes, at: int, compact: bool) -> None:
        self.data, self.at, self.compact = data, at, compact

    def fixed(self, size: int) -> None:
        self.at += size

    def string(self) -> None:
        if self.compact:
            length, self.at = _uvarint(self.data, self.at)
            self.at += max(0, length - 1)
        else:
            (length,) = struct.unpack_from(">h", self.data, self.at)
            self.at += 2 + max(0, length)

    def count(self) -> int:
        if self.compact:
            length, self.at = _uvarint(self.data, self.at)
            return max(0, length - 1)
        (length,) = struct.unpack_from(">i", self.data, self.at)
        self.at += 4
        return max(0, length)

    def tags(self) -> None:
        if self.compact:
            self.at = _skip_tags(self.data, self.at)


def _address(host: str, port: int, compact: bool) -> bytes:
    raw = host.encode()
    length = _put_uvarint(len(raw) + 1) if compact else struct.pack(">h", len(raw))
    return length + raw + struct.pack(">i", port)


def rewrite_response(api_key: int, version: int, frame: bytes, host: str, port: int) -> bytes:
    """``frame`` (a response without its size prefix) with every broker address in it replaced by ``host:port``.

    Metadata (every version) and FindCoordinator (every version) name brokers; other responses are returned as
    they are. A frame that does not parse as expected is returned unchanged (logged): the client then connects
    to the broker directly, which shows in the link's byte counts rather than failing the read.
    """
    if api_key not in (METADATA, FIND_COORDINATOR):
        return frame
    compact = version >= (9 if api_key == METADATA else 3)
    out = bytearray()
    try:
        at = 4  # correlation id
        if compact:
            at = _skip_tags(frame, at)
        reader = _Reader(frame, at, compact)
        if api_key == METADATA:
            if version >= 3:
                reader.fixed(4)  # throttle time
            brokers = reader.count()
            out += frame[:reader.at]
            for _ in range(brokers):
                node = frame[reader.at:reader.at + 4]
                reader.fixed(4)
                reader.string()  # host
                reader.fixed(4)  # port
                start = reader.at
                if version >= 1:
                    reader.string()  # rack
                reader.tags()
                out += node + _address(host, port, compact) + frame[start:reader.at]
            out += frame[reader.at:]
            return bytes(out)
        if version < 4:  # one coordinator: [throttle] error [message] node host port
            if version >= 1:
                reader.fixed(4)
            reader.fixed(2)
            if version >= 1:
                reader.string()
            reader.fixed(4)  # node id
            out += frame[:reader.at]
            reader.string()
            reader.fixed(4)
            out += _address(host, port, compact) + frame[reader.at:]
            return bytes(out)
        reader.fixed(4)  # throttle time
        coordinators = reader.count()
        out += frame[:reader.at]
        for _ in range(coordinators):
            start = reader.at
            reader.string()  # key
            reader.fixed(4)  # node id
            out += frame[start:reader.at]
            reader.string()
            reader.fixed(4)
            out += _address(host, port, compact)
            start = reader.at
            reader.fixed(2)  # error code
            reader.string()  # error message
            reader.tags()
            out += frame[start:reader.at]
        out += frame[reader.at:]
        return bytes(out)
    except (IndexError, struct.error) as error:
        log.warning("could not rewrite a response of API %d v%d (%s); passed through", api_key, version, error)
        return frame


# -- shaping -----------------------------------------------------------------------------------------------------

@dataclass
class Shaper:
    """A link direction: bytes leave at ``bandwidth_mbps`` in arrival order, then wait ``delay_ms``.

    ``release(size)`` returns when ``size`` bytes may be delivered. Shared by every connection on the link.
    """

    bandwidth_mbps: float | None
    delay_ms: float
    free_at: float = 0.0
    sent_bytes: int = 0
    busy_s: float = 0.0

    def departure(self, size: int, now: float) -> float:
        """When ``size`` bytes arriving ``now`` have been serialized onto the link (and reserve that time)."""
        self.sent_bytes += size
        if not self.bandwidth_mbps:
            return now
        start = max(now, self.free_at)
        serialization = size * 8 / (self.bandwidth_mbps * 1e6)
        self.free_at = start + serialization
        self.busy_s += serialization
        return self.free_at


@dataclass
class LinkStats:
    link: tuple[str, str]
    address: str
    bandwidth_mbps: float | None
    delay_ms: float
    bytes_forward: int
    bytes_back: int
    busy_s: float
    connections: int


@dataclass
class LinkProxy:
    """A listening port that carries one directed link ``source -> destination`` to the broker."""

    link: tuple[str, str]
    broker: tuple[str, int]
    bandwidth_mbps: float | None
    delay_ms: float
    port: int = 0
    forward: Shaper = field(init=False)
    back: Shaper = field(init=False)
    connections: int = 0
    _server: asyncio.AbstractServer | None = None
    _open: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self.forward = Shaper(self.bandwidth_mbps, self.delay_ms)  # broker -> reader: the data crossing the link
        self.back = Shaper(None, self.delay_ms)  # requests: delay only

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._open):
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def stats(self) -> LinkStats:
        return LinkStats(self.link, self.address, self.bandwidth_mbps, self.delay_ms, self.forward.sent_bytes,
                         self.back.sent_bytes, self.forward.busy_s, self.connections)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        broker_writer = None
        tasks: set[asyncio.Task] = set()
        try:
            broker_reader, broker_writer = await asyncio.open_connection(*self.broker)
            pending: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version) of requests in flight
            to_broker: asyncio.Queue = asyncio.Queue()
            to_client: asyncio.Queue = asyncio.Queue()
            readers = {asyncio.create_task(self._requests(client_reader, to_broker, pending)),
                       asyncio.create_task(self._responses(broker_reader, to_client, pending))}
            tasks = readers | {asyncio.create_task(_deliver(to_broker, broker_writer)),
                               asyncio.create_task(_deliver(to_client, client_writer))}
            self._open |= tasks
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except OSError as error:
            log.warning("link %s -> %s: broker unreachable (%s)", *self.link, error)
        finally:  # one side closed (or the proxy is closing: :meth:`close` cancels them): close both
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._open -= tasks
            for writer in (client_writer, broker_writer):
                if writer is not None:
                    writer.close()

    async def _requests(self, reader: asyncio.StreamReader, out: asyncio.Queue,
                        pending: dict[int, tuple[int, int]]) -> None:
        try:
            while True:
                size = await reader.readexactly(4)
                body = await reader.readexactly(struct.unpack(">i", size)[0])
                api_key, version, correlation = struct.unpack_from(">hhi", body)
                pending[correlation] = (api_key, version)
                await _send(self.back, size + body, out)
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def _responses(self, reader: asyncio.StreamReader, out: asyncio.Queue,
                         pending: dict[int, tuple[int, int]]) -> None:
        host, port = "127.0.0.1", self.port
        try:
            while True:
                size = await reader.readexactly(4)
                body = await reader.readexactly(struct.unpack(">i", size)[0])
                (correlation,) = struct.unpack_from(">i", body)
                api_key, version = pending.pop(correlation, (-1, -1))
                if api_key in (METADATA, FIND_COORDINATOR):
                    body = rewrite_response(api_key, version, body, host, port)
                    size = struct.pack(">i", len(body))
                frame = size + body
                for start in range(0, len(frame), CHUNK):
                    await _send(self.forward, frame[start:start + CHUNK], out)
        except (asyncio.IncompleteReadError, ConnectionError):
            return


async def _send(shaper: Shaper, data: bytes, out: asyncio.Queue) -> None:
    """Put ``data`` on the link: wait until it is serialized (what paces the sender, through TCP), then hand it to
    the delivery queue due one delay later. Bytes in flight do not hold the next ones back: the delay is the
    link's propagation, not a pause per chunk."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    departure = shaper.departure(len(data), now)
    if departure > now:
        await asyncio.sleep(departure - now)
    out.put_nowait((departure + shaper.delay_ms / 1000, data))


async def _deliver(queue: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
    """Write what a direction carries, each chunk when it is due, in order."""
    loop = asyncio.get_running_loop()
    while True:
        due, data = await queue.get()
        wait = due - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        writer.write(data)
        await writer.drain()


class _Proxies:
    """The link proxies of one WAN on an event loop of their own (a thread of the emulator's process)."""

    def __init__(self, broker: str, links: Mapping[tuple[str, str], tuple[float | None, float]]) -> None:
        host, _, port = broker.rpartition(":")
        target = (host or "127.0.0.1", int(port))
        self.proxies = {link: LinkProxy(link, target, bandwidth, delay) for link, (bandwidth, delay) in links.items()}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sana-wan-links", daemon=True)
        self._thread.start()
        self._call(self._start_all())

    def _call(self, coroutine, timeout_s: float = 10.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    async def _start_all(self) -> None:
        for proxy in self.proxies.values():
            await proxy.start()

    async def _close_all(self) -> None:
        for proxy in self.proxies.values():
            await proxy.close()

    @property
    def addresses(self) -> dict[tuple[str, str], str]:
        return {link: proxy.address for link, proxy in self.proxies.items()}

    def stats(self) -> list[LinkStats]:
        async def collect() -> list[LinkStats]:
            return [proxy.stats() for proxy in self.proxies.values()]

        return self._call(collect())

    def close(self) -> None:
        try:
            self._call(self._close_all())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


def _serve(broker: str, links: dict[tuple[str, str], tuple[float | None, float]]) -> None:
    """The emulator process: start the proxies, print their addresses (a JSON line), then answer ``stats`` lines
    on stdin until ``close`` or the end of stdin (the parent went away)."""
    proxies = _Proxies(broker, links)
    print(json.dumps([[*link, address] for link, address in proxies.addresses.items()]), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() != "stats":
                break
            print(json.dumps([asdict(stats) for stats in proxies.stats()]), flush=True)
    finally:
        proxies.close()


class Emulator:
    """The link proxies of one WAN, in a process of their own (``python -m wan_sim.emulation``), so the shaping
    keeps time whatever the caller's process is busy with (a Spark driver's Python, in the benchmark).

    ``links`` maps ``(from, to)`` to ``(bandwidth_mbps, delay_ms)``; :attr:`addresses` maps each to the address a
    reader at ``to`` uses for streams produced at ``from`` (what ``SparkRuntime(links=...)`` takes).
    """

    def __init__(self, broker: str, links: Mapping[tuple[str, str], tuple[float | None, float]]) -> None:
        spec = json.dumps({"broker": broker, "links": [[a, b, bandwidth, delay] for (a, b), (bandwidth, delay) in links.items()]})
        self._process = subprocess.Popen([sys.executable, "-m", "wan_sim.emulation", spec], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
        line = self._process.stdout.readline()
        if not line:
            self._process.kill()
            raise RuntimeError(f"the WAN emulator exited with {self._process.wait()} before it listened")
        self.addresses: dict[tuple[str, str], str] = {(a, b): address for a, b, address in json.loads(line)}

    def stats(self) -> list[LinkStats]:
        self._process.stdin.write("stats\n")
        self._process.stdin.flush()
        rows = json.loads(self._process.stdout.readline())
        return [LinkStats(**{**row, "link": tuple(row["link"])}) for row in rows]

    def close(self) -> None:
        try:
            self._process.stdin.close()
        except OSError:
            pass
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> Emulator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wan_links(config, sites: Iterable[str] | None = None) -> dict[tuple[str, str], tuple[float, float]]:
    """Every directed link between compute-or-source sites of a :class:`~wan.topology.WanConfig`, with its
    bandwidth and one-way delay (the configuration's link, else its default link)."""
    names = list(sites) if sites is not None else list(config.site_names)
    links = {}
    for a in names:
        for b in names:
            if a != b:
                link = config.link(a, b)
                links[(a, b)] = (link.bandwidth_mbps, link.latency_ms)
    return links


if __name__ == "__main__":
    _spec = json.loads(sys.argv[1])
    _serve(_spec["broker"], {(a, b): (bandwidth, delay) for a, b, bandwidth, delay in _spec["links"]})
