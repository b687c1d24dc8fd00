"""Send COUNT messages (bodies "seq-<n>") to QUEUE with qpid-proton's own
failover (Container.connect with every broker URL and reconnect on). A message
is counted as sent only once the broker accepts it; messages in flight when the
connection drops are sent again after reconnecting (the only source of
duplicates). Prints {"accepted": [...], "resent": n, "reconnects": n}.
Over TLS when TANDEM_PY_CA names a CA file (see tls_options.py)."""
import json, sys
from proton import Message
from proton.reactor import Container
from failover_client import ResendingSender, connect_all

urls, queue, count, deadline_s = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
pace = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0

class FailoverSender(ResendingSender):
    def __init__(self):
        super().__init__(todo=range(count))
        self.accepted = []
        self.finished = False
    def on_start(self, event):
        self.container = event.container
        self.conn = connect_all(event.container, urls)
        self.sender = event.container.create_sender(self.conn, queue)
        event.container.schedule(deadline_s, _Deadline(self))
    def on_sendable(self, event):
        self.pump(event.sender)
    def pump(self, sender):
        while self.todo and sender.credit > 0:
            n = self.todo.pop(0)
            self.send_tracked(sender, n, Message(body="seq-%d" % n, durable=True))
            if pace:
                break
    def message_accepted(self, n, event):
        self.accepted.append(n)
        if not self.todo and not self.inflight and not self.finished:
            self.finish()
        elif pace:
            self.container.schedule(pace, _Pump(self))
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
