// Two corrections to rhea (3.0.5) for broker use, applied once at start-up.
//
// 1. Link names: AMQP identifies a link by its name *and* direction, and clients
//    such as qpid-proton's BlockingConnection attach a sender and a receiver with
//    the same name on one session. rhea keys a session's links by name alone and
//    fails with "Attach already received". We key them by direction + name.
// 2. Message decoding: see lazy-message.ts.
import { createRequire } from 'node:module';
import { installLazyDecode } from './lazy-message.js';

interface RheaLink {
  name: string;
  is_sender(): boolean;
  local: { handle: number };
  remote: { handle: number };
}

interface RheaSession {
  links: Record<string, RheaLink>;
  local: { handles: Record<number, RheaLink | undefined> };
  remote: { handles: Record<number, RheaLink | undefined> };
  create_sender(name: string): RheaLink;
  create_receiver(name: string): RheaLink;
  on_attach(frame: { performative: { name: string; role: boolean; handle: number } }): void;
}

const key = (isSender: boolean, name: string): string => `${isSender ? 'sender' : 'receiver'}:${name}`;

let installed = false;

export function installRheaPatches(): void {
  if (installed) return;
  installed = true;
  installLazyDecode();
  const require = createRequire(import.meta.url);
  const Session = require('rhea/lib/session.js') as { prototype: RheaSession & Record<string, unknown> };
  const proto = Session.prototype;

  proto.create_link = function (this: RheaSession, name: string, ctor: new (...a: unknown[]) => RheaLink, opts: unknown) {
    let i = 0;
    while (this.local.handles[i]) i++;
    const l = new ctor(this, name, i, opts);
    this.links[key(l.is_sender(), name)] = l;
    this.local.handles[i] = l;
    return l;
  };

  proto.on_attach = function (this: RheaSession & { _link_on_attach?: never }, frame) {
    const { name, role } = frame.performative;
    // role true: the peer is the receiver, so our end is the sender.
    let link = this.links[key(role, name)];
    if (!link) link = role ? this.create_sender(name) : this.create_receiver(name);
    this.remote.handles[frame.performative.handle] = link;
    (link as unknown as { on_attach(f: unknown): void }).on_attach(frame);
    (link as unknown as { remote: { attach: unknown } }).remote.attach = frame.performative;
  };

  proto.remove_link = function (this: RheaSession, link: RheaLink) {
    delete this.remote.handles[link.remote.handle];
    delete this.local.handles[link.local.handle];
    delete this.links[key(link.is_sender(), link.name)];
  };
}
