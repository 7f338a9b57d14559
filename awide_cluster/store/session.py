"""``Session``: one client's connection to one etcd cluster, under which ``EtcdStore``, its
watches (watch.py), its bounded reads (bounded.py) and the operator's backup make their calls.

It holds what every call shares: the endpoints (``ring``), TLS and the HTTP client
(``transport``), the credentials and the token (``authed``: authenticate once for every caller,
renew a rejected token once), the etcd history followed (``timeline``, ``check_claim``,
``reconsider_timeline``: see timeline.py) and the two kinds of request (``read``: hedged across
members; ``write``: sent once, never repeated once it may have reached a member), each within
its deadline (``deadline``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp

from awide_cluster.store import bounded, codec, timeline
from awide_cluster.store.codec import AuthNotEnabled, Codec, TokenRejected
from awide_cluster.store.config import StoreConfig
from awide_cluster.store.credentials import read_credentials
from awide_cluster.store.errors import (
    BadResponse,
    Denied,
    RevisionWentBack,
    StoreError,
    Timeout,
    Unavailable,
)
from awide_cluster.store.hedge import EndpointRing, RetryBudget, hedged, write_once
from awide_cluster.store.timeline import Claim, Timeline
from awide_cluster.store.transport import SendState, Transport, connect_text

T = TypeVar("T")

log = logging.getLogger("awide_cluster.store")

# a census of the members (after a refused answer) at most this often, in seconds: a member
# that lags and answers below the floor costs at most one status call per member per gap
CENSUS_GAP = 0.5
# seconds an authentication gets at least (see Session._auth_deadline)
AUTH_TIMEOUT_MIN = 2.0


class Session:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.codec = Codec(config.prefix)
        self.ring = EndpointRing(config.endpoints)
        # hedges and retries of this client's reads (hedge.RetryBudget)
        self.budget = RetryBudget()
        creds = read_credentials(config.credential_files())     # CredentialError: bad file
        self.transport = Transport(config, creds.ssl)
        self._credentials_digest = creds.digest     # what the files held when last read
        self.timeline = Timeline()
        self.timeline_note = ""      # why the last new history was adopted ("" when none was)
        self._doubt = False         # an answer was refused since the last census
        self._census_lock: asyncio.Lock | None = None
        self._census_at = float("-inf")
        self.census_gap = CENSUS_GAP   # least time between two censuses of the members
        self._auth_task: asyncio.Task[None] | None = None   # the password check under way
        self._auth_off = False  # credentials configured but the cluster has auth disabled
        # values refused for their size, by key: not read again while unchanged (bounded.py)
        self.refusals = bounded.RefusalMemory()

    # ------------------------------------------------------------------ state

    @property
    def last_revision(self) -> int:
        """Highest cluster revision seen in the history followed (0 before the first)."""
        return self.timeline.floor

    @property
    def timeline_epoch(self) -> int:
        """How many new etcd histories (restored or rebuilt clusters) this store adopted.
        Whoever remembers a revision compares it with the epoch it remembered it in."""
        return self.timeline.epoch

    @property
    def preferred_endpoint(self) -> str:
        return self.ring.preferred

    def note_revision(self, revision: int, cluster_id: int = 0) -> None:
        """Raise the floor to ``revision`` if it is of the history followed (never refuses)."""
        new, admission = timeline.admit(self.timeline, self.timeline, Claim(cluster_id, revision))
        if admission == "ok":
            self.timeline = new

    def check_claim(self, claim: Claim, sent: Timeline, endpoint: str) -> int:
        """Refuse an answer of another cluster, or below the floor of ``sent`` (the history
        when the call was sent): ``RevisionWentBack``; the next call takes a census."""
        new, admission = timeline.admit(self.timeline, sent, claim)
        if admission != "ok":
            self._doubt = True
            raise RevisionWentBack(
                f"{endpoint}: {timeline.why(admission, self.timeline, sent, claim)}")
        self.timeline = new
        return claim.revision

    def check_revision(self, body: dict[str, Any], sent: Timeline, endpoint: str) -> int:
        return self.check_claim(codec.header_claim(body), sent, endpoint)

    async def reconsider_timeline(self, deadline: float) -> bool:
        """After a refused answer: the status of every member (concurrently, by ``deadline``)
        judged by ``timeline.assess_census``. True when a new history was adopted (logged once;
        the refusal memory forgotten, its revisions are of the old history)."""
        if not self._doubt:
            return False
        if self._census_lock is None:
            self._census_lock = asyncio.Lock()
        loop = asyncio.get_running_loop()
        epoch = self.timeline.epoch
        async with self._census_lock:
            if self.timeline.epoch != epoch:
                return True                 # adopted while this call waited
            if not self._doubt or loop.time() - self._census_at < self.census_gap:
                return False
            left = deadline - loop.time()
            if left <= 0.01:
                return False
            self._census_at = loop.time()
            self._doubt = False
            claims = await self._census(left)
            new, census = timeline.assess_census(self.timeline, claims)
            if census.outcome != "adopted":
                log.debug("etcd history kept: %s", census.reason)
                return False
            self.timeline = new
            self.timeline_note = census.reason
            self.refusals = bounded.RefusalMemory(self.refusals.limit)
            # tokens of the old history are void: a restored etcd rejects them only after a
            # check slower than a call's bound (seen: 0.4 s of 0.5), so the rejection never
            # arrived and nothing authenticated again; the next call authenticates first
            self.transport.token = None
            log.warning("etcd history changed (epoch %d): %s", new.epoch, census.reason)
            return True

    async def _census(self, timeout: float) -> list[tuple[str, Claim | None]]:
        async def claim(ep: str) -> Claim:
            async def call() -> dict[str, Any]:
                return await self.transport.post(ep, "/v3/maintenance/status", {})
            return codec.header_claim(await self.authed(call, self.deadline(timeout)))

        async def bounded_claim(ep: str) -> Claim:
            async with asyncio.timeout(timeout):
                return await claim(ep)

        answers = await asyncio.gather(*(bounded_claim(ep) for ep in self.config.endpoints),
                                       return_exceptions=True)
        out: list[tuple[str, Claim | None]] = []
        for ep, res in zip(self.config.endpoints, answers, strict=True):
            if isinstance(res, BaseException) and not isinstance(res, (StoreError, TimeoutError)):
                raise res
            out.append((ep, res if isinstance(res, Claim) else None))
        return out

    def deadline(self, timeout: float | None) -> float:
        t = self.config.call_timeout if timeout is None else timeout
        return asyncio.get_running_loop().time() + t

    # ------------------------------------------------------------------ credentials

    def reload_credentials(self) -> str:
        """Read the CA, certificate, key and password files again (SIGHUP): new connections
        use them, calls and watch streams already on a connection finish there. A file that
        cannot be used raises ``CredentialError`` naming it, and nothing changes: the
        credentials in use stay. A new password drops the token (the next call authenticates
        with it). Returns what was done, one line without secrets."""
        files = self.config.credential_files()
        if not files.names():
            return "no credential files configured"
        new = read_credentials(files)
        if new.digest == self._credentials_digest:
            return f"credentials unchanged ({', '.join(files.names())})"
        if self.config.tls is not None:
            self.transport.use_ssl(new.ssl)
        if new.password is not None and new.password != self.config.password:
            self.config = dataclasses.replace(self.config, password=new.password)
            self.transport.token = None
        self._credentials_digest = new.digest
        return (f"credentials re-read from {', '.join(files.names())}: new connections use "
                "them")

    # ------------------------------------------------------------------ plumbing

    async def authed(self, call: Callable[[], Awaitable[T]], deadline: float) -> T:
        """Run ``call`` with a token (when credentials are configured); on a rejected token,
        authenticate again and repeat the call once (the rejection proves it was not applied)."""
        if self.config.username is not None and not self._auth_off and not self.transport.token:
            await self._authenticate(self._auth_deadline(deadline), stale=None)
        try:
            return await call()
        except Denied as exc:
            stale = self.transport.token
            if self.config.username is None:
                if isinstance(exc, TokenRejected):
                    raise Denied("etcd wants authentication, the store has no credentials: "
                                 f"{exc}") from None
                raise
            if not isinstance(exc, TokenRejected) and stale is not None:
                raise  # a real refusal (wrong password, permission)
            await self._authenticate(self._auth_deadline(deadline), stale=stale)
        try:
            return await call()
        except TokenRejected as exc:
            raise Denied(f"token rejected again after re-authentication: {exc}") from None

    def _auth_deadline(self, deadline: float) -> float:
        """A password check costs etcd a bcrypt and a raft round: it gets at least
        AUTH_TIMEOUT_MIN of its own, not what a rejected call left of the caller's deadline
        (after a restore every old token is rejected, and a call bound of 0.5 s left nothing:
        the daemons never authenticated again)."""
        return max(deadline, self.deadline(max(self.config.call_timeout, AUTH_TIMEOUT_MIN)))

    async def _authenticate(self, deadline: float, stale: str | None) -> None:
        """Authenticate once for every caller: one password check at a time, run as a task of
        its own and shielded from the callers' bounds. Under load a check outlasts a 0.5 s
        call; cancelled with the call, every next call would start another, and etcd would
        spend itself on bcrypt while no call ever got a token (seen: 190 checks in 40 s from
        five clients, none of them served). A caller that gives up leaves the check running;
        the next one waits for the same check."""
        if self.transport.token is not None and self.transport.token != stale:
            return  # another call authenticated meanwhile
        task = self._auth_task
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._login(deadline))
            task.add_done_callback(_retrieved)
            self._auth_task = task
        await asyncio.shield(task)

    async def _login(self, deadline: float) -> None:
        body = {"name": self.config.username, "password": self.config.password}

        async def attempt(ep: str) -> str:
            answer = await self.transport.post(ep, "/v3/auth/authenticate", body)
            token = answer.get("token")
            if not isinstance(token, str) or not token:
                raise BadResponse(f"{ep}: authenticate answered no token")
            return token

        self.transport.token = None
        try:
            # password checks cost etcd CPU (bcrypt): hedge late, not after 50 ms
            _, token = await hedged(attempt, self.ring, max(self.config.hedge_after, 0.2),
                                    deadline, "authenticate")
            self._auth_off = False
        except AuthNotEnabled:
            token = None  # credentials configured, auth off on the cluster: go without
            self._auth_off = True
        self.transport.token = token

    async def read(self, path: str, body: dict[str, Any], timeout: float | None,
                   what: str, *, max_bytes: int | None = None) -> tuple[str, dict[str, Any]]:
        """A hedged idempotent call; answers below the revision floor move on to other members.
        An answer over ``max_bytes`` (at most ``max_answer_bytes``) raises ``TooLarge``."""
        deadline = self.deadline(timeout)
        for again in (False, True):
            sent = self.timeline

            async def attempt(ep: str, sent: Timeline = sent) -> dict[str, Any]:
                answer = await self.transport.post(ep, path, body, max_bytes=max_bytes,
                                                   what=what)
                self.check_revision(answer, sent, ep)
                return answer

            try:
                return await self._bounded(
                    self.authed(lambda: hedged(attempt, self.ring, self.config.hedge_after,
                                                deadline, what, budget=self.budget),
                                deadline),
                    deadline, what, write=False)
            except StoreError:
                if again or not await self.reconsider_timeline(deadline):
                    raise
        raise AssertionError("unreachable")

    async def write(self, path: str, body: dict[str, Any], timeout: float | None,
                    what: str) -> tuple[str, dict[str, Any]]:
        """A single-shot write (see hedge.write_once)."""
        deadline = self.deadline(timeout)
        before = self.timeline

        async def attempt(ep: str, sent: SendState) -> dict[str, Any]:
            answer = await self.transport.post(ep, path, body, write=True, sent=sent)
            self.check_revision(answer, before, ep)
            return answer

        try:
            return await self._bounded(
                self.authed(lambda: write_once(attempt, self.ring, deadline, what), deadline),
                deadline, what, write=True)
        except StoreError:
            # never repeated (it may have been applied): the census is for the next call
            await self.reconsider_timeline(deadline)
            raise

    @staticmethod
    async def _bounded(coro: Awaitable[T], deadline: float, what: str, *, write: bool) -> T:
        # a safety net only: hedged/write_once keep the deadline themselves, with the details
        try:
            async with asyncio.timeout_at(deadline + 0.02):
                return await coro
        except TimeoutError:
            late = max(0.0, asyncio.get_running_loop().time() - (deadline + 0.02))
            raise Timeout(f"{what}: no answer within the deadline", maybe_applied=write,
                          late=late) from None

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        if self._auth_task is not None and not self._auth_task.done():
            self._auth_task.cancel()
        await self.transport.close()


def _retrieved(task: asyncio.Task[None]) -> None:
    """A password check whose callers all gave up: its error is theirs to see at the next
    call, not an "exception was never retrieved" warning."""
    if not task.cancelled():
        task.exception()


QUOTA_GAUGE = b"etcd_server_quota_backend_bytes"
# etcd serves its families sorted by name: etcd_server_* comes before the large go_*/grpc_*
# families, within the first tens of kB
QUOTA_SCAN_BYTES = 1 << 20


async def scan_quota(transport: Transport, endpoint: str) -> int:
    try:
        async with transport.http_client().get(endpoint + "/metrics") as resp:
            if resp.status != 200:
                raise BadResponse(f"{endpoint}: /metrics answered HTTP {resp.status}")
            read = 0
            async for raw in resp.content:          # lines
                read += len(raw)
                if read > QUOTA_SCAN_BYTES:
                    break
                line = raw.strip()
                if line.startswith(QUOTA_GAUGE + b" "):
                    try:
                        value = float(line.split()[1])
                    except (IndexError, ValueError):
                        raise BadResponse(f"{endpoint}: /metrics: unreadable "
                                          f"{QUOTA_GAUGE.decode()} line {line[:80]!r}") from None
                    if not 0 < value < 2**63:
                        raise BadResponse(f"{endpoint}: /metrics: quota {value!r} out of range")
                    return int(value)
    except (aiohttp.ClientError, OSError) as exc:
        raise Unavailable(f"{endpoint}: /metrics: {type(exc).__name__}: {connect_text(exc)}") \
            from exc
    except ValueError as exc:                   # aiohttp: a line over its buffer
        raise BadResponse(f"{endpoint}: /metrics: {exc}") from None
    raise BadResponse(f"{endpoint}: /metrics has no {QUOTA_GAUGE.decode()} within "
                      f"{QUOTA_SCAN_BYTES} bytes (etcd before 3.4?)")
