"""Publish COUNT durable messages m0..m{COUNT-1} to QUEUE at about RATE a second,
through DR switchovers. URLS lists the sites; whenever the one in use refuses
(a rejected delivery, a detached link, a refused attach) the publisher settles what
it had in flight, moves to the next site and resends from the first message not
accepted, so each message is accepted once. Prints one JSON line: the refusals
seen ({condition, description}) and how many messages were accepted.
Optional: LOG, a file that gets "A <n> <wall-clock s>" for each accept and "R <wall-clock s>"
for each refusal (bench/dr.mjs measures the publisher's unavailability from it), and
WINDOW, the unsettled messages allowed (default 20)."""
import json, sys, time
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

urls, queue, count, rate = sys.argv[1].split(','), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
log = open(sys.argv[5], "w", buffering=1 << 16) if len(sys.argv) > 5 and sys.argv[5] else None
WINDOW = int(sys.argv[6]) if len(sys.argv) > 6 else 20
TICK = 0.01
# A site that refuses is left for this long before the next is tried.
BACKOFF = 0.1


class Publisher(MessagingHandler):
    def __init__(self):
        super().__init__(auto_accept=False)
        self.site = 0
        self.confirmed = 0          # m0..m{confirmed-1} are accepted
        self.accepted = set()
        self.inflight = {}
        self.next = 0
        self.allowance = 0.0
        self.refusals = []
        self.conn = None
        self.sender = None
        self.leaving = False
        self.reopen_at = 0.0

    def on_start(self, event):
        self.container = event.container
        self.open()
        self.container.schedule(TICK, self)

    def open(self):
        self.leaving = False
        self.inflight = {}
        self.next = self.confirmed
        self.conn = self.container.connect(urls[self.site], reconnect=False)
        self.sender = self.container.create_sender(self.conn, queue)

    def on_timer_task(self, event):
        if self.confirmed >= count:
            return
        if self.conn is None and time.monotonic() >= self.reopen_at:
            self.open()
        self.allowance = min(self.allowance + rate * TICK, WINDOW)
        self.pump()
        self.container.schedule(TICK, self)

    def on_sendable(self, event):
        self.pump()

    def pump(self):
        s = self.sender
        while (s is not None and not self.leaving and s.credit > 0 and self.next < count
               and self.next - self.confirmed < WINDOW and self.allowance >= 1):
            d = s.send(Message(body="m%d" % self.next, durable=True))
            self.inflight[d] = self.next
            self.next += 1
            self.allowance -= 1

    def on_accepted(self, event):
        i = self.inflight.pop(event.delivery, None)
        if i is None:
            return
        self.accepted.add(i)
        if log:
            log.write("A %d %.4f\n" % (i, time.time()))
        while self.confirmed in self.accepted:
            self.confirmed += 1
        if self.confirmed >= count:
            self.conn.close()
            return
        self.settled_some()

    def on_rejected(self, event):
        if self.inflight.pop(event.delivery, None) is None:
            return
        self.refused(event.delivery.remote.condition)
        self.settled_some()

    def on_released(self, event):
        if self.inflight.pop(event.delivery, None) is not None:
            self.refused(None)
            self.settled_some()

    def settled_some(self):
        # Messages sent before a refusal may still be accepted: move once all are settled.
        if self.leaving and not self.inflight:
            self.move()
        else:
            self.pump()

    def refused(self, cond):
        if log:
            log.write("R %.4f\n" % time.time())
        self.refusals.append({"condition": cond.name if cond else None, "description": cond.description if cond else None})
        self.leaving = True

    def on_link_remote_close(self, event):
        if self.sender is not None and event.link == self.sender:
            self.refused(event.link.remote_condition)
            self.move()

    def on_link_error(self, event):
        pass

    def on_connection_error(self, event):
        pass

    def on_transport_error(self, event):
        if self.conn is not None and event.connection == self.conn:
            self.refused(event.transport.condition)
            self.move()

    def move(self):
        # Whatever is unsettled on a detached link never reached the queue: send it again there.
        if self.conn is None:
            return
        old, self.conn, self.sender = self.conn, None, None
        self.inflight = {}
        old.close()
        self.reopen_at = time.monotonic() + BACKOFF
        self.site = (self.site + 1) % len(urls)


Container(p := Publisher()).run()
if log:
    log.close()
print(json.dumps({"accepted": p.confirmed, "refusals": p.refusals}))
