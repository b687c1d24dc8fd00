"""Open one connection to URL (no reconnect) and report how the broker ended it.
Prints {"opened": bool, "condition": str|null, "description": str|null}."""
import json, sys
from proton.handlers import MessagingHandler
from proton.reactor import Container

url, deadline_s = sys.argv[1], float(sys.argv[2])

class Probe(MessagingHandler):
    def __init__(self):
        super().__init__()
        self.opened = False
        self.result = None
    def on_start(self, event):
        self.conn = event.container.connect("amqp://" + url, reconnect=False)
        self.timer = event.container.schedule(deadline_s, self)
    def on_connection_opened(self, event):
        self.opened = True
    def on_connection_error(self, event):
        c = event.connection.remote_condition
        self.finish(event, c.name if c else None, c.description if c else None)
    def on_transport_error(self, event):
        c = event.transport.condition
        self.finish(event, c.name if c else None, c.description if c else None)
    def on_timer_task(self, event):
        self.finish(event, None, None)
    def finish(self, event, condition, description):
        if self.result is not None:
            return
        self.result = {"opened": self.opened, "condition": condition, "description": description}
        print(json.dumps(self.result))
        sys.stdout.flush()
        self.timer.cancel()
        self.conn.close()
        event.container.stop()

Container(Probe()).run()
