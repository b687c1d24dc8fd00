"""Transactional sends with qpid-proton that set message-id: one transaction
sending the given ids (a comma list, repeats allowed), committed or rolled back.
Prints one JSON line with what happened."""
import json, sys
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

url, queue, mode, ids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")  # mode: commit | rollback

class TxSender(MessagingHandler, TransactionHandler):
    def __init__(self):
        super().__init__()
        self.result = {"mode": mode}
    def on_start(self, event):
        self.conn = event.container.connect(url)
        self.sender = event.container.create_sender(self.conn, queue)
        event.container.declare_transaction(self.conn, handler=self)
    def on_transaction_declared(self, event):
        for i in ids:
            event.transaction.send(self.sender, Message(id=i, body=i, durable=True))
        if mode == "commit":
            event.transaction.commit()
        else:
            event.transaction.abort()
    def on_transaction_committed(self, event):
        self.result["committed"] = True
        self.conn.close()
    def on_transaction_aborted(self, event):
        self.result["aborted"] = True
        self.conn.close()
    def on_transaction_declare_failed(self, event):
        self.result["declare_failed"] = True
        self.conn.close()
    def on_transaction_commit_failed(self, event):
        self.result["commit_failed"] = True
        self.conn.close()

handler = TxSender()
Container(handler).run()
print(json.dumps(handler.result))
