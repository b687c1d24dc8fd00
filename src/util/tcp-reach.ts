// How long to wait for a peer's TCP handshake, apart from how long to wait for
// its answer. A host that is up answers a SYN from its kernel within a round trip,
// however busy the process behind the port is; a host that lost power, or whose
// cable is out, answers nothing at all: no SYN-ACK, no reset, and TCP would keep
// resending SYNs for about two minutes. So a short deadline for the handshake
// tells "down or unreachable" from "slow" without giving up on a slow peer.
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions as TlsOptions } from 'node:tls';
import { hostPort } from './host-port.js';

export type Reach = 'answered' | 'refused' | 'silent';

/**
 * Does anything at host:port complete a TCP handshake within `deadlineMs`?
 * 'answered': it did; 'refused': the host answered with a reset (up, nothing
 * listening); 'silent': nothing came back. A fresh SYN goes out every `resendMs`
 * (TCP itself resends only after a second), so one lost packet does not make a
 * live peer look silent.
 */
export function probeTcp(host: string, port: number, options: { deadlineMs: number; resendMs: number }): Promise<Reach> {
  return new Promise((resolve) => {
    const sockets: Socket[] = [];
    let done = false;
    const finish = (reach: Reach) => {
      if (done) return;
      done = true;
      clearInterval(resender);
      clearTimeout(deadline);
      for (const s of sockets) s.destroy();
      resolve(reach);
    };
    const attempt = () => {
      const socket = netConnect({ host, port });
      sockets.push(socket);
      socket.once('connect', () => finish('answered'));
      socket.once('error', (err: NodeJS.ErrnoException) => {
        // A reset is an answer: the host is up. Other errors (no route) are no answer;
        // the deadline decides.
        if (err.code === 'ECONNREFUSED') finish('refused');
      });
    };
    const resender = setInterval(() => {
      if (sockets.length * options.resendMs < options.deadlineMs) attempt();
    }, options.resendMs);
    // The event loop may have been busy past the deadline: let a handshake that
    // completed meanwhile be seen (I/O runs before setImmediate) before calling it silent.
    const deadline = setTimeout(() => setImmediate(() => finish('silent')), options.deadlineMs);
    attempt();
  });
}

/**
 * A connect function (port, host, options, onConnected): a TCP connect (TLS on top
 * when `tls` is given: onConnected once the TLS handshake has verified the peer)
 * whose socket is destroyed with a clear error when the TCP handshake has not
 * completed within `deadlineMs` (the peer links' dialler, engine-dialer.ts).
 */
export function connectWithin(deadlineMs: number, tls?: TlsOptions) {
  return (port: number, host: string, _options: unknown, onConnected: () => void): Socket => {
    const socket = tls ? tlsConnect({ ...tls, port, host }, onConnected) : netConnect({ port, host }, onConnected);
    const timer = setTimeout(
      () =>
        setImmediate(() => {
          if (socket.connecting) socket.destroy(new Error(`no TCP answer from ${hostPort(host, port)} within ${deadlineMs} ms: the host is down or unreachable`));
        }),
      deadlineMs,
    );
    timer.unref();
    const clear = () => clearTimeout(timer);
    socket.once('connect', clear);
    socket.once('close', clear);
    return socket;
  };
}
