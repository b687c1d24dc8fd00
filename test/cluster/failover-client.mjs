// failover-client.mjs HOST:PORT,HOST:PORT,... QUEUE [RECEIVER-HOST:PORT,...]
// A sender and a receiver with reconnect over every broker address (rhea
// connection_details rotating), run by the cluster tests inside the lab's switch
// namespace. One JSON event per line on stdout, each with Date.now() as t:
//   {ev:'connected', role, host}  {ev:'disconnected', role}  {ev:'accepted', id, host}
//   {ev:'received', id}  {ev:'summary', sent, accepted, received, missing:[...]}
// A message not accepted when its connection drops is sent again (at-least-once),
// so the test can check that every accepted message is received at least once.
// SIGUSR2 stops sending; the receiver then drains until it has every accepted
// message (or 30 s pass) and prints the summary. SIGTERM prints it at once.
// With a third argument the receiver uses only those addresses: a partition test keeps
// it off the node it cuts, so what only that node held cannot be counted as received.
// FAILOVER_HOLD=N adds a holder: a third connection that takes N messages and never
// settles them ({ev:'held', count, host} as they come), so a broker that stops or moves
// always has deliveries out; on SIGUSR2 it closes, and what it held goes back to the
// queue for the receiver. Held messages are not counted as received.
import { connect as netConnect } from 'node:net';
import rhea from 'rhea';

const [urls, queue, receiverUrls] = process.argv.slice(2);
const parseHosts = (list) =>
  list.split(',').map((h) => {
    const [host, port] = h.split(':');
    return { host, port: Number(port ?? 5672) };
  });
const hosts = parseHosts(urls);
const receiverHosts = receiverUrls ? parseHosts(receiverUrls) : hosts;
const out = (o) => process.stdout.write(`${JSON.stringify({ t: Date.now(), ...o })}\n`);

// A host that lost power answers nothing, not even a reset: give up a connection
// attempt after 1 s and try the next address (rhea has no connect timeout of its own).
function connectWithin1s(port, host, _options, onConnected) {
  const socket = netConnect(port, host, onConnected);
  socket.setTimeout(1000, () => socket.destroy(new Error(`no answer from ${host}:${port} within 1 s`)));
  socket.once('connect', () => socket.setTimeout(0));
  return socket;
}

function connect(role, hosts) {
  let next = 0;
  let current = '';
  const container = rhea.create_container({ id: `failover-${role}-${process.pid}` });
  const conn = container.connect({
    connection_details: () => {
      const h = hosts[next++ % hosts.length];
      current = `${h.host}:${h.port}`;
      return { host: h.host, port: h.port, connect: connectWithin1s };
    },
    reconnect: true,
    initial_reconnect_delay: 50,
    max_reconnect_delay: 300,
    reconnect_limit: 100000,
    idle_time_out: 2000,
    // Off loopback a cluster needs auth: the tests give the identity in the environment.
    username: process.env.TANDEM_CLIENT_USER,
    password: process.env.TANDEM_CLIENT_PASSWORD,
  });
  conn.on('connection_open', () => out({ ev: 'connected', role, host: current }));
  conn.currentHost = () => current;
  conn.on('disconnected', () => out({ ev: 'disconnected', role }));
  conn.on('connection_error', () => undefined);
  conn.on('error', () => undefined);
  return conn;
}

// ------------------------------------------------------------ sender
const MAX_IN_FLIGHT = 20;
const pending = []; // ids to (re)send
const inFlight = new Map(); // delivery id -> message id on the current link
const accepted = new Set();
let nextId = 1;
let sending = true;
let sent = 0;

const sconn = connect('sender', hosts);
const sender = sconn.open_sender({ target: { address: queue, durable: 2 }, autosettle: true });
// Between a drop and the reconnect rhea still reports the old link's credit: a send
// then goes into the dead session and is never heard of again (seen after an idle
// timeout, when a host lost power). Send only on an open connection.
let connected = false;
sconn.on('connection_open', () => (connected = true));
function pump() {
  while (connected && sender.sendable() && inFlight.size < MAX_IN_FLIGHT) {
    let id = pending.shift();
    if (id === undefined) {
      if (!sending) return;
      id = nextId++;
    }
    const d = sender.send({ message_id: String(id), durable: true, body: `message ${id}` });
    inFlight.set(d, id);
    sent++;
  }
}
sender.on('sendable', pump);
sender.on('accepted', (ctx) => {
  const id = inFlight.get(ctx.delivery);
  inFlight.delete(ctx.delivery);
  if (id === undefined) return;
  if (!accepted.has(id)) {
    accepted.add(id);
    out({ ev: 'accepted', id, host: sconn.currentHost() });
  }
});
for (const ev of ['rejected', 'released', 'modified']) {
  sender.on(ev, (ctx) => {
    const id = inFlight.get(ctx.delivery);
    inFlight.delete(ctx.delivery);
    if (id !== undefined && !accepted.has(id)) pending.push(id);
  });
}
sconn.on('disconnected', () => {
  connected = false;
  for (const id of inFlight.values()) if (!accepted.has(id)) pending.push(id);
  inFlight.clear();
});
// A steady trickle: one batch every 10 ms keeps failover timing fine-grained.
const ticker = setInterval(pump, 10);

// ------------------------------------------------------------ receiver
const received = new Set();
const rconn = connect('receiver', receiverHosts);
const receiver = rconn.open_receiver({ source: { address: queue, durable: 2 }, autoaccept: true, credit_window: 100 });
receiver.on('message', (ctx) => {
  const id = Number(ctx.message.message_id);
  if (!received.has(id)) {
    received.add(id);
    out({ ev: 'received', id });
  }
});

// ------------------------------------------------------------ holder
const HOLD = Number(process.env.FAILOVER_HOLD ?? 0);
let hconn;
if (HOLD > 0) {
  hconn = connect('holder', receiverHosts);
  let held = 0;
  const holder = hconn.open_receiver({ source: { address: queue, durable: 2 }, autoaccept: false, credit_window: 0 });
  // Credit for N on each (re)attach: the broker gave back what the last connection held.
  hconn.on('connection_open', () => {
    held = 0;
    holder.add_credit(HOLD - holder.credit);
  });
  holder.on('message', () => {
    held++;
    if (held === 1 || held === HOLD) out({ ev: 'held', count: held, host: hconn.currentHost() });
  });
}

// Counts only: the test has every id from the events. Exit once stdout has taken the
// line (stdout to a pipe is asynchronous; process.exit right away could cut it).
function summaryAndExit() {
  const missing = [...accepted].filter((id) => !received.has(id));
  process.stdout.write(`${JSON.stringify({ t: Date.now(), ev: 'summary', sent, accepted: accepted.size, received: received.size, missing })}\n`, () => process.exit(0));
}
process.on('SIGUSR2', () => {
  sending = false;
  out({ ev: 'draining' });
  // What the holder took goes back to the queue, for the receiver.
  if (hconn) hconn.close();
  const deadline = Date.now() + 30_000;
  const check = setInterval(() => {
    const missing = [...accepted].filter((id) => !received.has(id));
    if ((missing.length === 0 && pending.length === 0 && inFlight.size === 0) || Date.now() > deadline) {
      clearInterval(check);
      clearInterval(ticker);
      summaryAndExit();
    }
  }, 100);
});
process.on('SIGTERM', summaryAndExit);
