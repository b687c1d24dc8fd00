"""Send COUNT messages of SIZE bytes to QUEUE under one qpid-proton transaction and
commit once every one is settled; then, with a fifth argument `again`, commit one
message `after` under a second transaction on the same connection. QUEUE may list
several addresses (a,b): the sender is then the anonymous relay and message i goes
to the i-th address in turn (`after` to the first). Prints one JSON line: how many
sends were accepted, the refused ones by condition (count and first description),
and how each commit ended (with the discharge's error if refused)."""
import json, sys
from proton import Message
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

url, addresses, count, size = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4])
relay = len(addresses) > 1
again = len(sys.argv) > 5 and sys.argv[5] == "again"

def condition_of(delivery):
    c = delivery.remote.condition
    return [c.name, c.description] if c is not None else [None, None]

class TxLimits(MessagingHandler, TransactionHandler):
    def __init__(self):
        super().__init__()
        self.result = {"accepted": 0, "refused": {}}
        self.settled = 0
        self.round = 0
    def on_start(self, event):
        self.conn = event.container.connect(url)
        self.sender = event.container.create_sender(self.conn, None if relay else addresses[0])
        event.container.declare_transaction(self.conn, handler=self)
    def on_transaction_declared(self, event):
        self.txn = event.transaction
        self.round += 1
        if self.round == 1:
            for i in range(count):
                self.txn.send(self.sender, self.message(b"x" * size, i))
        else:
            self.txn.send(self.sender, self.message("after", 0))
    def message(self, body, i):
        return Message(body=body, durable=True, address=addresses[i % len(addresses)] if relay else None)
    def on_rejected(self, event):
        if self.round != 1:
            return
        name, description = condition_of(event.delivery)
        seen = self.result["refused"].setdefault(name, [0, description])
        seen[0] += 1
    def on_settled(self, event):
        # Our sends only: the coordinator's control messages are the transaction's.
        if event.delivery.link != self.sender:
            return
        if self.round == 1:
            state = event.delivery.remote_state
            if state not in (event.delivery.REJECTED, event.delivery.RELEASED, event.delivery.MODIFIED):
                self.result["accepted"] += 1
            self.settled += 1
            if self.settled == count:
                self.txn.commit()
        else:
            self.txn.commit()
    def ended(self, event, how):
        key = "commit" if self.round == 1 else "again"
        self.result[key] = how
        if how == "failed":
            self.result[key + "Error"] = condition_of(event.delivery)
        if self.round == 1 and again:
            event.container.declare_transaction(self.conn, handler=self)
        else:
            self.conn.close()
    def on_transaction_committed(self, event):
        self.ended(event, "committed")
    def on_transaction_commit_failed(self, event):
        self.ended(event, "failed")
    def on_transaction_declare_failed(self, event):
        self.result["declare_failed"] = condition_of(event.delivery)
        self.conn.close()

handler = TxLimits()
Container(handler).run()
print(json.dumps(handler.result))
