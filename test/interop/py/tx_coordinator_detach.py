"""A coordinator link closed while its transaction is open, the connection kept:
receive one message and accept it under a transaction, close the coordinator link
(no discharge), then send one message under that transaction's id. A second
connection then consumes the queue for a few seconds. Prints one JSON line: what the
late transactional send was told, and what the second connection received."""
import json, sys
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

url, queue = sys.argv[1], sys.argv[2]

class Watcher(MessagingHandler):
    """The second connection: takes what the queue gives it for `seconds`."""
    def __init__(self, owner):
        super().__init__(prefetch=10)
        self.owner = owner
    def on_message(self, event):
        self.owner.result["redelivered"].append(event.message.body)

class Abandoner(MessagingHandler, TransactionHandler):
    def __init__(self):
        super().__init__(prefetch=0, auto_accept=False)
        self.result = {"redelivered": []}
    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(url)
        self.receiver = event.container.create_receiver(self.conn, queue)
        self.sender = event.container.create_sender(self.conn, queue)
        event.container.declare_transaction(self.conn, handler=self)
    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.receiver.flow(1)
    def on_message(self, event):
        self.result["got"] = event.message.body
        self.txn.accept(event.delivery)
        # Give the acceptance time to arrive, then close the coordinator link only.
        self.container.schedule(0.3, self)
        self.step = "close"
    def on_timer_task(self, event):
        if self.step == "close":
            self.conn._txn_ctrl.close()
            self.step = "send"
            self.container.schedule(0.3, self)
        elif self.step == "send":
            self.late = self.txn.send(self.sender, Message(body="late"))
            self.step = "watch"
            self.container.schedule(0.5, self)
        elif self.step == "watch":
            self.watch_conn = self.container.connect(url)
            self.container.create_receiver(self.watch_conn, queue, handler=Watcher(self))
            self.step = "done"
            self.container.schedule(2.0, self)
        else:
            self.watch_conn.close()
            self.conn.close()
    def on_settled(self, event):
        if getattr(self, "late", None) is not None and event.delivery == self.late:
            d = event.delivery
            self.result["late"] = {"state": d.remote_state, "condition": d.remote.condition.name if d.remote.condition else None}

handler = Abandoner()
Container(handler).run()
print(json.dumps(handler.result))
