"""An at-least-once publisher that asks for exactly-once: every message has a
message-id ("NAME-<n>", also its body), and whatever had no outcome when the
connection dropped is sent again, with the same id, after qpid-proton's own
failover (Container.connect with every broker URL, reconnect on). Sends paced
batches until STOP_FILE exists, then only resends what is still unanswered, for
at most GRACE seconds. Prints {"accepted": [...], "resent": n, "reconnects": n,
"unanswered": [...]}."""
import json, os, sys, time
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container, Backoff

urls, queue, name, stop_file, grace_s = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
BATCH, PACE_S, MAX_INFLIGHT = 1, 0.02, 200

class DedupSender(MessagingHandler):
    def __init__(self):
        super().__init__(auto_settle=True)
        self.next = 0
        self.todo = []
        self.inflight = {}
        self.accepted = []
        self.resent = 0
        self.reconnects = 0
        self.stopping_since = None
        self.finished = False
    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(urls=["amqp://" + u for u in urls], reconnect=Backoff(initial=0.1, factor=1.5, max_delay=1.0))
        self.sender = event.container.create_sender(self.conn, queue)
        event.container.schedule(PACE_S, _Tick(self))
    def tick(self):
        if self.finished:
            return
        if self.stopping_since is None and os.path.exists(stop_file):
            self.stopping_since = time.time()
        if self.stopping_since is not None and (not (self.todo or self.inflight) or time.time() - self.stopping_since > grace_s):
            return self.finish()
        self.pump()
        self.container.schedule(PACE_S, _Tick(self))
    def pump(self):
        s = self.sender
        sent = 0
        while s.credit > 0 and len(self.inflight) < MAX_INFLIGHT and sent < BATCH:
            if self.todo:
                n = self.todo.pop(0)
            elif self.stopping_since is None:
                n = self.next
                self.next += 1
            else:
                break
            mid = "%s-%d" % (name, n)
            d = s.send(Message(id=mid, body=mid, durable=True))
            self.inflight[d] = n
            sent += 1
    def on_accepted(self, event):
        n = self.inflight.pop(event.delivery, None)
        if n is not None:
            self.accepted.append(n)
    def on_rejected(self, event):
        n = self.inflight.pop(event.delivery, None)
        if n is not None:
            self.todo.insert(0, n)
    on_released = on_rejected
    def on_disconnected(self, event):
        self.reconnects += 1
        # No outcome for these: the broker may or may not have them. Send them again, same ids.
        lost = sorted(self.inflight.values())
        self.resent += len(lost)
        self.todo = lost + self.todo
        self.inflight = {}
    def finish(self):
        self.finished = True
        unanswered = sorted(set(self.todo) | set(self.inflight.values()))
        print(json.dumps({"accepted": self.accepted, "resent": self.resent, "reconnects": self.reconnects, "unanswered": unanswered}))
        sys.stdout.flush()
        self.conn.close()
        self.container.stop()

class _Tick:
    # Its own handler: timer events of proton's reconnect logic also reach the main handler.
    def __init__(self, s): self.s = s
    def on_timer_task(self, event): self.s.tick()

Container(DedupSender()).run()
