// Ports for brokers started on a port chosen in advance: an HA cluster's
// ha-brokers-url lists every address before any broker runs, and a restarted
// broker comes back on its old port.
//
// Why not listen(0) and close: such a port lies in the kernel's ephemeral
// range, and until the broker binds it any outgoing connection may be given it
// as its local port. An HA link dialling the brokers not yet up makes such
// connections by the dozen, and CI saw the last broker of a cluster fail with
// EADDRINUSE. Below the ephemeral range only a listener can hold a port, and
// the trial bind here sees listeners. Plain JavaScript so that the benchmarks
// (plain .mjs) share it with the tests.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** How many ports below the ephemeral range are used. */
const SPAN = 10_000;

function ephemeralLow() {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 1024 + 1000) return low;
  } catch {
    // not Linux, or /proc hidden: the kernel's default
  }
  return 32768;
}

const high = ephemeralLow();
const low = Math.max(1025, high - SPAN);
// A random start, so two suites run at once on one machine (CI beside a
// developer's run) seldom try the same ports; then onwards, so one process
// never hands out a port twice.
let next = low + Math.floor(Math.random() * (high - low));

/** @param {number} port @param {string} host @returns {Promise<boolean>} */
function canListen(port, host) {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen({ port, host, exclusive: true }, () => s.close(() => resolve(true)));
  });
}

/** A port below the ephemeral range that nothing listens on now. @param {string} [host] @returns {Promise<number>} */
export async function freePort(host = '127.0.0.1') {
  for (let tried = 0; tried < high - low; tried++) {
    const port = next;
    next = next + 1 >= high ? low : next + 1;
    if (await canListen(port, host)) return port;
  }
  throw new Error(`no free port on ${host} in ${low}-${high - 1}`);
}

/** @param {number} n @param {string} [host] @returns {Promise<number[]>} */
export async function freePorts(n, host = '127.0.0.1') {
  const ports = [];
  for (let i = 0; i < n; i++) ports.push(await freePort(host));
  return ports;
}
