"""K transactions in a row with qpid-proton, each sending 3 messages to queue A
and 3 to queue B; every third one is rolled back, the others committed.
Prints one JSON line: the bodies committed to each queue, in order."""
import json, sys
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

url, qa, qb, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

class TxMulti(MessagingHandler, TransactionHandler):
    def __init__(self):
        super().__init__()
        self.i = 0
        self.committed = {qa: [], qb: []}
        self.pending = None
    def on_start(self, event):
        self.container = event.container
        self.conn = event.container.connect(url)
        self.sa = event.container.create_sender(self.conn, qa)
        self.sb = event.container.create_sender(self.conn, qb)
        self.container.declare_transaction(self.conn, handler=self)
    def on_transaction_declared(self, event):
        bodies = {qa: [], qb: []}
        for j in range(3):
            for q, s in ((qa, self.sa), (qb, self.sb)):
                body = "t%d-%s-%d" % (self.i, q, j)
                event.transaction.send(s, Message(body=body, durable=True))
                bodies[q].append(body)
        self.pending = bodies
        if self.i % 3 == 2:
            event.transaction.abort()
        else:
            event.transaction.commit()
    def next(self):
        self.i += 1
        if self.i < count:
            self.container.declare_transaction(self.conn, handler=self)
        else:
            self.conn.close()
    def on_transaction_committed(self, event):
        for q in (qa, qb):
            self.committed[q].extend(self.pending[q])
        self.next()
    def on_transaction_aborted(self, event):
        self.next()
    def on_transaction_declare_failed(self, event):
        sys.stderr.write("declare failed\n"); self.conn.close()
    def on_transaction_commit_failed(self, event):
        sys.stderr.write("commit failed\n"); self.conn.close()

h = TxMulti()
Container(h).run()
print(json.dumps(h.committed))
