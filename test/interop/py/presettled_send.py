"""Send COUNT pre-settled messages (at-most-once, bodies "PREFIX<round>-<n>") on one
session, then one unsettled marker "PREFIX<round>-end" on a second link of the same
session, and wait for the marker's outcome. The marker is written after every
pre-settled transfer, so it is accepted only once the broker has taken them
all: a broker whose session window closed on them never answers it.

  presettled_send.py URLS QUEUE PREFIX COUNT FAILOVERS DEADLINE_S

COUNT may be FIRST,LATER: FIRST on the first connection, LATER on every
other. URLS is comma-separated host:port; with more than one, proton fails over
between them (reconnect on, short backoff) and starts a new round of COUNT on
every connection whose links open. It ends once the marker of a round begun
after at least FAILOVERS disconnects was accepted (or at the deadline). Prints
{"rounds": [{"prefix": ..., "sent": n, "marker": bool}, ...], "done": bool}."""
import json, sys
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import AtLeastOnce, AtMostOnce, Container
from failover_client import connect_all

urls, queue, prefix, counts, failovers, deadline_s = sys.argv[1].split(","), sys.argv[2], sys.argv[3], [int(n) for n in sys.argv[4].split(",")], int(sys.argv[5]), float(sys.argv[6])


class PresettledSender(MessagingHandler):
    def __init__(self):
        super().__init__(auto_settle=True)
        self.rounds = []
        self.finished = False
        self.disconnects = 0

    def on_start(self, event):
        self.container = event.container
        if len(urls) > 1:
            # Delays that start again after each failover (proton's Backoff never restarts them).
            self.conn = connect_all(event.container, urls, heartbeat=5, backoff=dict(initial=0.1, factor=1.5, max_delay=0.5))
        else:
            self.conn = event.container.connect(urls=["amqp://" + u for u in urls], reconnect=False, heartbeat=5)
        # Both links on the connection's one session: the marker follows the pre-settled
        # transfers on the wire, in the same session window.
        self.sender = event.container.create_sender(self.conn, queue, options=AtMostOnce())
        self.marker = event.container.create_sender(self.conn, queue, name="%s-marker" % prefix, options=AtLeastOnce())
        event.container.schedule(deadline_s, _Deadline(self))

    def on_link_opened(self, event):
        # A new connection (the first, or one after failover) starts a new round.
        if event.link == self.sender:
            self.round = {"prefix": "%s%d" % (prefix, len(self.rounds)), "sent": 0, "marked": False, "marker": False, "after": self.disconnects,
                          "count": counts[0] if not self.rounds else counts[-1]}
            self.rounds.append(self.round)
            self.pump()

    def on_sendable(self, event):
        self.pump()

    def pump(self):
        r = getattr(self, "round", None)
        if r is None or self.finished:
            return
        while r["sent"] < r["count"] and self.sender.credit > 0:
            self.sender.send(Message(body="%s-%d" % (r["prefix"], r["sent"]), durable=True))
            r["sent"] += 1
        if r["sent"] == r["count"] and not r["marked"] and self.marker.credit > 0:
            r["marked"] = True
            self.marker.send(Message(body="%s-end" % r["prefix"], durable=True))

    def on_accepted(self, event):
        if event.link == self.marker and self.round is not None:
            self.round["marker"] = True
            if self.round["after"] >= failovers:
                self.finish()

    def on_disconnected(self, event):
        # The marker of this round may never be answered: the next round sends its own.
        self.disconnects += 1
        self.round = None

    def finish(self):
        if self.finished:
            return
        self.finished = True
        done = any(r["marker"] and r["after"] >= failovers for r in self.rounds)
        print(json.dumps({"rounds": [{k: r[k] for k in ("prefix", "sent", "marker", "after")} for r in self.rounds], "done": done}))
        sys.stdout.flush()
        self.conn.close()
        self.container.stop()


class _Deadline:
    # Its own handler: timer events of proton's reconnect logic also reach the main handler.
    def __init__(self, s):
        self.s = s

    def on_timer_task(self, event):
        if not self.s.finished:
            self.s.finish()


Container(PresettledSender()).run()
