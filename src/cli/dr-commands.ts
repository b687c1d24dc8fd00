// tandem dr add|del|list|status|activate|switchover|demote|reattach: disaster recovery queues
// on a secondary broker, and the round trip between the two sites (see docs/dr.md).
import type { Command } from 'commander';
import { readPasswordFile } from '../ops/password-file.js';
import { TandemError } from '../broker/errors.js';
import { redact } from '../ops/secrets.js';
import { action, addBrokerOption, print, table, withBroker, type BrokerOption } from './common.js';
import { timeoutMsOf } from './broker-address.js';

interface AddOptions extends BrokerOption {
  source: string;
  sourcePasswordFile?: string;
  mode: string;
  exchanges: string;
}

/** A password from a file (- for stdin), so it is in no argument ps shows; `option` names it in errors. */
function passwordFrom(file: string | undefined, option: string): string | undefined {
  if (file === undefined) return undefined;
  try {
    // Bounded (/dev/zero read gigabytes; a directory was a bare EISDIR, exit 1), by the rule of password-file.ts.
    return readPasswordFile(file === '-' ? 0 : file, option);
  } catch (err) {
    throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', (err as Error).message);
  }
}

export function drCommands(program: Command): void {
  const dr = program.command('dr').description('disaster recovery: queues replicated from another cluster (run against the secondary)');

  addBrokerOption(
    dr
      .command('add <queue>')
      .description('replicate a queue from the primary cluster to this broker (passive until activated)')
      .requiredOption('--source <url>', 'every broker of the primary cluster: [amqps:][user@]host:port,host:port (amqps: is TLS, verified with the broker\'s dr-tls-ca; user/password@ works, but ps shows it)')
      .option('--source-password-file <file>', "the source user's password: first line of FILE (nothing after it), - for stdin; kept in the data directory (0600), never in the journal")
      .option('--mode <mode>', 'enqueue-and-dequeue (mirror) or enqueue-only', 'enqueue-and-dequeue')
      .option('--exchanges <names>', "exchanges binding the queue copied with it: comma-separated names, * wildcards; '' none", '*'),
  ).action(
    action(async (queue: string, o: AddOptions) => {
      // Before connecting: a bad file is a usage error (exit 2), not hidden behind an unreachable broker (69).
      const password = passwordFrom(o.sourcePasswordFile, '--source-password-file');
      const r = (await withBroker(o, (c) => c.request('DR-ADD', 'broker', queue, { queue, source: o.source, mode: o.mode, exchanges: o.exchanges, password }))) as Record<string, unknown>;
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
      print(o, r.queues, () => table(r.queues, ['queue', 'source', 'mode', 'role', 'epoch']));
    }),
  );

  addBrokerOption(dr.command('status [queue...]').description('per queue: source and applied position, lag, link state, last error')).action(
    action(async (queues: string[], o: BrokerOption) => {
      const r = (await withBroker(o, (c) => c.request('DR-STATUS', 'broker', 'broker', { queues: queues.join(',') }))) as { queues: Array<Record<string, unknown>> };
      print(o, r.queues, () =>
        table(
          r.queues.map((q) => ({ ...q, 'lag-seconds': typeof q['lag-seconds'] === 'number' ? (q['lag-seconds'] as number).toFixed(1) : q['lag-seconds'] })),
          ['queue', 'role', 'epoch', 'link', 'source-position', 'applied-position', 'lag-changes', 'lag-seconds', 'divergence-point', 'quarantined', 'depth', 'last-error'],
        ),
      );
    }),
  );

  addBrokerOption(
    dr
      .command('activate [queue...]')
      .description('open DR queues to clients (all of them if none is named); replication to them stops, and the old source is told to stop serving them (demoted) as soon as it answers')
      .option('--all', 'confirm activating every DR queue when none is named')
      .option('--keep-source-serving', 'do not tell the old source: it may go on serving the queues too (a drill, or a split you chose; both sites then take writes)'),
  ).action(
    action(async (queues: string[], o: BrokerOption & { all?: boolean; keepSourceServing?: boolean }) => {
      if (queues.length === 0 && !o.all) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'name the queues to activate, or pass --all to activate every DR queue');
      const keep = o.keepSourceServing === true;
      const r = (await withBroker(o, (c) => c.request('DR-ACTIVATE', 'broker', 'broker', { queues: queues.join(','), ...(keep ? { 'keep-source-serving': true } : {}) }))) as {
        activated: string[];
        already: string[];
        'source-told'?: boolean;
        'old-sources'?: string[];
      };
      const sources = (r['old-sources'] ?? []).join(' and ') || 'the old source';
      print(o, r, () =>
        [
          r.activated.length ? `activated: ${r.activated.join(' ')}` : 'nothing to activate',
          r.already.length ? `already active: ${r.already.join(' ')}` : '',
          // A broker without this reply (older) decided by itself: nothing is claimed for it.
          r.activated.length === 0 || r['source-told'] === undefined
            ? ''
            : r['source-told']
              ? `old source ${sources} is told to stop serving ${r.activated.join(' ')}: at once if it answers, else every 2 s until it does (it turns diverged and refuses clients on them until 'tandem dr reattach')`
              : `old source ${sources} is NOT told (--keep-source-serving: a drill, or a split you chose): it may still serve ${r.activated.join(' ')}, both sites taking writes; 'tandem dr demote ${r.activated.join(' ')} -b <old source>' when that is no longer meant`,
        ]
          .filter(Boolean)
          .join('\n'),
      );
    }),
  );

  addBrokerOption(
    dr
      .command('switchover [queue...]')
      .description('planned move (run against the secondary): the source stops serving the queues, the copies catch up and serve here, the old source follows this site')
      .option('--all', 'switch over every passive DR queue here when none is named')
      .option('--reverse-source <url>', 'the brokers of this site as the old source reaches them: [user@]host:port,... (an admin of this site when it requires credentials; default: the -b address, or on an HA site whose ha-brokers-url lists it, every broker listed there)')
      .option('--reverse-source-password-file <file>', "that user's password: first line of FILE (nothing after it), - for stdin; kept in both sites' data directories (0600), never in a journal"),
  ).action(
    action(async (queues: string[], o: BrokerOption & { all?: boolean; reverseSource?: string; reverseSourcePasswordFile?: string }) => {
      if (queues.length === 0 && !o.all) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'name the queues to switch over, or pass --all to switch over every passive DR queue');
      // Checked as every --timeout is (digits only): Number() took '0x10' as 16 s.
      const seconds = timeoutMsOf(o.timeout, 10) / 1000;
      const password = passwordFrom(o.reverseSourcePasswordFile, '--reverse-source-password-file');
      const body = { queues: queues.join(','), all: o.all === true, timeout: Math.round(seconds * 1000), 'reverse-source': o.reverseSource ?? o.broker, ...(o.reverseSource === undefined ? { 'reverse-source-default': true } : {}), ...(password !== undefined ? { 'reverse-password': password } : {}) };
      // The broker bounds the switchover by --timeout; the request itself may take that long and the last step's few seconds.
      const r = (await withBroker({ ...o, timeout: String(seconds + 15) }, (c) => c.request('DR-SWITCHOVER', 'broker', 'broker', body))) as Record<string, unknown>;
      print(o, r, () =>
        [
          `switched over: ${(r.switched as string[]).join(' ')} (epoch ${String(r.epoch)}); this site serves them`,
          r['old-source-following'] ? `${String(r['old-source'])} is now their passive copy, following ${String(r['reverse-source'])}` : String(r.note ?? ''),
        ].join('\n'),
      );
    }),
  );

  addBrokerOption(
    dr
      .command('demote <queue...>')
      .description('run on an old source whose DR copy was activated elsewhere: refuse clients on these queues until they are reattached')
      .option('--source <url>', 'the site that serves the queues now (named in the refusals)'),
  ).action(
    action(async (queues: string[], o: BrokerOption & { source?: string }) => {
      const r = (await withBroker(o, (c) => c.request('DR-DEMOTE', 'broker', 'broker', { queues: queues.join(','), ...(o.source ? { peer: o.source } : {}) }))) as { demoted: string[]; already: string[] };
      print(o, r, () => [r.demoted.length ? `demoted (refusing clients): ${r.demoted.join(' ')}` : '', r.already.length ? `already not serving here: ${r.already.join(' ')}` : ''].filter(Boolean).join('\n'));
    }),
  );

  addBrokerOption(
    dr
      .command('reattach <queue...>')
      .description('run on the old source after a disaster: quarantine what never crossed, then follow the site that serves the queues now from the divergence point')
      .requiredOption('--source <url>', 'every broker of the site that serves the queues now: [user@]host:port,host:port (user/password@ works, but ps shows it)')
      .option('--source-password-file <file>', "the source user's password: first line of FILE (nothing after it), - for stdin; kept in the data directory (0600), never in the journal"),
  ).action(
    action(async (queues: string[], o: BrokerOption & { source: string; sourcePasswordFile?: string }) => {
      const password = passwordFrom(o.sourcePasswordFile, '--source-password-file');
      const r = (await withBroker(o, (c) => c.request('DR-REATTACH', 'broker', 'broker', { queues: queues.join(','), source: o.source, ...(password !== undefined ? { password } : {}) }))) as {
        reattached: string[];
        already: string[];
        quarantined: Record<string, number>;
        'divergence-point': Record<string, number>;
      };
      print(o, r, () =>
        [
          ...r.reattached.map((q) => `${q}: passive copy of ${redact(o.source)} from divergence point ${r['divergence-point'][q]}; ${r.quarantined[q] ?? 0} message(s) that never crossed are in ${q}.dr-diverged`),
          r.already.length ? `already passive copies of ${redact(o.source)}: ${r.already.join(' ')}` : '',
        ]
          .filter(Boolean)
          .join('\n'),
      );
    }),
  );
}
