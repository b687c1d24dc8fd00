"""Transactional acceptance with qpid-proton: receive N messages accepting them
under a transaction, then commit or roll back (or drop the connection). With
OUTCOME (a descriptor code in hex: 0x25 rejected, 0x26 released), each is given that
outcome under the transaction instead of accepted; `modified` gives modified with
delivery-failed and the message-annotation x-opt-tx-note = "retry". Mode `commit+send=BYTES`: the
transaction also sends one durable message of BYTES bytes to the queue, then commits.
Prints what was received, and whether the commit failed."""
import json, os, sys
from proton import Described, Message, symbol, ulong
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

url, queue, count, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
outcome = sys.argv[5] if len(sys.argv) > 5 else None
send_bytes = int(mode.split("=", 1)[1]) if mode.startswith("commit+send=") else 0

class TxReceiver(MessagingHandler, TransactionHandler):
    def __init__(self):
        super().__init__(prefetch=0, auto_accept=False)
        self.got = []
        self.commit_failed = False
    def on_start(self, event):
        self.conn = event.container.connect(url)
        self.receiver = event.container.create_receiver(self.conn, queue)
        self.sender = event.container.create_sender(self.conn, queue) if send_bytes else None
        event.container.declare_transaction(self.conn, handler=self)
    def on_transaction_declared(self, event):
        self.txn = event.transaction
        if send_bytes:
            # Sent first: frames reach the broker in order, so it is in before the commit.
            self.txn.send(self.sender, Message(body="x" * send_bytes, durable=True))
        self.receiver.flow(count)
    def on_message(self, event):
        self.got.append(event.message.body)
        if outcome is None:
            self.txn.accept(event.delivery)
        elif outcome == "modified":
            # Transaction.update sends an outcome without fields: this one has them.
            modified = Described(ulong(0x27), [True, False, {symbol("x-opt-tx-note"): "retry"}])
            event.delivery.local.data = [self.txn.id, modified]
            event.delivery.update(0x34)
        else:
            # Left unsettled: the transaction decides it.
            self.txn.update(event.delivery, int(outcome, 16))
        if len(self.got) == count:
            if mode == "commit" or send_bytes:
                self.txn.commit()
            elif mode == "rollback":
                self.txn.abort()
            else:
                event.container.schedule(0.3, self)
    def on_timer_task(self, event):
        sys.stdout.write(json.dumps({"got": self.got, "dropped": True}) + "\n")
        sys.stdout.flush()
        os._exit(0)
    def on_transaction_committed(self, event):
        self.conn.close()
    def on_transaction_aborted(self, event):
        self.conn.close()
    def on_transaction_commit_failed(self, event):
        self.commit_failed = True
        self.conn.close()

handler = TxReceiver()
Container(handler).run()
print(json.dumps({"got": handler.got, "commit_failed": True} if handler.commit_failed else {"got": handler.got}))
