"""Send one message to QUEUE with qpid-proton's own failover (Container.connect
with every URL given, in that order, and reconnect on), as an application would
that lists backups before the primary. Records the error condition of every
connection that was closed on it. Prints {"accepted": bool, "refusals":
[[condition, description, info], ...], "disconnects": n}."""
import json, sys
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from failover_client import connect_all

urls, queue, deadline_s = sys.argv[1].split(","), sys.argv[2], float(sys.argv[3])

class RefusedSender(MessagingHandler):
    def __init__(self):
        super().__init__()
        self.refusals = []
        self.disconnects = 0
        self.sent = None
        self.done = False
    def on_start(self, event):
        self.conn = connect_all(event.container, urls, backoff=dict(initial=0.05, factor=1.5, max_delay=0.5))
        event.container.create_sender(self.conn, queue)
        event.container.schedule(deadline_s, _Deadline(self))
    def on_sendable(self, event):
        if self.sent is None:
            self.sent = event.sender.send(Message(body="through-the-backups", durable=True))
    def on_accepted(self, event):
        self.finish(True)
    def on_disconnected(self, event):
        self.disconnects += 1
        self.sent = None  # unanswered: send again on the next connection
        c = event.connection.remote_condition
        if c is not None:
            entry = [c.name, c.description, {str(k): v for k, v in (c.info or {}).items()}]
            if entry not in self.refusals:
                self.refusals.append(entry)
    def finish(self, accepted):
        if self.done:
            return
        self.done = True
        print(json.dumps({"accepted": accepted, "refusals": self.refusals, "disconnects": self.disconnects}))
        sys.stdout.flush()
        self.conn.close()
        event_container.stop()

class _Deadline:
    def __init__(self, s): self.s = s
    def on_timer_task(self, event): self.s.finish(False)

event_container = Container(RefusedSender())
event_container.run()
