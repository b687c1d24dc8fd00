"""The chaos benchmark's consumer (bench/chaos.mjs): receives and accepts from
QUEUE over every broker address with reconnect (failover_client.py), CREDIT
messages of prefetch, until STOP_FILE exists and nothing has arrived for IDLE
seconds. The history goes to LOG, one event a line, wall-clock seconds:
  M body-head t delivery-count   a message (body-head: "NAME:SEQ:ATTEMPT")
  O t / D t                      connection opened / lost
and every 0.25 s a progress line {"t":..,"received":n,"open":bool} on stdout.
Usage: chaos_receive.py URLS QUEUE STOP_FILE LOG IDLE CREDIT HEARTBEAT"""
import json, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "interop", "py"))
from proton.handlers import MessagingHandler
from proton.reactor import Container
from failover_client import ConnectTimeout, Ticker, connect_all

urls, queue, stop_file, log_path = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4]
idle_s, credit, heartbeat = float(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
CONNECT_TIMEOUT = 2.0

class ChaosReceiver(MessagingHandler):
    def __init__(self):
        super().__init__(prefetch=credit)
        self.received = 0
        self.last = time.time()
        self.open = False
        self.finished = False
        self.log = open(log_path, "w", buffering=1 << 16)
        self.timeout = ConnectTimeout(self, CONNECT_TIMEOUT)
    def on_start(self, event):
        self.container = event.container
        self.conn = connect_all(event.container, urls, heartbeat=heartbeat)
        event.container.create_receiver(self.conn, queue)
        self.timeout.arm(event.container)
        event.container.schedule(0.25, Ticker(self))
    def on_connection_opened(self, event):
        self.timeout.opened = True
        self.open = True
        self.log.write("O %.4f\n" % time.time())
    def on_disconnected(self, event):
        self.open = False
        self.log.write("D %.4f\n" % time.time())
        self.timeout.arm(self.container)
    def on_message(self, event):
        self.received += 1
        self.last = time.time()
        body = event.message.body
        head = body[: body.rfind(":")] if isinstance(body, str) else repr(body)[:60]
        self.log.write("M %s %.4f %d\n" % (head, self.last, event.message.delivery_count or 0))
    def tick(self):
        if self.finished:
            return
        if os.path.exists(stop_file) and time.time() - self.last > idle_s:
            return self.finish()
        print(json.dumps({"t": time.time(), "received": self.received, "open": self.open}))
        sys.stdout.flush()
        self.container.schedule(0.25, Ticker(self))
    def finish(self):
        self.finished = True
        self.log.close()
        print(json.dumps({"done": True, "received": self.received}))
        sys.stdout.flush()
        self.conn.close()
        self.container.stop()


Container(ChaosReceiver()).run()
