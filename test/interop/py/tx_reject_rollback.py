"""Receive one message, settle it with OUTCOME (a descriptor code in hex: 0x25
rejected, 0x26 released) under a transaction, then roll the transaction back.
Prints one JSON line: the body received and whether the rollback was answered."""
import json, sys
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

url, queue, outcome = sys.argv[1], sys.argv[2], int(sys.argv[3], 16)

class RejectThenRollback(MessagingHandler, TransactionHandler):
    def __init__(self):
        super().__init__(prefetch=0, auto_accept=False)
        self.result = {}
    def on_start(self, event):
        self.conn = event.container.connect(url)
        self.receiver = event.container.create_receiver(self.conn, queue)
        event.container.declare_transaction(self.conn, handler=self)
    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.receiver.flow(1)
    def on_message(self, event):
        self.result["got"] = event.message.body
        # The outcome under the transaction, left unsettled as the transaction decides it.
        self.txn.update(event.delivery, outcome)
        event.container.schedule(0.3, self)
    def on_timer_task(self, event):
        self.txn.abort()
    def on_transaction_aborted(self, event):
        self.result["aborted"] = True
        self.conn.close()

handler = RejectThenRollback()
Container(handler).run()
print(json.dumps(handler.result))
