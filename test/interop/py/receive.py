"""Receive and accept exactly COUNT messages from QUEUE; print their bodies as JSON."""
import json, sys
from proton.utils import BlockingConnection

url, queue, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
conn = BlockingConnection(url)
receiver = conn.create_receiver(queue, credit=min(count, 100))
bodies = []
for _ in range(count):
    msg = receiver.receive(timeout=10)
    bodies.append(msg.body)
    receiver.accept()
conn.close()
print(json.dumps(bodies))
