"""Transactional sends with qpid-proton: commit, rollback, and (with --drop) a
connection that dies mid-transaction. Prints one JSON line with what happened.
A fourth argument `mixed`: the odd-numbered messages are not durable; `ids=A,B,..`:
send those message-ids (repeats allowed), each as its own body, instead of five."""
import json, os, sys
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

url, queue, mode = sys.argv[1], sys.argv[2], sys.argv[3]  # mode: commit | rollback | drop
mixed = len(sys.argv) > 4 and sys.argv[4] == "mixed"
ids = sys.argv[4][4:].split(",") if len(sys.argv) > 4 and sys.argv[4].startswith("ids=") else None

class TxSender(MessagingHandler, TransactionHandler):
    def __init__(self):
        super().__init__()
        self.result = {"mode": mode}
    def on_start(self, event):
        self.conn = event.container.connect(url)
        self.sender = event.container.create_sender(self.conn, queue)
        event.container.declare_transaction(self.conn, handler=self)
    def on_transaction_declared(self, event):
        if ids is not None:
            for i in ids:
                event.transaction.send(self.sender, Message(id=i, body=i, durable=True))
        else:
            for i in range(5):
                event.transaction.send(self.sender, Message(body="%s-%d" % (mode, i), durable=not (mixed and i % 2 == 1)))
        if mode == "commit":
            event.transaction.commit()
        elif mode == "rollback":
            event.transaction.abort()
        else:
            # Give the sends time to reach the broker, then vanish without a discharge.
            event.container.schedule(0.5, self)
    def on_timer_task(self, event):
        sys.stdout.write(json.dumps({"mode": mode, "dropped": True}) + "\n")
        sys.stdout.flush()
        os._exit(0)
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
