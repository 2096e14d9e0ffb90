"""The llama-servers running on this host, and the settings each runs with: its command line and LLAMA_ARG_*
variables (psutil), and what it answers on GET /props (and GET /slots where /props leaves something out) over loopback.

A server is asked only on a loopback address (127.0.0.1, or ::1 where it listens on IPv6 alone), with no token and
no proxy, each answer read under one deadline and a size cap; what it answers is taken only in the shape the pinned
llama-server writes (estimator/server_args.py), never echoed. One that does not answer, or answers anything else,
is kept with what its command line names (`answered` false). Readings are kept for a few seconds, so a listing or a
batch reads the host once.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import psutil

from memfit.estimator.server_args import RunningServer, props_settings, server_args, slots_settings

NAMES = frozenset({"llama-server"})  # the process name (the program, or the script it runs) of llama-server
LLAMA_ARG = "LLAMA_ARG_"  # the variables llama.cpp's options read (common/arg.cpp set_env)
DEFAULT_PORT = 8080  # common/common.h: port = 8080
MOST_SERVERS = 16  # read at once, the first in the process table; more are left out
DEADLINE_SECONDS = 1.0  # for all of one server's answers together
MOST_BYTES = 1 << 20  # an answer larger than this is not read (a /props with its chat template is a few KiB)
KEEP_SECONDS = 2.0  # a reading is kept this long


def loopback(address: str) -> str | None:
    """The loopback address to ask a server listening on `address` at: itself if it is one, the family's own for a
    wildcard; None for an address only another interface reaches."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return None
    if ip.is_loopback:
        return str(ip)
    if ip.is_unspecified:
        return "::1" if ip.version == 6 else "127.0.0.1"
    return None


def listening(process: psutil.Process, host: str | None, port: int | None) -> tuple[str, int] | None:
    """Where to ask the server: a loopback address it listens on (its sockets, as psutil reads them), else its
    --host and --port (common/common.h: 127.0.0.1:8080)."""
    try:
        sockets = [c.laddr for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    except (psutil.Error, OSError):
        sockets = []
    for address, bound in sorted(sockets, key=lambda a: ":" in a[0]):  # IPv4 first
        reach = loopback(address)
        if reach is not None:
            return reach, bound
    if sockets:
        return None  # it listens, on no address loopback reaches
    reach = loopback(host or "127.0.0.1")
    return (reach, port or DEFAULT_PORT) if reach is not None else None


def http_json(address: str, port: int, path: str, deadline: float) -> object | None:
    """GET `path` from the server as JSON; None for anything but a whole 200 answer in time and within the cap.
    HTTP/1.0 with the connection closed after it, so the answer is never chunked; it ends with its Content-Length,
    or with the connection."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    request = f"GET {path} HTTP/1.0\r\nHost: localhost:{port}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    try:
        with socket.create_connection((address, port), timeout=remaining) as conn:
            conn.sendall(request.encode())
            data = bytearray()
            while not _whole(data):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or len(data) > MOST_BYTES:
                    return None
                conn.settimeout(remaining)
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return None
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200" or b"transfer-encoding:" in head.lower():
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def _whole(data: bytes | bytearray) -> bool:
    """Whether an answer read so far holds its headers and the Content-Length of body they announce."""
    head, found, body = bytes(data).partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(body) >= int(value.strip())
    return False


def identity(path: str, cwd: str | None) -> tuple[int, int] | None:
    """The (device, inode) of the model file a server names (relative to its working directory)."""
    if not os.path.isabs(path):
        if cwd is None:
            return None
        path = os.path.join(cwd, path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def read_server(process: psutil.Process) -> RunningServer | None:
    """One llama-server as it runs now: its command line, then its answers; None when it is gone."""
    try:
        argv = process.cmdline()
    except psutil.Error:
        return None
    try:
        env = {k: v for k, v in process.environ().items() if k.startswith(LLAMA_ARG)}
        cwd: str | None = process.cwd()
    except psutil.Error:
        env, cwd = {}, None  # another user's: its variables unread, a relative model path not resolved
    args = server_args(argv, env)
    where = listening(process, args.host, args.port)
    slots = n_ctx = path = None
    answered = False
    if where is not None:
        deadline = time.monotonic() + DEADLINE_SECONDS
        slots, n_ctx, path = props_settings(http_json(*where, "/props", deadline))
        if slots is None or n_ctx is None:  # /slots waits on the server's task queue: asked only when needed
            counted, slot_ctx = slots_settings(http_json(*where, "/slots", deadline))
            slots, n_ctx = slots if slots is not None else counted, n_ctx if n_ctx is not None else slot_ctx
        answered = slots is not None or n_ctx is not None
    model = path if path is not None else args.model
    return RunningServer(
        pid=process.pid,
        port=where[1] if where is not None else None,
        args=args,
        model_file=identity(model, cwd) if model else None,
        answered=answered,
        total_slots=slots,
        slot_tokens=n_ctx,
    )


def llama_server_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name"]):
        if process.info["name"] in NAMES and process.pid != os.getpid():
            found.append(process)
    return found


class LlamaServers:
    """The llama-servers running now, read at most every KEEP_SECONDS."""

    def __init__(self, find: Callable[[], Sequence[psutil.Process]] = llama_server_processes) -> None:
        self._find = find
        self._lock = threading.Lock()
        self._kept: tuple[float, tuple[RunningServer, ...]] | None = None

    def read(self) -> tuple[RunningServer, ...]:
        with self._lock:
            if self._kept is not None and time.monotonic() - self._kept[0] < KEEP_SECONDS:
                return self._kept[1]
            try:
                processes = list(self._find())[:MOST_SERVERS]
            except (psutil.Error, OSError):
                processes = []
            servers: tuple[RunningServer, ...] = ()
            if processes:
                with ThreadPoolExecutor(max_workers=len(processes), thread_name_prefix="memfit-llama-server") as pool:
                    read = list(pool.map(read_server, processes))
                servers = tuple(s for s in read if s is not None)
            self._kept = (time.monotonic(), servers)
            return servers
