// tandem queue add|del|set|list|show|purge|move|browse (qpid-config users should feel at home).
import type { Command } from 'commander';
import { rowsOf } from '../admin/client.js';
import { action, addBrokerOption, attributes, print, table, withBroker, type BrokerOption } from './common.js';
import { queueBrowseCommand } from './queue-browse-command.js';

interface AddOptions extends BrokerOption {
  durable?: boolean;
  autoDelete?: boolean;
  autoDeleteDelay?: string;
  exclusive?: boolean;
  maxCount?: string;
  maxSize?: string;
  policy?: string;
  defaultTtl?: string;
  alternateExchange?: string;
  priorities?: string;
  replicate?: string;
  dedupWindow?: string;
  dedupTtl?: string;
  dedupKey?: string;
  messageGroups?: boolean;
  argument?: string[];
}

const collect = (value: string, previous: string[] = []) => [...previous, value];

export function queueCommands(program: Command): void {
  const queue = program.command('queue').description('manage queues');

  addBrokerOption(
    queue
      .command('add <name>')
      .description('create a queue')
      .option('--durable', 'survives a broker restart (its durable messages are journaled)')
      .option('--auto-delete', 'deleted when its last consumer goes')
      .option('--auto-delete-delay <duration>', 'wait this long before auto-deleting (e.g. 30s)')
      .option('--exclusive', 'only one connection may use it')
      .option('--max-count <n>', 'most messages it holds')
      .option('--max-size <bytes>', 'most bytes of messages it holds (e.g. 1048576 or 16MiB)')
      .option('--policy <reject|ring>', 'when full: refuse senders (reject) or drop the oldest (ring)')
      .option('--default-ttl <duration>', 'time to live for messages that set none (e.g. 10s)')
      .option('--alternate-exchange <name>', 'where rejected, expired or orphaned messages go')
      .option('--priorities <n>', 'priority levels, 1-10')
      .option('--replicate <level>', 'HA replication: none, configuration or all')
      .option('--dedup-window <n>', 'duplicate detection: refuse a message whose key is among the last n taken (settled accepted, not enqueued)')
      .option('--dedup-ttl <duration>', 'keep those keys at most this long (e.g. 10m)')
      .option('--dedup-key <property>', 'key: this application property instead of the message-id (e.g. _AMQ_DUPL_ID)')
      .option('--message-groups', 'keep each group (group-id, JMSXGroupID) at one consumer while it holds unsettled messages of it, in order')
      .option('--argument <key=value>', 'any other queue argument (repeatable)', collect),
  ).action(
    action(async (name: string, o: AddOptions) => {
      const body: Record<string, unknown> = {};
      if (o.durable) body.durable = true;
      if (o.autoDelete) body['auto-delete'] = true;
      if (o.autoDeleteDelay) body['auto-delete-delay'] = o.autoDeleteDelay;
      if (o.exclusive) body.exclusive = true;
      if (o.maxCount) body['max-count'] = o.maxCount;
      if (o.maxSize) body['max-size'] = o.maxSize;
      if (o.policy) body.policy = o.policy;
      if (o.defaultTtl) body['default-ttl'] = o.defaultTtl;
      if (o.alternateExchange) body['alternate-exchange'] = o.alternateExchange;
      if (o.priorities) body.priorities = o.priorities;
      if (o.replicate) body['qpid.replicate'] = o.replicate;
      if (o.dedupWindow) body['qpid.dedup-window'] = o.dedupWindow;
      if (o.dedupTtl) body['qpid.dedup-ttl'] = o.dedupTtl;
      if (o.dedupKey) body['qpid.dedup-key'] = o.dedupKey;
      if (o.messageGroups) body['qpid.message-groups'] = true;
      for (const kv of o.argument ?? []) {
        const eq = kv.indexOf('=');
        if (eq < 1) throw new Error(`--argument needs key=value, not '${kv}'`);
        body[kv.slice(0, eq)] = kv.slice(eq + 1);
      }
      const created = await withBroker(o, (c) => c.request('CREATE', 'queue', name, body));
      print(o, created, () => `queue '${name}' created`);
    }),
  );

  addBrokerOption(
    queue
      .command('del <name>')
      .description('delete a queue (its messages go to its alternate exchange, if any)')
      .option('--if-empty', 'only if it holds no messages')
      .option('--if-unused', 'only if it has no consumers'),
  ).action(
    action(async (name: string, o: BrokerOption & { ifEmpty?: boolean; ifUnused?: boolean }) => {
      const r = await withBroker(o, (c) => c.request('DELETE', 'queue', name, { 'if-empty': o.ifEmpty === true, 'if-unused': o.ifUnused === true }));
      print(o, r, () => `queue '${name}' deleted`);
    }),
  );

  addBrokerOption(
    queue
      .command('set <name>')
      .description("change an existing queue's duplicate-detection window (the keys it holds stay, within the new bounds)")
      .option('--dedup-window <n>', 'keys of the last n messages (0: off)')
      .option('--dedup-ttl <duration>', 'keep keys at most this long (0: no age limit)')
      .option('--dedup-key <property>', "key: this application property ('' or message-id: the message-id)"),
  ).action(
    action(async (name: string, o: BrokerOption & { dedupWindow?: string; dedupTtl?: string; dedupKey?: string }) => {
      const body: Record<string, unknown> = {};
      if (o.dedupWindow !== undefined) body['qpid.dedup-window'] = o.dedupWindow;
      if (o.dedupTtl !== undefined) body['qpid.dedup-ttl'] = o.dedupTtl;
      if (o.dedupKey !== undefined) body['qpid.dedup-key'] = o.dedupKey;
      const updated = await withBroker(o, (c) => c.request('UPDATE', 'queue', name, body));
      print(o, updated, () => `queue '${name}' updated`);
    }),
  );

  addBrokerOption(queue.command('list').description('list queues with depth and consumers')).action(
    action(async (o: BrokerOption) => {
      const { reply, own } = await withBroker(o, async (c) => ({ reply: await c.request('QUERY', 'queue', undefined), own: c.replyAddress }));
      // Not this command's own reply queue: it exists only while the command runs.
      const rows = rowsOf(reply).filter((r) => r.name !== own);
      rows.sort((a, b) => String(a.name).localeCompare(String(b.name)));
      print(o, rows, () => table(rows, ['name', 'durable', 'depth', 'acquired', 'consumers', 'qpid.replicate']));
    }),
  );

  addBrokerOption(queue.command('show <name>').description('every attribute of a queue')).action(
    action(async (name: string, o: BrokerOption) => {
      const attrs = (await withBroker(o, (c) => c.request('READ', 'queue', name))) as Record<string, unknown>;
      print(o, attrs, () => attributes(attrs));
    }),
  );

  addBrokerOption(
    queue.command('purge <name>').description('remove available messages').option('--count <n>', 'remove at most n'),
  ).action(
    action(async (name: string, o: BrokerOption & { count?: string }) => {
      const r = (await withBroker(o, (c) => c.request('PURGE', 'queue', name, o.count ? { count: o.count } : {}))) as { purged: number };
      print(o, r, () => `${r.purged} messages purged from '${name}'`);
    }),
  );

  addBrokerOption(
    queue
      .command('move <from> <to>')
      .description("move available messages to another queue, in delivery order (replay a dead-letter queue); the target's duplicate-detection window is not consulted")
      .option('--count <n>', 'move at most n'),
  ).action(
    action(async (from: string, to: string, o: BrokerOption & { count?: string }) => {
      const r = (await withBroker(o, (c) => c.request('MOVE', 'queue', from, o.count ? { to, count: o.count } : { to }))) as { moved: number };
      print(o, r, () => `${r.moved} messages moved from '${from}' to '${to}'`);
    }),
  );

  queueBrowseCommand(queue);
}
