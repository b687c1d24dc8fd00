"""Transactions in a row with qpid-proton until the broker goes (no reconnect): each
sends 3 durable messages to queue A and 3 to queue B and commits. Stops after STOP
transactions, or when the connection is lost. Prints one JSON line: the bodies of
the transactions confirmed committed, per queue, and those of the one whose commit
had no answer (in doubt: it may or may not have committed)."""
import json, sys
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

url, qa, qb, stop = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

class TxUntilLost(MessagingHandler, TransactionHandler):
    def __init__(self):
        super().__init__()
        self.i = 0
        self.committed = {qa: [], qb: []}
        self.pending = None
        self.failed = []
    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(url, reconnect=False)
        self.sa = event.container.create_sender(self.conn, qa)
        self.sb = event.container.create_sender(self.conn, qb)
        self.container.declare_transaction(self.conn, handler=self)
    def on_transaction_declared(self, event):
        bodies = {qa: [], qb: []}
        for j in range(3):
            for q, s in ((qa, self.sa), (qb, self.sb)):
                body = "t%d-%d" % (self.i, j)
                event.transaction.send(s, Message(body=body, durable=True))
                bodies[q].append(body)
        self.pending = bodies
        event.transaction.commit()
    def on_transaction_committed(self, event):
        for q in (qa, qb):
            self.committed[q].extend(self.pending[q])
        self.pending = None
        self.i += 1
        if self.i < stop:
            self.container.declare_transaction(self.conn, handler=self)
        else:
            self.conn.close()
    def on_transaction_declare_failed(self, event):
        self.failed.append("declare %d" % self.i); self.conn.close()
    def on_transaction_commit_failed(self, event):
        self.failed.append("commit %d" % self.i); self.pending = None; self.conn.close()
    def on_transport_error(self, event):
        self.conn.close()
    def on_disconnected(self, event):
        self.conn.close()

h = TxUntilLost()
Container(h).run()
print(json.dumps({"committed": h.committed, "in_doubt": h.pending, "failed": h.failed, "count": h.i}))
