"""What every python-proton client that fails over across a tandem cluster needs,
in one place (docs/pacemaker.md, "Clients"): a connection to every broker
address with a short reconnect backoff, an optional heartbeat and a connect
timeout of its own, and the bookkeeping of an at-least-once sender that sends
again whatever had no outcome when its connection dropped. Used by the test
clients here and by bench/py (the chaos benchmark)."""
import os
from proton.handlers import MessagingHandler
from proton.reactor import Backoff
from tls_options import connect_options

# proton's default waits up to 10 s between rounds of the URL list.
RECONNECT = dict(initial=0.1, factor=1.5, max_delay=1.0)


class RestartingBackoff:
    """Reconnect delays that start again from 0 after every connection that opened.
    proton 0.37's Backoff hands out one iterator for its whole life (its __iter__ returns
    the same one), so the delays never restart: after a failover or two every attempt
    waits max_delay, and a client whose next address is a backup reaches the new
    primary only after two or three of them. _Connector iterates its reconnect object
    anew on every remote open; this one gives a fresh sequence each time."""

    def __init__(self, initial, factor, max_delay):
        self.initial, self.factor, self.max_delay = initial, factor, max_delay

    def __iter__(self):
        # The same sequence as proton's: 0, then initial, growing by factor up to max_delay.
        yield 0.0
        delay = self.initial
        while True:
            yield delay
            delay = min(self.max_delay, delay * self.factor)


def connect_all(container, urls, heartbeat=None, backoff=None):
    """Connect to every address of `urls` ("host:port") in turn, reconnecting for ever;
    TLS and identity from the environment (tls_options.py).
    FAILOVER_CLIENT_BACKOFF=proton uses proton's own Backoff instead (for comparison)."""
    scheme, options = connect_options()
    if heartbeat:
        options["heartbeat"] = heartbeat
    strategy = Backoff if os.environ.get("FAILOVER_CLIENT_BACKOFF") == "proton" else RestartingBackoff
    return container.connect(urls=[scheme + u for u in urls], reconnect=strategy(**(backoff or RECONNECT)), **options)


class ConnectTimeout:
    """Ends a connection attempt that is not open after `seconds`: proton has no connect
    timeout, so a broker that accepts TCP but never answers (SIGSTOPped, or a host without
    power) would hold the client for minutes. Closing the transport makes proton try the
    next address at once. Call arm() at the start and on every disconnect; only the timer
    of the latest attempt acts, so an older one cannot cut a new attempt short."""

    def __init__(self, client, seconds):
        self.client = client
        self.seconds = seconds
        self.opened = False
        self.attempt = 0

    def arm(self, container):
        self.opened = False
        self.attempt += 1
        container.schedule(self.seconds, _AttemptTimer(self, self.attempt))

    def expired(self, attempt):
        conn = getattr(self.client, "conn", None)
        t = conn.transport if conn is not None else None
        if attempt == self.attempt and not self.opened and t is not None:
            t.close_tail()
            t.close_head()


class Ticker:
    # A periodic task's timer handler, calling its owner's tick(). Its own handler:
    # timer events of proton's reconnect logic also reach the owner's.
    def __init__(self, owner):
        self.owner = owner

    def on_timer_task(self, event):
        self.owner.tick()


class _AttemptTimer:
    # Its own handler: timer events of proton's reconnect logic also reach the client's.
    def __init__(self, timeout, attempt):
        self.timeout, self.attempt = timeout, attempt

    def on_timer_task(self, event):
        self.timeout.expired(self.attempt)


class ResendingSender(MessagingHandler):
    """At-least-once publishing: `todo` holds what must be sent before anything new (the
    resends first), `inflight` what waits for an outcome. A refused (rejected or released)
    message goes back to the front of `todo`; on a disconnect everything in flight does,
    since the broker may or may not have it (the only source of duplicates). Subclasses
    send with send_tracked() and may override message_accepted, message_refused and
    connection_lost."""

    def __init__(self, todo=None):
        super().__init__(auto_settle=True)
        self.todo = list(todo or [])
        self.inflight = {}
        self.resent = 0
        self.reconnects = 0

    def send_tracked(self, sender, n, message):
        d = sender.send(message)
        self.inflight[d] = n
        return d

    def on_accepted(self, event):
        n = self.inflight.pop(event.delivery, None)
        if n is not None:
            self.message_accepted(n, event)

    def on_rejected(self, event):
        self._refused(event, "rejected")

    def on_released(self, event):
        self._refused(event, "released")

    def _refused(self, event, outcome):
        n = self.inflight.pop(event.delivery, None)
        if n is not None:
            self.todo.insert(0, n)
            self.message_refused(n, outcome, event)

    def on_disconnected(self, event):
        self.reconnects += 1
        lost = sorted(self.inflight.values())
        self.resent += len(lost)
        self.todo = lost + self.todo
        self.inflight = {}
        self.connection_lost(lost, event)

    def unanswered(self):
        return sorted(set(self.todo) | set(self.inflight.values()))

    # hooks
    def message_accepted(self, n, event):
        pass

    def message_refused(self, n, outcome, event):
        pass

    def connection_lost(self, lost, event):
        pass
