"""Send COUNT messages (bodies "seq-<n>") to QUEUE with qpid-proton's own
failover (Container.connect with every broker URL and reconnect on). A message
is counted as sent only once the broker accepts it; messages in flight when the
connection drops are sent again after reconnecting (the only source of
duplicates). Prints {"accepted": [...], "resent": n, "reconnects": n}.
Over TLS when TANDEM_PY_CA names a CA file (see tls_options.py)."""
import json, sys, time
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container, Backoff
from tls_options import connect_options

urls, queue, count, deadline_s = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
pace = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0

class FailoverSender(MessagingHandler):
    def __init__(self):
        super().__init__(auto_settle=True)
        self.todo = list(range(count))
        self.inflight = {}
        self.accepted = []
        self.resent = 0
        self.reconnects = 0
        self.started = time.time()
        self.finished = False
    def on_start(self, event):
        self.container = event.container
        scheme, options = connect_options()
        self.conn = event.container.connect(urls=[scheme + u for u in urls], reconnect=Backoff(initial=0.1, factor=1.5, max_delay=1.0), **options)
        self.sender = event.container.create_sender(self.conn, queue)
        event.container.schedule(deadline_s, _Deadline(self))
    def on_sendable(self, event):
        self.pump(event.sender)
    def pump(self, sender):
        while self.todo and sender.credit > 0:
            n = self.todo.pop(0)
            d = sender.send(Message(body="seq-%d" % n, durable=True))
            self.inflight[d] = n
            if pace:
                break
    def on_accepted(self, event):
        n = self.inflight.pop(event.delivery, None)
        if n is not None:
            self.accepted.append(n)
        if not self.todo and not self.inflight and not self.finished:
            self.finish()
        elif pace:
            self.container.schedule(pace, _Pump(self))
    def on_rejected(self, event):
        n = self.inflight.pop(event.delivery, None)
        if n is not None:
            self.todo.insert(0, n)
    on_released = on_rejected
    def on_disconnected(self, event):
        self.reconnects += 1
        # Unsettled at the drop: we do not know if the broker has them; send again.
        lost = sorted(self.inflight.values())
        self.resent += len(lost)
        self.todo = lost + self.todo
        self.inflight = {}
    def finish(self):
        self.finished = True
        print(json.dumps({"accepted": self.accepted, "resent": self.resent, "reconnects": self.reconnects}))
        sys.stdout.flush()
        self.conn.close()
        self.container.stop()

class _Deadline:
    # Its own handler: timer events of proton's reconnect logic also reach the main handler.
    def __init__(self, s): self.s = s
    def on_timer_task(self, event):
        if not self.s.finished: self.s.finish()

class _Pump:
    def __init__(self, s): self.s = s
    def on_timer_task(self, event): self.s.pump(self.s.sender)

Container(FailoverSender()).run()
