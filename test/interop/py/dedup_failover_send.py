"""An at-least-once publisher that asks for exactly-once: every message has a
message-id ("NAME-<n>", also its body), and whatever had no outcome when the
connection dropped is sent again, with the same id, after qpid-proton's own
failover (Container.connect with every broker URL, reconnect on). Sends paced
batches until STOP_FILE exists, then only resends what is still unanswered, for
at most GRACE seconds. Prints {"accepted": [...], "resent": n, "reconnects": n,
"unanswered": [...]}."""
import json, os, sys, time
from proton import Message
from proton.reactor import Container
from failover_client import ResendingSender, Ticker, connect_all

urls, queue, name, stop_file, grace_s = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
BATCH, PACE_S, MAX_INFLIGHT = 1, 0.02, 200

class DedupSender(ResendingSender):
    def __init__(self):
        super().__init__()
        self.next = 0
        self.accepted = []
        self.stopping_since = None
        self.finished = False
    def on_start(self, event):
        self.container = event.container
        self.conn = connect_all(event.container, urls)
        self.sender = event.container.create_sender(self.conn, queue)
        event.container.schedule(PACE_S, Ticker(self))
    def tick(self):
        if self.finished:
            return
        if self.stopping_since is None and os.path.exists(stop_file):
            self.stopping_since = time.time()
        if self.stopping_since is not None and (not (self.todo or self.inflight) or time.time() - self.stopping_since > grace_s):
            return self.finish()
        self.pump()
        self.container.schedule(PACE_S, Ticker(self))
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
            self.send_tracked(s, n, Message(id=mid, body=mid, durable=True))
            sent += 1
    def message_accepted(self, n, event):
        self.accepted.append(n)
    def finish(self):
        self.finished = True
        print(json.dumps({"accepted": self.accepted, "resent": self.resent, "reconnects": self.reconnects, "unanswered": self.unanswered()}))
        sys.stdout.flush()
        self.conn.close()
        self.container.stop()


Container(DedupSender()).run()
