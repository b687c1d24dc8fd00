// tandem dr add|del|list|status|activate: disaster recovery queues on a
// secondary broker (see docs/dr.md).
import type { Command } from 'commander';
import { TandemError } from '../broker/errors.js';
import { action, addBrokerOption, print, table, withBroker, type BrokerOption } from './common.js';

interface AddOptions extends BrokerOption {
  source: string;
  mode: string;
}

export function drCommands(program: Command): void {
  const dr = program.command('dr').description('disaster recovery: queues replicated from another cluster (run against the secondary)');

  addBrokerOption(
    dr
      .command('add <queue>')
      .description('replicate a queue from the primary cluster to this broker (passive until activated)')
      .requiredOption('--source <url>', 'every broker of the primary cluster: [user[/password]@]host:port,host:port')
      .option('--mode <mode>', 'enqueue-and-dequeue (mirror) or enqueue-only', 'enqueue-and-dequeue'),
  ).action(
    action(async (queue: string, o: AddOptions) => {
      const r = (await withBroker(o, (c) => c.request('DR-ADD', 'broker', queue, { queue, source: o.source, mode: o.mode }))) as Record<string, unknown>;
      print(o, r, () => `DR queue ${queue} added (${String(r.mode)} from ${String(r.source)})`);
    }),
  );

  addBrokerOption(dr.command('del <queue>').description('stop replicating a queue (it stays, as a normal queue)')).action(
    action(async (queue: string, o: BrokerOption) => {
      const r = await withBroker(o, (c) => c.request('DR-DEL', 'broker', queue, { queue }));
      print(o, r, () => `DR queue ${queue} removed`);
    }),
  );

  addBrokerOption(dr.command('list').description('list DR queues')).action(
    action(async (o: BrokerOption) => {
      const r = (await withBroker(o, (c) => c.request('DR-LIST', 'broker', 'broker'))) as { queues: Array<Record<string, unknown>> };
      print(o, r.queues, () => table(r.queues, ['queue', 'source', 'mode', 'state']));
    }),
  );

  addBrokerOption(dr.command('status [queue...]').description('per queue: source and applied position, lag, link state, last error')).action(
    action(async (queues: string[], o: BrokerOption) => {
      const r = (await withBroker(o, (c) => c.request('DR-STATUS', 'broker', 'broker', { queues: queues.join(',') }))) as { queues: Array<Record<string, unknown>> };
      print(o, r.queues, () =>
        table(
          r.queues.map((q) => ({ ...q, 'lag-seconds': typeof q['lag-seconds'] === 'number' ? (q['lag-seconds'] as number).toFixed(1) : q['lag-seconds'] })),
          ['queue', 'state', 'link', 'source-position', 'applied-position', 'lag-changes', 'lag-seconds', 'depth', 'last-error'],
        ),
      );
    }),
  );

  addBrokerOption(dr.command('activate [queue...]').description('open DR queues to clients (all of them if none is named); replication to them stops'))
    .option('--all', 'confirm activating every DR queue when none is named')
    .action(
      action(async (queues: string[], o: BrokerOption & { all?: boolean }) => {
        if (queues.length === 0 && !o.all) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'name the queues to activate, or pass --all to activate every DR queue');
        const r = (await withBroker(o, (c) => c.request('DR-ACTIVATE', 'broker', 'broker', { queues: queues.join(',') }))) as { activated: string[]; already: string[] };
        print(o, r, () => [r.activated.length ? `activated: ${r.activated.join(' ')}` : 'nothing to activate', r.already.length ? `already active: ${r.already.join(' ')}` : ''].filter(Boolean).join('\n'));
      }),
    );
}
