"""Message groups seen from two proton receivers on two connections.

usage: group_receivers.py URL QUEUE TOTAL [SEND_GROUPS PER_GROUP]

With SEND_GROUPS and PER_GROUP, first sends SEND_GROUPS*PER_GROUP durable messages, the
groups interleaved (g0:0, g1:0, ..., g0:1, ...), group-id 'gN' and body 'gN:SEQ'. Then two
receivers (prefetch 4 each, on two connections) take TOTAL messages between them, each
holding what it gets unsettled until it holds 3 (or a short timer fires) and then accepting
them all. Every message is checked on arrival: no receiver may get a message of a group the
other one holds unsettled, and each group's sequence numbers must arrive in order.
Prints one JSON line: received, violations, out_of_order, per_receiver, shared_groups.
"""
import json, sys
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

url, queue, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
if len(sys.argv) > 5:
    groups, per_group = int(sys.argv[4]), int(sys.argv[5])
    conn = BlockingConnection(url)
    sender = conn.create_sender(queue)
    for seq in range(per_group):
        for g in range(groups):
            sender.send(Message(body='g%d:%d' % (g, seq), group_id='g%d' % g, durable=True))
    conn.close()
if total == 0:
    print(json.dumps({'received': 0, 'violations': [], 'out_of_order': [], 'per_receiver': {}, 'shared_groups': 0}))
    sys.exit(0)


class Receivers(MessagingHandler):
    def __init__(self):
        super(Receivers, self).__init__(prefetch=4, auto_accept=False)
        self.received = 0
        self.violations = []
        self.out_of_order = []
        self.holders = {}  # (receiver name, group) -> messages of the group it holds unsettled
        self.held = {'r1': [], 'r2': []}
        self.last_seq = {}
        self.per_receiver = {'r1': 0, 'r2': 0}
        self.groups_of = {'r1': set(), 'r2': set()}
        self.conns = []
        self.done = False

    def on_start(self, event):
        self.container = event.container
        for name in ('r1', 'r2'):
            c = event.container.connect(url)
            self.conns.append(c)
            event.container.create_receiver(c, queue, name=name)
        self.tick = event.container.schedule(0.05, self)
        self.deadline = event.container.schedule(60, Deadline(self))  # the test then fails on the count

    def on_timer_task(self, event):
        if self.done:
            return
        for name in ('r1', 'r2'):
            self.settle_all(name)
        self.tick = self.container.schedule(0.05, self)

    def on_message(self, event):
        name = event.receiver.name
        group = event.message.group_id
        seq = int(event.message.body.split(':')[1])
        self.received += 1
        self.per_receiver[name] += 1
        self.groups_of[name].add(group)
        other = 'r2' if name == 'r1' else 'r1'
        if self.holders.get((other, group), 0) > 0:
            self.violations.append('%s got %s while %s holds %d of it' % (name, event.message.body, other, self.holders[(other, group)]))
        self.holders[(name, group)] = self.holders.get((name, group), 0) + 1
        if group in self.last_seq and seq <= self.last_seq[group]:
            self.out_of_order.append('%s after %d' % (event.message.body, self.last_seq[group]))
        self.last_seq[group] = seq
        self.held[name].append((event.delivery, group))
        if len(self.held[name]) >= 3:
            self.settle_all(name)
        if self.received >= total:
            self.finish()

    def settle_all(self, name):
        for delivery, group in self.held[name]:
            self.holders[(name, group)] -= 1
            self.accept(delivery)
        self.held[name] = []

    def finish(self):
        if self.done:
            return
        self.done = True
        self.tick.cancel()
        self.deadline.cancel()
        for name in ('r1', 'r2'):
            self.settle_all(name)
        for c in self.conns:
            c.close()


class Deadline(object):
    def __init__(self, receivers):
        self.receivers = receivers

    def on_timer_task(self, event):
        self.receivers.finish()


r = Receivers()
try:
    Container(r).run()
except KeyboardInterrupt:
    pass
shared = sorted(r.groups_of['r1'] & r.groups_of['r2'])
print(json.dumps({'received': r.received, 'violations': r.violations, 'out_of_order': r.out_of_order, 'per_receiver': r.per_receiver, 'shared_groups': len(shared)}))
