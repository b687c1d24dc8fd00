"""Send N durable messages with bodies PREFIX-0..N-1 and wait for each to be accepted."""
import json, sys
from proton import Message
from proton.utils import BlockingConnection

url, queue, prefix, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
conn = BlockingConnection(url)
sender = conn.create_sender(queue)
for i in range(count):
    sender.send(Message(body="%s-%d" % (prefix, i), durable=True))
conn.close()
print(json.dumps({"sent": count}))
