"""The chaos benchmark's publisher (bench/chaos.mjs): durable messages to QUEUE,
at-least-once, over every broker address with reconnect (failover_client.py),
as fast as MAX_INFLIGHT unanswered messages allow, until STOP_FILE exists; then
only what is still unanswered is sent again, for at most GRACE seconds.

Each message's body is "NAME:SEQ:ATTEMPT:" and padding to BODY_BYTES; ATTEMPT
counts the sends of that SEQ, so a receiver can tell a resend from a
redelivery. The history goes to LOG, one event a line, wall-clock seconds:
  A seq attempt t        accepted
  S seq attempt t why    sent again (why: disconnected, released, rejected)
  O t                    connection opened
  D t inflight           connection lost, with how many had no outcome
  E next t               finished; SEQs 0..next-1 were sent
and every 0.25 s a progress line {"t":..,"accepted":n,"open":bool} on stdout.
With IDS "ids", each message's message-id is "NAME:SEQ", the same on every attempt,
as a publisher wanting exactly-once publishing sets it (the queue's dedup window).
Usage: chaos_send.py URLS QUEUE NAME STOP_FILE LOG GRACE MAX_INFLIGHT BODY_BYTES HEARTBEAT [IDS]"""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "interop", "py"))
from proton import Message
from proton.reactor import Container
from failover_client import ConnectTimeout, ResendingSender, Ticker, connect_all

urls, queue, name, stop_file, log_path = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
grace_s, max_inflight, body_bytes, heartbeat = float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), float(sys.argv[9])
with_ids = len(sys.argv) > 10 and sys.argv[10] == "ids"
CONNECT_TIMEOUT = 2.0

class ChaosSender(ResendingSender):
    def __init__(self):
        super().__init__()
        self.next = 0
        self.attempts = {}  # seq -> sends so far, only while unanswered
        self.accepted = 0
        self.open = False
        self.stopping_since = None
        self.finished = False
        self.log = open(log_path, "w", buffering=1 << 16)
        self.timeout = ConnectTimeout(self, CONNECT_TIMEOUT)
    def on_start(self, event):
        self.container = event.container
        self.conn = connect_all(event.container, urls, heartbeat=heartbeat)
        self.sender = event.container.create_sender(self.conn, queue)
        self.timeout.arm(event.container)
        event.container.schedule(0.25, Ticker(self))
    def on_connection_opened(self, event):
        self.timeout.opened = True
        self.open = True
        self.log.write("O %.4f\n" % time.time())
    def on_sendable(self, event):
        self.pump()
    def pump(self):
        s = self.sender
        while s.credit > 0 and len(self.inflight) < max_inflight:
            if self.todo:
                n = self.todo.pop(0)
            elif self.stopping_since is None:
                n = self.next
                self.next += 1
            else:
                break
            a = self.attempts.get(n, 0) + 1
            self.attempts[n] = a
            head = "%s:%d:%d:" % (name, n, a)
            body = head + "x" * max(0, body_bytes - len(head))
            msg = Message(id="%s:%d" % (name, n), body=body, durable=True) if with_ids else Message(body=body, durable=True)
            self.send_tracked(s, n, msg)
    def message_accepted(self, n, event):
        self.accepted += 1
        self.log.write("A %d %d %.4f\n" % (n, self.attempts.pop(n, 0), time.time()))
        self.pump()
    def message_refused(self, n, outcome, event):
        self.log.write("S %d %d %.4f %s\n" % (n, self.attempts.get(n, 0) + 1, time.time(), outcome))
    def connection_lost(self, lost, event):
        self.open = False
        t = time.time()
        self.log.write("D %.4f %d\n" % (t, len(lost)))
        for n in lost:
            self.log.write("S %d %d %.4f disconnected\n" % (n, self.attempts.get(n, 0) + 1, t))
        self.timeout.arm(self.container)
    def tick(self):
        if self.finished:
            return
        if self.stopping_since is None and os.path.exists(stop_file):
            self.stopping_since = time.time()
        if self.stopping_since is not None and (not (self.todo or self.inflight) or time.time() - self.stopping_since > grace_s):
            return self.finish()
        print(json.dumps({"t": time.time(), "accepted": self.accepted, "open": self.open}))
        sys.stdout.flush()
        if self.open:
            self.pump()
        self.container.schedule(0.25, Ticker(self))
    def finish(self):
        self.finished = True
        self.log.write("E %d %.4f\n" % (self.next, time.time()))
        self.log.close()
        print(json.dumps({"done": True, "sent": self.next, "accepted": self.accepted, "resent": self.resent, "reconnects": self.reconnects, "unanswered": self.unanswered()}))
        sys.stdout.flush()
        self.conn.close()
        self.container.stop()


Container(ChaosSender()).run()
