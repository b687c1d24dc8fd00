// Who may do what with which names: the ACL file (acl-file), in the manner of
// RabbitMQ's configure/write/read permissions and qpidd's ACL file.
//
//   group ops alice bob              # a group and its members
//   allow @ops all .*                # WHO PERMISSIONS PATTERN
//   allow carol configure,read,write ^carol\..*
//   allow * write ^public\.          # * is every user
//
// configure: a queue is created for an unknown name (auto-create). write: messages are
// sent to the name (a sender's target, the `to` of an anonymous sender's message, a
// management request's reply-to). read: messages are taken or browsed from it (for
// `exchange/key`, the exchange's name). PATTERN is a regular expression that must match
// the whole name, one V8's linear-time engine can run (src/util/name-pattern.ts): a
// client chooses the names it is tested on. Without an acl-file every user may use every name; with one, only
// what a rule allows. Admins may do everything, and only admins may create reserved
// names: empty, `$...`, `amq.*`, and names with `/` or `..`; no one creates a queue or
// exchange named after one of the broker's own nodes (`$management`, BROKER_NODES).
import { TandemError, invalidArgument } from '../broker/errors.js';
import type { Logger } from '../ops/log.js';
import { WatchedFile } from '../ops/watched-file.js';
import { wholeNamePattern } from '../util/name-pattern.js';

export const PERMISSIONS = ['configure', 'write', 'read'] as const;
export type Permission = (typeof PERMISSIONS)[number];

interface Rule {
  who: string;
  permissions: Set<Permission>;
  pattern: RegExp;
}

export interface AclRules {
  groups: Map<string, Set<string>>;
  rules: Rule[];
}

/**
 * The addresses of the broker's own nodes (management, HA replication, DR replication),
 * by what each is. A link attached to one of them is served by the broker; a queue or
 * exchange of the same name would catch what is sent to the name any other way (a
 * message through the anonymous relay, `to: $management`, with its passwords) and hand
 * it to whoever may read that name. So no one creates one, admins included.
 */
const BROKER_NODES: ReadonlyMap<string, string> = new Map([
  ['$management', "the broker's management node (send requests on a link attached to it)"],
  ['$ha.replication', "the broker's HA replication address"],
  ['$dr.replication', "the broker's DR replication address"],
]);

/** Throws unless a queue or exchange may be created under `name` by anyone (see BROKER_NODES). */
export function refuseBrokerNode(name: string): void {
  const node = BROKER_NODES.get(name);
  if (node !== undefined) throw new TandemError('TANDEM_ERR_UNAUTHORIZED', `no one may create a queue or exchange '${name}': it is ${node}`);
}

/** Names nobody but an admin may create: they collide with tandem's own, or with address syntax. */
export function reservedNameReason(name: string): string | undefined {
  if (name === '') return 'an empty name';
  if (name.startsWith('$')) return "names starting with '$' are the broker's own";
  if (name.startsWith('amq.')) return "names starting with 'amq.' are the standard exchanges'";
  if (name.includes('/')) return "'/' separates an exchange from a binding key";
  if (name.includes('..')) return "'..' is not allowed in names";
  return undefined;
}

export function parseAcl(text: string, path: string): AclRules {
  const groups = new Map<string, Set<string>>();
  const rules: Rule[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `${path}:${i + 1}`;
    const words = line.split(/\s+/);
    if (words[0] === 'group') {
      if (words.length < 3) throw invalidArgument(`${where}: expected 'group NAME USER...'`);
      groups.set(words[1]!, new Set(words.slice(2)));
      return;
    }
    if (words[0] !== 'allow' || words.length !== 4) {
      throw invalidArgument(`${where}: expected 'allow WHO PERMISSIONS PATTERN' or 'group NAME USER...' (WHO: user, @group or *; PERMISSIONS: ${PERMISSIONS.join(',')} or all)`);
    }
    const [, who, perms, source] = words as [string, string, string, string];
    const permissions = new Set<Permission>();
    for (const p of perms.split(',')) {
      if (p === 'all') PERMISSIONS.forEach((x) => permissions.add(x));
      else if ((PERMISSIONS as readonly string[]).includes(p)) permissions.add(p as Permission);
      else throw invalidArgument(`${where}: unknown permission '${p}' (known: ${PERMISSIONS.join(', ')}, all)`);
    }
    let pattern: RegExp;
    try {
      pattern = wholeNamePattern(source);
    } catch (err) {
      throw invalidArgument(`${where}: pattern ${source}: ${(err as Error).message}`);
    }
    rules.push({ who, permissions, pattern });
  });
  for (const r of rules) {
    if (r.who.startsWith('@') && !groups.has(r.who.slice(1))) throw invalidArgument(`${path}: rule for unknown group ${r.who} (declare it with 'group ${r.who.slice(1)} USER...')`);
  }
  return { groups, rules };
}

/** Whom a permission check is about. */
export interface Identity {
  user: string | undefined;
  admin: boolean;
}

export class Acl {
  private readonly file: WatchedFile<AclRules> | undefined;

  /** Without a path: permissive (every name that is not reserved, for everyone). */
  constructor(path: string | undefined, log?: Logger) {
    this.file = path === undefined ? undefined : new WatchedFile(path, parseAcl, () => {
      throw invalidArgument(`acl-file ${path} does not exist`);
    }, 'ACL file', log);
  }

  /** Throws amqp:unauthorized-access unless `who` may `permission` on `name`. */
  check(who: Identity, permission: Permission, name: string): void {
    if (permission === 'configure') refuseBrokerNode(name);
    if (who.admin) return;
    if (permission === 'configure') {
      const reserved = reservedNameReason(name);
      if (reserved) throw new TandemError('TANDEM_ERR_UNAUTHORIZED', `only an admin may create '${name}': ${reserved}`);
    }
    if (!this.file || this.allows(this.file.value, who.user, permission, name)) return;
    throw new TandemError('TANDEM_ERR_UNAUTHORIZED', `user '${who.user ?? 'anonymous'}' may not ${permission} '${name}' (acl-file ${this.file.path})`);
  }

  private allows(acl: AclRules, user: string | undefined, permission: Permission, name: string): boolean {
    if (user === undefined) return false;
    return acl.rules.some(
      (r) => r.permissions.has(permission) && (r.who === '*' || r.who === user || (r.who.startsWith('@') && acl.groups.get(r.who.slice(1))?.has(user) === true)) && r.pattern.test(name),
    );
  }
}
