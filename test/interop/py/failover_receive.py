"""Receive (and accept) messages from QUEUE with qpid-proton's own failover
(Container.connect with every URL, reconnect on) until COUNT distinct bodies have
arrived or DEADLINE seconds pass. Prints {"bodies": [...], "opens": n, "done": bool}."""
import json, sys
from proton.handlers import MessagingHandler
from proton.reactor import Container
from failover_client import connect_all

urls, queue, count, deadline_s = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])

class FailoverReceiver(MessagingHandler):
    def __init__(self):
        super().__init__()
        self.bodies = []
        self.opens = 0
        self.finished = False
    def on_start(self, event):
        self.conn = connect_all(event.container, urls)
        event.container.create_receiver(self.conn, queue)
        event.container.schedule(deadline_s, _Deadline(self))
    def on_connection_opened(self, event):
        self.opens += 1
    def on_message(self, event):
        if event.message.body not in self.bodies:
            self.bodies.append(event.message.body)
        if len(self.bodies) >= count:
            self.finish(True)
    def finish(self, done):
        if self.finished:
            return
        self.finished = True
        print(json.dumps({"bodies": self.bodies, "opens": self.opens, "done": done}))
        sys.stdout.flush()
        self.conn.close()
        container.stop()

class _Deadline:
    def __init__(self, s): self.s = s
    def on_timer_task(self, event): self.s.finish(False)

container = Container(FailoverReceiver())
container.run()
